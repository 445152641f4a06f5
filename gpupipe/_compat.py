"""The package's missing names: those imported on first use, and old names that keep working for one release,
each with a ``DeprecationWarning`` naming its new home.

- Public names whose modules import torch (``LAZY``): ``import gpupipe`` (and so ``python -m gpupipe.pack``)
  starts without torch; ``gpupipe.loader`` or ``from gpupipe import Loader`` imports the module when first
  asked for, and the name is a plain attribute from then on.

- Names ``gpupipe`` exported before its ``__all__`` became the documented API: the rest of
  ``gpupipe.ops.__all__`` (``Op``, ``Effect``, ``OP_TYPES``, ...), still found as ``gpupipe.<name>``.
- Modules moved into packages in 0.3 (``gpupipe.build`` -> ``gpupipe.loading.factory``, ...):
  ``import gpupipe.build`` and ``from gpupipe.build import X`` still work (``MOVED_MODULES``), served by
  a finder on ``sys.meta_path`` that hands out the module at its new home.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from . import ops

#: Old module -> its home since 0.3 (removed in 0.4).
MOVED_MODULES = {
    "gpupipe.build": "gpupipe.loading.factory",
    "gpupipe.options": "gpupipe.loading.steps",
    "gpupipe.config": "gpupipe.loading.config",
    "gpupipe.dataloader": "gpupipe.loading.loader",
    "gpupipe.epochs": "gpupipe.loading.epochs",
    "gpupipe.sampling": "gpupipe.loading.sampling",
    "gpupipe.frameworks": "gpupipe.loading.frameworks",
    "gpupipe.stats": "gpupipe.loading.stats",
    "gpupipe.batch": "gpupipe.loading.transfer",
    "gpupipe.batchaug": "gpupipe.loading.mixing",
    "gpupipe.agreement": "gpupipe.loading.agreement",
    "gpupipe.spec": "gpupipe.plan.spec",
    "gpupipe.seeding": "gpupipe.plan.seeding",
    "gpupipe.scan": "gpupipe.sources.scan",
    "gpupipe.shardfmt": "gpupipe.shards.format",
    "gpupipe.filelock": "gpupipe.fileio",
    "gpupipe.bench.demo": "gpupipe.demo.photos",
    "gpupipe.bench.demo_tasks": "gpupipe.demo.tasks",
    "gpupipe.sources.tarindex": "gpupipe.shards.tarindex",
}


def _warn_moved(old: str, new: str) -> None:
    warnings.warn(
        f"{old} is deprecated: it moved to {new} (the old name goes in gpupipe 0.4)", DeprecationWarning, stacklevel=3
    )


class _MovedLoader(importlib.abc.Loader):
    """Serves an old module name with the module at its new home (the same object, not a copy)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        _warn_moved(spec.name, self.new)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module ran at its new home."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the names in ``MOVED_MODULES`` (and only those)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED_MODULES.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _MovedLoader(new))


def install_moved_finder() -> None:
    """Put the finder for moved modules on ``sys.meta_path`` (once per process)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())


#: Public name -> the module (under ``gpupipe``) it comes from, imported on first use; ``gpupipe/__init__.py``
#: imports the same names from the same modules for type checkers (tests/test_lazy_imports.py holds them equal).
LAZY = {
    "autocast_dtype": "amp",
    "choose_amp": "amp",
    "DataLoader": "interop",
    "UnsupportedTransform": "interop",
    "from_torchvision": "interop",
    "LoaderConfig": "loading.config",
    "loader": "loading.factory",
    "Loader": "loading.loader",
    "RankShare": "loading.sampling",
    "StatsSummary": "loading.stats",
}
#: The subpackages ``import gpupipe`` imported before ``LAZY`` (found as ``gpupipe.<name>``): imported on first use.
LAZY_MODULES = ("amp", "backends", "interop")


def package_attribute(name: str) -> Any:
    """``gpupipe.<name>`` for a name the package has not set (its ``__getattr__``): a name of ``LAZY`` or
    ``LAZY_MODULES``, imported now, else an old name (``moved_attribute``).

    Raises:
        AttributeError: any other name, as for a module without it.
    """
    if name in LAZY_MODULES:
        return importlib.import_module(f"gpupipe.{name}")
    module = LAZY.get(name)
    if module is None:
        return moved_attribute(name)
    value = getattr(importlib.import_module(f"gpupipe.{module}"), name)
    setattr(sys.modules["gpupipe"], name, value)  # found directly from now on
    return value


def package_dir() -> list[str]:
    """``dir(gpupipe)`` (the package's ``__dir__``): its names with those of ``__all__`` not imported yet
    (``LAZY``), so tab completion shows the whole public API."""
    package = sys.modules["gpupipe"]
    return sorted(set(vars(package)) | set(package.__all__))


def moved_attribute(name: str) -> Any:
    """``gpupipe.<name>`` for a name ``gpupipe`` no longer has: a name of ``gpupipe.ops`` it no longer
    exports, or a module that moved (the package's ``__getattr__``, asked only for missing names).

    Raises:
        AttributeError: any other name, as for a module without it.
    """
    module = MOVED_MODULES.get(f"gpupipe.{name}")
    if module is not None:
        _warn_moved(f"gpupipe.{name}", module)
        return importlib.import_module(module)
    if name not in ops.__all__:
        raise AttributeError(f"module 'gpupipe' has no attribute {name!r}")
    warnings.warn(f"gpupipe.{name} is deprecated: use gpupipe.ops.{name}", DeprecationWarning, stacklevel=2)
    return getattr(ops, name)


install_moved_finder()  # on importing gpupipe: old module paths (gpupipe.build, ...) keep working for one release
