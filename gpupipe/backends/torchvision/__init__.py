"""The torchvision backend: ``torchvision.io`` decoding and ``transforms.v2`` kernels in DataLoader workers.

``backend`` plans batches and finishes them, ``dataset`` decodes and
transforms one sample in a worker and stacks a batch, ``lowering``
applies each op.
"""

from .backend import TorchvisionBackend

__all__ = ["TorchvisionBackend"]
