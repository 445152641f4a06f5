"""``import gpupipe`` and the packer start without torch (~3 s of imports a process on the 2-core VM): the public
names whose modules import torch are imported on their first use, and are the same objects as before."""

import ast
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import gpupipe
from gpupipe import _compat
from helpers import make_image_folder

INIT = Path(gpupipe.__file__)


def type_checking_imports() -> dict:
    """``{name: module}`` imported under ``if TYPE_CHECKING:`` in ``gpupipe/__init__.py``."""
    out = {}
    for node in ast.parse(INIT.read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.level == 1, ast.unparse(imp)
                out.update({alias.name: imp.module for alias in imp.names})
    return out


def test_the_lazy_names_are_the_ones_imported_for_type_checkers_and_the_same_objects():
    assert type_checking_imports() == _compat.LAZY and set(_compat.LAZY) <= set(gpupipe.__all__)
    for name, module in _compat.LAZY.items():
        assert getattr(gpupipe, name) is getattr(sys.modules[f"gpupipe.{module}"], name)
        assert name in vars(gpupipe), f"{name}: an attribute once imported"


def test_the_subpackages_import_gpupipe_imported_before_are_still_found_as_attributes():
    code = ("import sys, gpupipe\nassert 'torch' not in sys.modules\n"
            "print(gpupipe.amp.__name__, gpupipe.backends.__name__, gpupipe.interop.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.stdout.split() == ["gpupipe.amp", "gpupipe.backends", "gpupipe.interop"], proc.stderr


def test_a_name_neither_lazy_nor_old_is_an_attribute_error_and_an_old_one_still_warns():
    try:
        gpupipe.no_such_name  # noqa: B018
    except AttributeError as err:
        assert "no_such_name" in str(err)
    else:
        raise AssertionError("no AttributeError")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert gpupipe.Op is gpupipe.ops.Op  # an old name: gpupipe.ops.Op
    assert [w.category for w in caught] == [DeprecationWarning]


def test_import_gpupipe_and_a_pack_run_without_torch_and_torch_names_import_it_on_use(tmp_path):
    """The packer's command line packs and verifies a folder without importing torch; ``from gpupipe import
    loader`` then imports it (in a new process: this one has torch already)."""
    src = tmp_path / "src"
    make_image_folder(src, {"a": 3, "b": 2})
    code = textwrap.dedent(f"""
        import runpy, sys
        import gpupipe
        assert "torch" not in sys.modules, "import gpupipe"
        for argv in ([{str(src)!r}, {str(tmp_path / "dst")!r}, "-q", "--workers", "1"],
                     ["--verify", {str(tmp_path / "dst")!r}]):
            sys.argv = ["gpupipe.pack", *argv]
            try:
                runpy.run_module("gpupipe.pack", run_name="__main__", alter_sys=True)
            except SystemExit as exit_:
                assert not exit_.code, exit_.code
        assert "torch" not in sys.modules, "python -m gpupipe.pack"
        from gpupipe import Loader, loader
        assert "torch" in sys.modules and gpupipe.loader is loader and gpupipe.Loader is Loader
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.endswith("ok\n"), proc.stdout + proc.stderr
    assert (tmp_path / "dst" / "manifest.json").is_file()
