"""gpupipe as a user installs it: the wheel and sdist built from this tree, their files and metadata,
and the installed copy run outside the source tree (``python -m gpupipe``, the commands, the demo, the
extras each missing optional package names).

The wheel is built once per module, offline (``pip wheel --no-deps --no-build-isolation``), from a
copy of the tree in ``tmp_path`` (an in-tree build leaves ``build/``, whose stale modules setuptools
would ship); it is installed with ``pip install --target`` and run with that folder first on
``PYTHONPATH``, from a folder that is not the tree.
"""

from __future__ import annotations

import email
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from helpers import env_without, make_image_folder

ROOT = Path(__file__).resolve().parents[1]
#: Not part of a clone a user builds from: environments, caches, build output.
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", "site", "build", "dist", "*.egg-info", "__pycache__", "*.pyc", ".*_cache", ".hypothesis"
)
#: Pages and scripts that tell users which extras to install (the changelog's history excluded).
DOC_FILES = [
    "README.md",
    ".ci/run",
    *(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md") if p.name != "changelog.md"),
]


def _setuptools_version() -> tuple[int, ...]:
    try:
        version = importlib.metadata.version("setuptools")  # not imported here: it replaces distutils
    except importlib.metadata.PackageNotFoundError:
        return ()
    return tuple(int(part) for part in re.findall(r"\d+", version)[:2])


def _build_requirement() -> int:
    """The setuptools major version pyproject.toml's [build-system] asks for."""
    found = re.search(r'requires = \["setuptools>=(\d+)', (ROOT / "pyproject.toml").read_text())
    assert found, "pyproject.toml's [build-system] should require setuptools>=N"
    return int(found.group(1))


def _python(*args: str, cwd: Path | None = None) -> str:
    """Runs this Python with ``args``; its stdout (a failure shows both streams)."""
    proc = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """``{"wheel", "sdist", "site", "base"}``: built from a copy of the tree, the wheel installed in ``site``."""
    have = _setuptools_version()
    if importlib.util.find_spec("pip") is None or not have or have[0] < _build_requirement():
        pytest.skip(
            f"building offline needs pip and setuptools>={_build_requirement()} in this environment "
            f"(setuptools found: {have or 'none'})"
        )
    base = tmp_path_factory.mktemp("wheel")
    src, out, site = base / "src", base / "dist", base / "site"
    shutil.copytree(ROOT, src, ignore=NOT_COPIED, symlinks=True)
    offline = ["--no-deps", "--no-index", "-q"]
    _python("-m", "pip", "wheel", *offline, "--no-build-isolation", "-w", str(out), ".", cwd=src)
    sdist = _python("-c", f"from setuptools import build_meta; print(build_meta.build_sdist({str(out)!r}))", cwd=src)
    (wheel,) = out.glob("gpupipe-*.whl")
    _python("-m", "pip", "install", *offline, "--no-compile", "--target", str(site), str(wheel))
    return {"wheel": wheel, "sdist": out / sdist.split()[-1], "site": site, "base": base}


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(z.read(name))


def _package_files(root: Path = ROOT) -> set[str]:
    """Every file of the gpupipe package in the tree at ``root`` (code and data), as ``gpupipe/...``."""
    return {
        p.relative_to(root).as_posix()
        for p in (root / "gpupipe").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc" and not p.name.startswith(".")
    }


def test_the_wheel_holds_the_whole_package_and_nothing_else(built):
    with zipfile.ZipFile(built["wheel"]) as z:
        names = set(z.namelist())
    info = {n for n in names if n.split("/")[0].endswith(".dist-info")}
    # every module and data file (py.typed) of the tree it was built from; no test, cache or stray folder
    assert names - info == _package_files(built["base"] / "src")
    assert "gpupipe/py.typed" in names and "gpupipe/__main__.py" in names
    assert {n.split("/", 1)[1] for n in info} >= {"METADATA", "WHEEL", "RECORD", "licenses/LICENSE"}
    assert built["wheel"].stat().st_size < 2_000_000


def test_the_wheel_metadata_is_what_pip_show_and_pypi_show(built):
    import gpupipe

    meta = _metadata(built["wheel"])
    assert meta["Name"] == "gpupipe"
    assert meta["Version"] == gpupipe.__version__
    assert meta["Requires-Python"] == ">=3.10"
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert meta["Description-Content-Type"] == "text/markdown"
    assert "DALI" in meta["Summary"] and meta.get_payload().startswith("# gpupipe")
    requires = meta.get_all("Requires-Dist")
    assert {re.split(r"[ ;<>=\[]", r)[0] for r in requires if "extra ==" not in r} == {
        "torch", "torchvision", "pillow", "numpy", "tqdm", "nvidia-dali-cuda120"
    }  # fmt: skip


def test_the_version_says_what_the_changelog_says():
    """Under an ``Unreleased`` heading the version is a development release after the last release (a wheel
    built from main is not the release it grew from); after a release, exactly that release."""
    version_module = pytest.importorskip("packaging.version")
    import gpupipe

    headings = re.findall(r"^## (\S+)", (ROOT / "docs" / "changelog.md").read_text(), flags=re.M)
    released = [h for h in headings if h != "Unreleased"]
    current = version_module.Version(gpupipe.__version__)
    if headings[0] == "Unreleased":
        assert current.is_devrelease and current > version_module.Version(released[0]), (current, released[0])
    else:
        assert str(current) == headings[0]


def test_every_extra_the_docs_and_messages_name_is_in_the_wheel(built):
    extras = set(_metadata(built["wheel"]).get_all("Provides-Extra"))
    named: dict[str, str] = {}
    for rel in DOC_FILES:
        text = (ROOT / rel).read_text()
        for group in re.findall(r"(?:gpupipe|\.whl|pip install (?:-e )?[\"']?\.)\[([^\]{}]+)\]", text):
            named.update({e.strip(): rel for e in group.split(",")})
    for path in (ROOT / "gpupipe").rglob("*.py"):  # the messages that tell a user what to install
        for group in re.findall(r"gpupipe\[([^\]{}]+)\]", path.read_text()):
            named.update({e.strip(): str(path.relative_to(ROOT)) for e in group.split(",")})
    from gpupipe.remote.urls import EXTRAS

    named.update({e: "gpupipe/remote/urls.py EXTRAS" for e in EXTRAS.values()})
    assert {"bench", "s3", "gcs", "http", "remote", "test", "docs", "lint", "torchvision"} <= set(named)
    assert {e: where for e, where in named.items() if e not in extras} == {}


def _run(built, *args: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    env = dict(env or os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(built["site"]), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, *args], cwd=built["base"], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_installed_commands_run_outside_the_tree(built):
    where = _run(built, "-c", "import gpupipe, importlib.metadata as m; print(gpupipe.__file__, m.version('gpupipe'))")
    assert where.returncode == 0, where.stderr
    import gpupipe

    assert where.stdout.split() == [str(built["site"] / "gpupipe" / "__init__.py"), gpupipe.__version__]
    listing = _run(built, "-m", "gpupipe")
    assert listing.returncode == 0 and listing.stdout.startswith(f"gpupipe {gpupipe.__version__}:"), listing
    for command in ("gpupipe.pack", "gpupipe.bench", "gpupipe.demo"):
        helped = _run(built, "-m", command, "--help")
        assert helped.returncode == 0 and helped.stdout.startswith(f"usage: python -m {command}"), helped
    demo = _run(built, "-m", "gpupipe.demo", "demo", "--images", "4", "--classes", "2", "--workers", "1")
    assert demo.returncode == 0, demo.stderr
    assert sorted(p.name for p in (built["base"] / "demo").iterdir() if p.is_dir()) == ["class_00", "class_01"]
    assert "examples/train_imagefolder.py, are in a clone" in demo.stdout  # no example path that is not there


def test_a_missing_optional_package_names_the_extra_that_brings_it(built, tmp_path):
    """Every optional package (and DALI) hidden: ``import gpupipe`` and its subpackages still work, and each
    feature that needs one names the extra that brings it (which the wheel provides), or DALI's package."""
    extras = set(_metadata(built["wheel"]).get_all("Provides-Extra"))
    hidden = ["fsspec", "s3fs", "gcsfs", "aiohttp", "matplotlib", "psutil", "lightning", "accelerate", "timm"]
    make_image_folder(tmp_path / "data", {"a": 1, "b": 1})
    script = (
        "import sys, gpupipe, gpupipe.loading, gpupipe.interop, gpupipe.remote, gpupipe.pack, gpupipe.bench\n"
        "print(gpupipe.__file__)\n"
        "for url, backend in zip(sys.argv[1::2], sys.argv[2::2]):\n"
        "    try:\n"
        "        gpupipe.loader(url, 'val', batch_size=2, backend=backend)\n"
        "    except ImportError as err:\n"
        "        print(err)\n"
    )
    urls = ["s3://bucket/train", "gs://bucket/train", "https://127.0.0.1:9/train", str(tmp_path / "data")]
    backends = ["torchvision", "torchvision", "torchvision", "dali-cpu"]
    args = [a for pair in zip(urls, backends) for a in pair]
    proc = _run(built, "-c", script, *args, env=env_without(tmp_path / "hidden", [*hidden, "torchcodec", "nvidia"]))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == str(built["site"] / "gpupipe" / "__init__.py") and len(lines) == 5, lines
    named = [re.search(r"pip install 'gpupipe\[(\w+)\]'", line) for line in lines[1:4]]
    assert [m.group(1) if m else line for m, line in zip(named, lines[1:4])] == ["s3", "gcs", "http"]
    assert {"s3", "gcs", "http"} <= extras
    assert re.search(r"backend 'dali-cpu' needs the package 'nvidia.dali'.*pip install nvidia-dali-cuda1\d0", lines[4])


def _sdist_names(sdist: Path) -> set[str]:
    with tarfile.open(sdist) as tar:
        return {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}


def test_the_sdist_holds_the_package_its_metadata_and_licence(built):
    names = _sdist_names(built["sdist"])
    assert {"pyproject.toml", "README.md", "LICENSE", "PKG-INFO", "gpupipe/py.typed"} <= names
    assert _package_files(built["base"] / "src") <= names
    assert not {n for n in names if n.split("/")[0] in ("site", "build", "dist", ".venv", "benchmarks")}


def test_the_sdist_ships_no_half_of_the_tests(built):
    names = _sdist_names(built["sdist"])
    shipped_tests = {n for n in names if n.startswith("tests/")}
    assert not shipped_tests or {"tests/conftest.py", "tests/helpers.py", "tests/servers.py"} <= shipped_tests
