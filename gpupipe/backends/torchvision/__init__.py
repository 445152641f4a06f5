"""The torchvision backend: ``torchvision.io`` decoding and ``transforms.v2`` kernels in DataLoader workers.

:mod:`.backend` plans batches and finishes them, :mod:`.dataset` decodes and
transforms one sample in a worker and stacks a batch, :mod:`.lowering`
applies each op.
"""

from .backend import TorchvisionBackend

__all__ = ["TorchvisionBackend"]
