"""A checked pipeline: the op list validated once, before any backend runs it.

Backends compile a ``PipelineSpec``, never a raw list, so every
structural mistake (no ``Decode`` first, a batch of unequal image sizes, an
op after the output step, an op that cannot carry the source's targets)
fails when the loader is built. Sizes come from each op's own
``output_size``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..ops import HW, BatchOp, Decode, Effect, Normalize, Op, Output, SanitizeBoxes
from ..ops.batch import MixingOp
from ..targets import TargetKind, handler


@dataclass(frozen=True)
class PipelineSpec:
    """A validated pipeline.

    Attributes:
        ops: the per-image ops, ``Decode`` first, without ``Normalize``, ``Output``,
            batch ops and ``SanitizeBoxes``.
        sizes: ``(h, w)`` of every image after each op of ``ops`` (``None``: varies per image).
        normalize: the pipeline's ``Normalize``; ``None`` means scale to ``[0, 1]``.
        output: dtype and memory format of the batch.
        size: ``(h, w)`` of every output image.
        batch_ops: ``MixUp`` / ``CutMix``, applied to whole batches on the device.
        target: the kind of target the pipeline carries.
        sanitize: which boxes survive (detection; the defaults when the pipeline has none).
        ignore_index: the mask value of pixels no image pixel maps to (segmentation).
    """

    ops: tuple[Op, ...]
    sizes: tuple[HW | None, ...]
    normalize: Normalize | None
    output: Output
    size: HW
    batch_ops: tuple[BatchOp, ...] = ()
    target: TargetKind = TargetKind.LABEL
    sanitize: SanitizeBoxes = SanitizeBoxes()
    ignore_index: int = 255

    @property
    def mean(self) -> tuple[float, float, float]:
        """Per-channel mean in ``[0, 1]`` units (zeros without ``Normalize``)."""
        return self.normalize.mean if self.normalize else (0.0, 0.0, 0.0)

    @property
    def std(self) -> tuple[float, float, float]:
        """Per-channel std in ``[0, 1]`` units (ones without ``Normalize``)."""
        return self.normalize.std if self.normalize else (1.0, 1.0, 1.0)

    def size_before(self, i: int) -> HW | None:
        """``(h, w)`` of the images op ``i`` receives (``None``: varies)."""
        return self.sizes[i - 1] if i > 0 else None


def build_spec(
    ops: Sequence[Op],
    output: Output | None = None,
    target: TargetKind | None = TargetKind.LABEL,
    ignore_index: int = 255,
) -> PipelineSpec:
    """Checks an op list and returns the spec the backends compile.

    Args:
        ops: the pipeline; ``Decode`` first, then geometry and pixel ops, an
            optional ``Normalize``, optional batch ops and an optional trailing ``Output``.
        output: the output step to use when ``ops`` has none.
        target: the kind of target the source gives (``None``: check the structure only).
        ignore_index: the source's mask value for "no class".

    Raises:
        ValueError: naming the offending op or position.
    """
    ops = list(ops)
    for i, op in enumerate(ops):
        if not isinstance(op, Op):
            raise ValueError(f"pipeline[{i}] is not a gpupipe op: {op!r}")
    if not ops or not isinstance(ops[0], Decode):
        raise ValueError(f"a pipeline must start with Decode(), got {ops[:1]!r}")
    last = ops[-1]
    if isinstance(last, Output):
        if output is not None and output != last:
            raise ValueError(f"the pipeline's {last!r} conflicts with the loader's {output!r}")
        output = last
        ops.pop()
    output = output or Output()
    for op in ops:
        if target is not None and target not in op.carries:
            raise ValueError(_cannot_carry(op, target))
    batch_ops: list[BatchOp] = []
    while ops and isinstance(ops[-1], BatchOp):
        batch_ops.insert(0, ops[-1])
        ops.pop()
    mixing = [op for op in batch_ops if isinstance(op, MixingOp)]
    if mixing and output.dtype == "uint8":
        raise ValueError(f"{mixing[0].name} mixes float images; it cannot give uint8 batches")

    image_ops, sizes, normalize, sanitize, size = [], [], None, None, None
    for i, op in enumerate(ops):
        where = f"pipeline[{i}]: {op.name}"
        if op.effect is Effect.BATCH:
            raise ValueError(f"{where} works on whole batches and must come last")
        if op.effect is Effect.OUTPUT:
            raise ValueError(f"{where}() must be the last op")
        if op.effect is Effect.DECODE and i > 0:
            raise ValueError(f"{where}() may appear only first")
        if op.needs_fixed_size and size is None:
            raise ValueError(
                f"{where} needs images of one size: put it after RandomResizedCrop, CenterCrop, RandomCrop, "
                "PadTo or Resize(size=(h, w))"
            )
        if sanitize is not None and op.effect is Effect.GEOMETRIC:
            raise ValueError(f"{where} comes after SanitizeBoxes(), which must follow every geometric op")
        if normalize is not None and op.effect is not Effect.TARGET:
            raise ValueError(f"{where} comes after Normalize(); Normalize must be last")
        if isinstance(op, Normalize):
            normalize = op
        elif isinstance(op, SanitizeBoxes):
            sanitize = op
        else:
            size = op.output_size(size)
            image_ops.append(op)
            sizes.append(size)
    if size is None:
        raise ValueError(
            "the pipeline gives images of varying size, which cannot be batched: end its geometry with "
            "RandomResizedCrop, CenterCrop, RandomCrop, PadTo or Resize(size=(h, w))"
        )
    return PipelineSpec(
        ops=tuple(image_ops),
        sizes=tuple(sizes),
        normalize=normalize,
        output=output,
        size=size,
        batch_ops=tuple(batch_ops),
        target=target or TargetKind.LABEL,
        sanitize=sanitize or SanitizeBoxes(),
        ignore_index=ignore_index,
    )


def _cannot_carry(op: Op, target: TargetKind) -> str:
    if op.effect is Effect.BATCH:
        why = f"it mixes whole images and class labels; mixing {target.title} is not supported"
    elif len(op.carries) == 1:
        only = handler(next(iter(op.carries)))
        why = f"it needs {only.title} ({only.sources})"
    else:
        why = f"it moves pixels without moving the {target.title}"
    return f"{op.name} cannot carry {target.title}: {why}"
