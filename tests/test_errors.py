"""``gpupipe.Error``: the one base of every exception gpupipe defines, each keeping its built-in base."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import gpupipe
from gpupipe.backends.common import NoUsableSample
from gpupipe.errors import DecodeError
from gpupipe.fileio import UnreadableFile
from gpupipe.images import ImageRefused
from helpers import make_image_folder

PACKAGE = Path(gpupipe.__file__).parent
BUILTIN_EXCEPTIONS = {name for name, value in vars(builtins).items()
                      if inspect.isclass(value) and issubclass(value, BaseException)}


def walk() -> tuple:
    """``({"module.Class": class}, {modules not importable here})``: every exception class defined at the
    top of a gpupipe module, and the modules that need a package this machine lacks (DALI, an extra)."""
    found, missing = {}, set()
    for info in pkgutil.walk_packages(gpupipe.__path__, "gpupipe.", onerror=lambda name: missing.add(name)):
        try:
            module = importlib.import_module(info.name)
        except ModuleNotFoundError as err:
            if (err.name or "").startswith("gpupipe"):
                raise
            missing.add(info.name)
            continue
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == info.name:
                found[f"{info.name}.{name}"] = value
    return found, missing


def imported_exceptions() -> dict:
    return walk()[0]


def classes_deriving_from_builtins() -> set:
    """``"module.Class"`` for every class statement in gpupipe's files (nested ones too) with a built-in
    exception among its bases, found by reading the source: a check that imports cannot miss."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(("gpupipe",) + path.relative_to(PACKAGE).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(base, ast.Name) and base.id in BUILTIN_EXCEPTIONS for base in node.bases):
                found.add(f"{module}.{node.name}")
    return found


def test_every_gpupipe_exception_derives_from_gpupipe_error():
    found = imported_exceptions()
    assert len(found) >= 11, sorted(found)  # Error and the 10 defined when it was introduced
    assert gpupipe.Error in found.values() and "Error" in gpupipe.__all__
    missing = sorted(name for name, cls in found.items() if not issubclass(cls, gpupipe.Error))
    assert not missing, f"derive these from gpupipe.Error (keeping their built-in base): {missing}"


def test_no_exception_class_hides_from_the_import_walk():
    """A class defined inside a function, or in a module the walk did not import, would escape the
    check above; every class statement with a built-in exception base must be one the walk saw."""
    found, missing = walk()
    in_source = {name for name in classes_deriving_from_builtins() if name.rsplit(".", 1)[0] not in missing}
    assert "gpupipe.pack.journal.PackError" in in_source, "the source scan finds class statements"
    assert in_source <= set(found), sorted(in_source - set(found))


@pytest.mark.parametrize("cls, builtin", [
    (gpupipe.PackError, RuntimeError),
    (gpupipe.SampleError, RuntimeError),
    (DecodeError, RuntimeError),
    (NoUsableSample, RuntimeError),
    (UnreadableFile, ValueError),
    (ImageRefused, ValueError),
    (gpupipe.RemoteError, Exception),
])
def test_each_exception_keeps_its_built_in_base(cls, builtin):
    assert issubclass(cls, gpupipe.Error) and issubclass(cls, builtin)
    assert not issubclass(cls, OSError), "none is an OSError that a caller would retry or skip"


def test_except_gpupipe_error_catches_what_the_packer_raises(tmp_path):
    make_image_folder(tmp_path / "src", {"a": 2})
    (tmp_path / "src" / "a" / "empty.jpg").write_bytes(b"")
    with pytest.raises(gpupipe.Error, match="empty.jpg") as info:
        gpupipe.pack.pack(tmp_path / "src", tmp_path / "out", on_error="raise", workers=1, progress=False)
    assert isinstance(info.value, gpupipe.SampleError) and isinstance(info.value, RuntimeError)
    assert [e.path for e in info.value.entries] == [str(tmp_path / "src" / "a" / "empty.jpg")]


def test_a_sample_error_survives_pickling_and_copying():
    """Errors cross process boundaries (DataLoader workers, torchrun ranks) by pickling."""
    import copy
    import pickle

    from gpupipe.errors import SampleError, Skipped

    entries = [Skipped("a.jpg", "empty file (0 bytes)"), Skipped("b.png", "cannot decode: truncated")]
    for err in (SampleError(entries[0]), SampleError(entries, "2 of 9 files cannot be used")):
        for again in (pickle.loads(pickle.dumps(err)), copy.copy(err)):
            assert type(again) is SampleError and str(again) == str(err) and again.entries == err.entries
    assert str(SampleError(entries[0])) == "a.jpg: empty file (0 bytes)"
    decode = pickle.loads(pickle.dumps(DecodeError("c.jpg", "bad Huffman code")))
    assert str(decode) == "cannot decode c.jpg: bad Huffman code" and decode.skipped == Skipped("c.jpg", "bad Huffman code")



def test_a_skipped_file_is_logged_once_on_the_skipped_logger(tmp_path, caplog):
    """Every sample left out is logged by ``gpupipe.skipped`` (not by the scan's logger), once, naming it."""
    root = tmp_path / "data"
    make_image_folder(root, {"a": 3, "b": 3})
    broken = root / "a" / "broken.jpg"
    broken.write_bytes(b"\xff\xd8 not a jpeg")
    with caplog.at_level("WARNING", logger="gpupipe.skipped"):
        loader = gpupipe.loader(root, [gpupipe.Decode(), gpupipe.Resize((8, 8))], batch_size=2,
                                backend="torchvision", num_threads=0, on_error="skip")
    lines = [r for r in caplog.records if r.name == "gpupipe.skipped"]
    assert len(lines) == 1 and "broken.jpg" in lines[0].getMessage()
    assert [s.path for s in loader.skipped] == [str(broken)]
