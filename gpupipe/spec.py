"""A checked pipeline: the op list validated once, before any backend runs it.

Backends compile a :class:`PipelineSpec`, never a raw list, so every
structural mistake (no ``Decode`` first, a batch of unequal image sizes, an
op after the output step) fails when the loader is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from .ops import (
    FIXED_SIZE_OPS,
    GEOMETRY_OPS,
    BatchOp,
    CenterCrop,
    Decode,
    Normalize,
    Op,
    Output,
    RandomResizedCrop,
    Resize,
)


@dataclass(frozen=True)
class PipelineSpec:
    """A validated pipeline.

    Attributes:
        ops: the per-image ops, ``Decode`` first, without ``Normalize`` and ``Output``.
        normalize: the pipeline's ``Normalize``; ``None`` means scale to ``[0, 1]``.
        output: dtype and memory format of the batch.
        size: ``(h, w)`` of every output image.
        batch_ops: ``MixUp`` / ``CutMix``, applied to whole batches on the device.
    """

    ops: Tuple[Op, ...]
    normalize: Optional[Normalize]
    output: Output
    size: Tuple[int, int]
    batch_ops: Tuple[BatchOp, ...] = ()

    @property
    def mean(self) -> Tuple[float, float, float]:
        """Per-channel mean in ``[0, 1]`` units (zeros without ``Normalize``)."""
        return self.normalize.mean if self.normalize else (0.0, 0.0, 0.0)

    @property
    def std(self) -> Tuple[float, float, float]:
        """Per-channel std in ``[0, 1]`` units (ones without ``Normalize``)."""
        return self.normalize.std if self.normalize else (1.0, 1.0, 1.0)


def build_spec(ops: Sequence[Op], output: Optional[Output] = None) -> PipelineSpec:
    """Checks an op list and returns the spec the backends compile.

    Args:
        ops: the pipeline; ``Decode`` first, then geometry and pixel ops, an
            optional ``Normalize`` and an optional trailing ``Output``.
        output: the output step to use when ``ops`` has none.

    Raises:
        ValueError: naming the offending op or position.
    """
    ops = list(ops)
    for i, op in enumerate(ops):
        if not isinstance(op, Op):
            raise ValueError(f"pipeline[{i}] is not a gpupipe op: {op!r}")
    if not ops or not isinstance(ops[0], Decode):
        raise ValueError(f"a pipeline must start with Decode(), got {ops[:1]!r}")
    if isinstance(ops[-1], Output):
        if output is not None and output != ops[-1]:
            raise ValueError(f"the pipeline's {ops[-1]!r} conflicts with the loader's {output!r}")
        output = ops.pop()
    output = output or Output()
    batch_ops = []
    while ops and isinstance(ops[-1], BatchOp):
        batch_ops.insert(0, ops.pop())
    if batch_ops and output.dtype == "uint8":
        raise ValueError(f"{type(batch_ops[0]).__name__} mixes float images; it cannot give uint8 batches")

    image_ops, normalize, size = [], None, None
    for i, op in enumerate(ops):
        if isinstance(op, BatchOp):
            raise ValueError(f"pipeline[{i}]: {type(op).__name__} works on whole batches and must come last")
        if isinstance(op, FIXED_SIZE_OPS) and size is None:
            raise ValueError(
                f"pipeline[{i}]: {type(op).__name__} needs images of one size: put it after "
                "RandomResizedCrop, CenterCrop or Resize(size=(h, w))"
            )
        if isinstance(op, (Decode,)) and i > 0:
            raise ValueError(f"pipeline[{i}]: Decode() may appear only first")
        if isinstance(op, Output):
            raise ValueError(f"pipeline[{i}]: Output() must be the last op")
        if normalize is not None:
            raise ValueError(f"pipeline[{i}]: {type(op).__name__} comes after Normalize(); Normalize must be last")
        if isinstance(op, Normalize):
            normalize = op
            continue
        if isinstance(op, GEOMETRY_OPS):
            size = _geometry_output(op, size)
        image_ops.append(op)
    if size is None:
        raise ValueError(
            "the pipeline gives images of varying size, which cannot be batched: "
            "end its geometry with RandomResizedCrop, CenterCrop or Resize(size=(h, w))"
        )
    return PipelineSpec(ops=tuple(image_ops), normalize=normalize, output=output, size=size, batch_ops=tuple(batch_ops))


def _geometry_output(op: Op, size: Optional[Tuple[int, int]]) -> Optional[Tuple[int, int]]:
    """Returns the fixed ``(h, w)`` after ``op``, or ``None`` when it varies per image."""
    if isinstance(op, (RandomResizedCrop, CenterCrop)):
        if isinstance(op, CenterCrop) and size is not None and (op.size[0] > size[0] or op.size[1] > size[1]):
            raise ValueError(f"{op!r} is larger than the {size} images it receives")
        return op.size
    if isinstance(op, Resize):
        return op.size if isinstance(op.size, tuple) else None
    return size
