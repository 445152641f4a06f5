"""The op registry: every op class, its planner and each backend's lowering, each registered once.

An op class registers itself when it is defined (``Op`` subclasses do, unless
declared ``abstract=True``); its planner registers with ``planner`` next to its code in
``gpupipe.plan``, and each backend's lowering with its table's ``register`` next to its code in
``gpupipe/backends/<name>/lowering.py``. A second registration of a name, a planner or a lowering
is an error naming both. Everything else is derived: ``OP_TYPES``, the export lists, the docs'
op table, and the check that a backend lowers every op of a pipeline.

Users add an op of their own with ``register`` (see the development page).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..errors import Error
from ..targets import ALL_TARGETS, TargetKind

F = TypeVar("F", bound=Callable[..., Any])


class RegistryError(Error, ValueError):
    """An op, planner or lowering registered twice (both named), or registered for an unknown op."""


def _where(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


#: Every op class by name, in registration order.
OPS: dict[str, type] = {}
#: op type -> its planner ``planner(op, step) -> params`` (see ``gpupipe.plan.draws``).
PLANNERS: dict[type, Callable[..., Any]] = {}


def add_op(cls: type) -> None:
    """Registers op class ``cls`` under its name (called by ``Op.__init_subclass__``).

    Raises:
        RegistryError: another class holds the name, naming both.
    """
    old = OPS.get(cls.__name__)
    if old is not None and old is not cls:
        raise RegistryError(f"op {cls.__name__!r} registered twice: by {_where(old)} and by {_where(cls)}")
    OPS[cls.__name__] = cls


def add_planner(op: type, function: Callable[..., Any]) -> None:
    """Registers ``function`` as ``op``'s planner (``function(op, step) -> params``).

    Raises:
        RegistryError: ``op`` already has a planner, naming both.
    """
    _check_op(op, "planner")
    old = PLANNERS.get(op)
    if old is not None and old is not function:
        raise RegistryError(f"{op.__name__}: planner registered twice: {_where(old)} and {_where(function)}")
    PLANNERS[op] = function


def planner(*ops: type) -> Callable[[F], F]:
    """Decorator: registers the function as the planner of each of ``ops`` (see ``add_planner``)."""

    def register_planner(function: F) -> F:
        for op in ops:
            add_planner(op, function)
        return function

    return register_planner


@dataclass(frozen=True)
class Lowering(Generic[F]):
    """One entry of a backend's lowering table.

    Attributes:
        apply: the function that lowers the op (typed by the backend's Protocol).
        targets: the target kinds it carries.
        why: why the others are refused (for the error message).
        refuses: ``refuses(op) -> str``: why this lowering cannot keep the op's parameters (a fill per channel
            where the backend fills with one value), ``""`` when it can; checked when the loader is built.
    """

    apply: F
    targets: frozenset[TargetKind] = ALL_TARGETS
    why: str = ""
    refuses: Callable[[Any], str] | None = None


class LoweringTable(dict[type, Lowering[F]]):
    """One backend's lowerings: op type -> ``Lowering``. Filled by ``register``.

    Args:
        backend: the table's name (``"torchvision"``, ``"dali"``: one table for ``dali`` and ``dali-cpu``).
    """

    def __init__(self, backend: str) -> None:
        super().__init__()
        self.backend = backend

    def add(
        self,
        op: type,
        apply: F,
        targets: frozenset[TargetKind] = ALL_TARGETS,
        why: str = "",
        refuses: Callable[[Any], str] | None = None,
    ) -> None:
        """Registers ``apply`` as ``op``'s lowering.

        Raises:
            RegistryError: ``op`` already has one on this backend, naming both.
        """
        _check_op(op, f"{self.backend} lowering")
        old = self.get(op)
        if old is not None and old.apply is not apply:
            raise RegistryError(
                f"{op.__name__}: {self.backend} lowering registered twice: {_where(old.apply)} and {_where(apply)}"
            )
        if targets != ALL_TARGETS and not why:
            raise RegistryError(f"{op.__name__}: a {self.backend} lowering that refuses targets must say why")
        self[op] = Lowering(apply, targets if isinstance(targets, frozenset) else frozenset(targets), why, refuses)

    def register(
        self,
        *ops: type,
        targets: frozenset[TargetKind] = ALL_TARGETS,
        why: str = "",
        refuses: Callable[[Any], str] | None = None,
    ) -> Callable[[F], F]:
        """Decorator: registers the function as the lowering of each of ``ops`` (see ``add``)."""

        def register_lowering(function: F) -> F:
            for op in ops:
                self.add(op, function, targets, why, refuses)
            return function

        return register_lowering


#: Every backend's lowering table, by name (created by the first module that asks for it).
LOWERINGS: dict[str, LoweringTable] = {}


def lowering_table(backend: str) -> LoweringTable:
    """The lowering table of ``backend`` (``"torchvision"`` or ``"dali"``), created on first use."""
    return LOWERINGS.setdefault(backend, LoweringTable(backend))


def _check_op(op: type, what: str) -> None:
    if not isinstance(op, type) or OPS.get(op.__name__) is not op:
        raise RegistryError(f"a {what} for {op!r}, which is not a registered op (subclass gpupipe.ops.Op)")


def register(
    op: type,
    *,
    planner: Callable[..., Any] | None = None,
    lowerings: Mapping[str, Callable[..., Any]] = {},  # noqa: B006 -- read only
    targets: frozenset[TargetKind] = ALL_TARGETS,
    why: str = "",
    refuses: Mapping[str, Callable[[Any], str]] = {},  # noqa: B006 -- read only
) -> type:
    """Adds an op of one's own: its planner and its lowering on the backends one needs.

    The op class (a frozen dataclass subclassing ``Op``) registered itself when it
    was defined; this registers the rest. A pipeline holding the op on a backend without its lowering
    is refused when the loader is built, naming op and backend.

    Args:
        op: the op class.
        planner: ``planner(op, step) -> {name: (B, ...) array}`` drawing its parameters for a batch
            (``gpupipe.plan.Step``); ``None``: it draws none. A geometric op also returns
            ``size`` ``(B, 2)`` and ``affine`` ``(B, 2, 3)``.
        lowerings: backend table name (``"torchvision"``; ``"dali"`` serves ``dali`` and ``dali-cpu``)
            -> lowering: ``torchvision``: ``apply(item, params, op, spec)``; ``dali``:
            ``apply(graph, j, op)`` (see the backends' ``TorchvisionLowering`` / ``DaliLowering``).
        targets: the target kinds its lowerings carry; ``why``: why the others are refused.
        refuses: backend table name -> ``refuses(op) -> str``: why that lowering cannot keep this op's
            parameters (``""`` when it can); the loader refuses such a pipeline when it is built, and
            ``backend="auto"`` takes another backend that can.

    Returns:
        ``op``.

    Raises:
        RegistryError: a planner or lowering registered twice, or an unknown backend table name.
    """
    unknown = sorted(set(lowerings) - {"torchvision", "dali"})
    if unknown:
        raise RegistryError(f"{op.__name__}: no backend lowering table named {unknown}; use 'torchvision' or 'dali'")
    add_planner(op, planner if planner is not None else no_params)
    for backend, apply in lowerings.items():
        lowering_table(backend).add(op, apply, targets, why, refuses.get(backend))
    return op


def no_params(op: Any, step: Any) -> dict[str, Any]:
    """The planner of an op that draws nothing."""
    return {}


def unregister(op: type) -> None:
    """Removes ``op`` with its planner and lowerings (for tests that register toy ops)."""
    if OPS.get(op.__name__) is op:
        del OPS[op.__name__]
    PLANNERS.pop(op, None)
    for table in LOWERINGS.values():
        table.pop(op, None)


def op_types() -> tuple[type, ...]:
    """Every registered op class, in registration order."""
    return tuple(OPS.values())
