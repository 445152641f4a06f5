"""What a DALI lowering works on: the graph being built, and the table of lowerings (op type -> its
lowering, registered with ``@lowering(OpType)`` next to each function in ``lowering`` and
``augment``; one table for ``dali`` and ``dali-cpu``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ... import ops as O
from ...ops.registry import LoweringTable, lowering_table
from ...plan.spec import PipelineSpec
from ...targets.base import Kernel

if TYPE_CHECKING:
    from .targets import DaliTarget


class Graph:
    """What is being built: the image nodes, the target's state, the spec and the parameters
    (``params[j, name]``: op ``j``'s planned parameter as a node, see ``params``).

    The nodes are DALI ``DataNode`` values, ``Any`` to mypy (DALI is not analysed, see pyproject.toml).

    Args:
        spec: the spec the graph computes.
        params: the planned parameters as nodes.
        gpu: the image ops run on the GPU.
        decoder: the image decoder's keyword arguments.
        target: the DALI lowering of the source's targets (``targets``), with their state in the graph
            (``None``: nothing moves with the pixels).
        form: the ``"gpu"`` or ``"cpu"`` lowering of the ops whose best form differs by device (``forms``).
    """

    def __init__(
        self,
        spec: PipelineSpec,
        params,
        *,
        gpu: bool,
        decoder: dict,
        target: DaliTarget | None = None,
        state: Any = None,
        form: str = "cpu",
    ) -> None:
        self.spec = spec
        self.params = params
        self.gpu = gpu
        self.decoder = decoder  # decoder keyword arguments
        self.images: Any = None
        self.encoded: Any = None
        self.target = target
        self.state: Any = state
        self.form = form

    def p(self, j: int, name: str):
        return self.params[j, name]

    def on_device(self, node):
        """A per-sample CPU number moved next to the images, for arithmetic with them."""
        return node.gpu() if self.gpu and not isinstance(node, float) else node

    def hw(self, j: int, name: str = "size"):
        """``(h, w)`` parameter nodes of op ``j``."""
        size = self.p(j, name)
        return size[0], size[1]

    def geometric(self, j: int, op: O.Op, kernel: Kernel, fill: Any = 0, *, image: bool = True) -> None:
        """Applies op ``j``'s pixel ``kernel`` to the images (``fill`` where no pixel maps; not when
        ``image`` is ``False``: already done) and moves the target with it."""
        if image:
            self.images = kernel(self.images, fill=fill, nearest=False)
        if self.target is not None and self.state is not None:
            self.state = self.target.move(self.state, kernel, _OpParams(self, j), op, self.spec)


class DaliLowering(Protocol):
    """A DALI lowering: adds op ``j`` (``op``) of ``g.spec`` to the graph ``g``, with its planned parameters."""

    def __call__(self, g: Graph, j: int, op: Any, /) -> None: ...


#: op type -> its lowering, registered with ``@lowering(OpType)`` next to each function below
#: (one table for ``dali`` and ``dali-cpu``).
LOWERINGS: LoweringTable[DaliLowering] = lowering_table("dali")
lowering = LOWERINGS.register


class _OpParams:
    """Op ``j``'s planned parameters as nodes: ``params[name]``."""

    def __init__(self, g: Graph, j: int) -> None:
        self.g, self.j = g, j

    def __getitem__(self, name: str):
        return self.g.p(self.j, name)


__all__ = ["Graph", "DaliLowering", "LOWERINGS", "lowering"]
