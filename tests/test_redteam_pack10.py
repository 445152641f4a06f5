"""Red team, packing round 10 (issue 35, items 11 and 13 and their classes): every manifest ``--verify``
accepts opens in the loader, every one it cannot use is refused with a named error and no traceback
(hand-edited fields, odd JSON, a journal edited by hand, settings of the wrong type on a rerun); every
loader setting that governs reading skips the same files, with the same samples, whatever the source."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from helpers import CPU_BACKENDS, flat_folder, rewrite_manifest
from PIL import Image

import gpupipe
from gpupipe.fileio import sha256_hex
from gpupipe.pack import PackError, PackSettings, pack, verify
from gpupipe.shards import format as shardfmt
from gpupipe.sources.shards import Shards

PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    """A sound pack of 6 flat images in 3 classes (copied by each test that edits it)."""
    root = tmp_path_factory.mktemp("pack10")
    pack(flat_folder(root / "folder", 6), root / "packed", PackSettings(), workers=1, progress=False)
    return root / "packed"


def copy_of(packed: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "packed"
    shutil.copytree(packed, dst)
    return dst


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpupipe.pack", *map(str, args)], capture_output=True, text=True, timeout=120
    )


def opens(dst: Path) -> str:
    """'' when the loader's source opens the pack, else its error (which must be a named ValueError)."""
    try:
        Shards(dst)
    except ValueError as err:
        return str(err)
    return ""


# -- manifests the checker cannot use: a named error, never a traceback ------------------------------------


@pytest.mark.parametrize(
    "data, said",
    [
        (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),  # RecursionError inside json
        (b'{"version": ' + b"9" * 5000 + b"}", "manifest.json"),  # an int past Python's digit limit
    ],
    ids=["deeply-nested", "huge-int"],
)
def test_manifests_json_cannot_hold_are_named_by_verify_and_the_loader(packed, tmp_path, data, said):
    dst = copy_of(packed, tmp_path)
    (dst / shardfmt.MANIFEST).write_bytes(data)
    proc = cli("--verify", dst)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert said in proc.stdout and str(dst / shardfmt.MANIFEST) in proc.stdout
    assert str(dst / shardfmt.MANIFEST) in opens(dst)


@pytest.mark.parametrize("value", ["abc", "0" * 63, 5, ["x"], "z" * 64], ids=["short", "63", "int", "list", "not-hex"])
@pytest.mark.parametrize("field", ["sha256", "index_sha256"])
def test_a_checksum_that_is_no_sha256_is_named_not_called_a_changed_file(packed, tmp_path, field, value):
    dst = copy_of(packed, tmp_path)
    rewrite_manifest(dst, lambda m: m["shards"][0].__setitem__(field, value))
    problems = verify(dst)
    assert len(problems) == 1 and f"shards[0].{field} must be a sha256" in problems[0], problems
    assert "changed" not in problems[0] and "differs" not in problems[0]
    assert f"shards[0].{field} must be a sha256" in opens(dst)


def test_an_upper_case_checksum_is_the_same_checksum(packed, tmp_path):
    """A sha256 written in capitals (as PowerShell's Get-FileHash prints it) is that sha256."""
    dst = copy_of(packed, tmp_path)
    rewrite_manifest(
        dst,
        lambda m: [s.update(sha256=s["sha256"].upper(), index_sha256=s["index_sha256"].upper()) for s in m["shards"]],
    )
    assert verify(dst) == [] and opens(dst) == ""
    tar = next(dst.glob("*.tar"))
    data = bytearray(tar.read_bytes())
    data[-2000] ^= 0xFF  # inside the tar's end blocks: sizes, index and headers stay sound
    tar.write_bytes(bytes(data))
    assert any("sha256 differs" in p for p in verify(dst)), "the capitals are still compared"


@pytest.mark.parametrize(
    "edit, said",
    [
        (lambda m: m.__setitem__("classes", []), "label 1"),  # labels past the classes the manifest names
        (lambda m: m.__setitem__("ignore_index", "x"), "ignore_index"),
        (lambda m: m.__setitem__("ignore_index", 300), "ignore_index"),
    ],
    ids=["labels-past-classes", "ignore-index-str", "ignore-index-300"],
)
def test_verify_accepts_no_manifest_the_loader_refuses(packed, tmp_path, edit, said):
    dst = copy_of(packed, tmp_path)
    rewrite_manifest(dst, edit)
    refused = opens(dst)
    assert said in refused and (str(dst) in refused), refused
    problems = verify(dst)
    assert problems and any(said in p for p in problems), problems
    proc = cli("--verify", dst)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "edit, said",
    [
        (lambda m: m["totals"].__setitem__("bytes", 5), "totals.bytes is 5"),
        (lambda m: m["totals"].__setitem__("skipped", 3), "totals.skipped is 3"),
        (lambda m: m.__setitem__("skipped", "none"), "skipped must be a list"),
    ],
    ids=["bytes", "skipped", "skipped-str"],
)
def test_verify_checks_the_totals_it_promises(packed, tmp_path, edit, said):
    dst = copy_of(packed, tmp_path)
    rewrite_manifest(dst, edit)
    problems = verify(dst)
    assert len(problems) == 1 and said in problems[0] and str(dst / shardfmt.MANIFEST) in problems[0], problems


def test_verify_and_the_loader_agree_on_an_index_entry_without_its_image(packed, tmp_path):
    """An index re-written (and re-signed in the manifest) so that a sample has no image member: the loader
    skips it as damaged, so verify names it."""
    dst = copy_of(packed, tmp_path)
    index = next(dst.glob("*.idx"))
    lines = index.read_text().splitlines()
    fields = lines[1].split()
    lines[1] = " ".join(group for k in range(0, len(fields), 4) if fields[k] != "jpg" for group in fields[k : k + 4])
    index.write_text("\n".join(lines) + "\n")
    rewrite_manifest(dst, lambda m: m["shards"][0].__setitem__("index_sha256", sha256_hex(index.read_bytes())))
    loader = gpupipe.loader(dst, PIPELINE, batch_size=2, backend="torchvision", num_threads=1, on_error="skip")
    assert [s.reason for s in loader.skipped] == ["no .jpg member"], "the loader leaves the sample out"
    problems = verify(dst)
    assert len(problems) == 1 and "(sample 0): no .jpg member" in problems[0], problems


def test_verify_names_shard_files_the_manifest_does_not_list(packed, tmp_path):
    """A shard dropped from a (re-signed) manifest, or a leftover of another pack, is no silent part of it."""
    dst = copy_of(packed, tmp_path)
    shutil.copy(dst / "shard-000000.tar", dst / "shard-000001.tar")
    shutil.copy(dst / "shard-000000.idx", dst / "shard-000001.idx")
    problems = verify(dst)
    assert any("shard-000001.tar" in p and "does not list" in p for p in problems), problems
    assert any("shard-000001.idx" in p for p in problems), problems
    proc = cli("--verify", dst)
    assert proc.returncode == 1 and "does not list" in proc.stdout
    for name in ("shard-000001.tar", "shard-000001.idx"):
        (dst / name).rename(dst / name.replace("shard", "backup"))  # files named otherwise are the user's own
    assert verify(dst) == []


def test_every_hand_edited_manifest_verify_accepts_opens_in_the_loader(packed, tmp_path):
    """The other direction: edits verify passes (no sha256 or index sha256, extra fields) read in the loader;
    a manifest without ``index_sha256`` was refused (``must be a string``) though documented as accepted."""
    edits = {
        "no-sha256": lambda m: [s.pop("sha256") for s in m["shards"]],
        "empty-sha256": lambda m: [s.update(sha256="", index_sha256="") for s in m["shards"]],
        "no-index-sha256": lambda m: [s.pop("index_sha256") for s in m["shards"]],
        "no-checksums": lambda m: [(s.pop("sha256"), s.pop("index_sha256")) for s in m["shards"]],
        "null-checksums": lambda m: [s.update(sha256=None, index_sha256=None) for s in m["shards"]],
        "extra-field": lambda m: m["shards"][0].__setitem__("note", {"x": 1}),
        "no-totals": lambda m: m.pop("totals"),
    }
    for name, edit in edits.items():
        dst = tmp_path / name
        shutil.copytree(packed, dst)
        rewrite_manifest(dst, edit)
        assert verify(dst) == [], name
        assert opens(dst) == "", name
        loader = gpupipe.loader(dst, PIPELINE, batch_size=3, backend="torchvision", shuffle=False, num_threads=1)
        assert sum(len(labels) for _, labels in loader) == 6, name


# -- reruns into a pack whose own files were edited by hand ------------------------------------------------


@pytest.mark.parametrize(
    "edit, said",
    [
        (lambda m: m.__setitem__("settings", "x"), "records no settings"),
        (lambda m: m["settings"].__setitem__("convert", [1]), "records no settings"),
        (lambda m: m.pop("settings"), "records no settings"),
    ],
    ids=["settings-str", "convert-list", "no-settings"],
)
def test_a_rerun_into_a_pack_whose_manifest_settings_are_malformed_says_so(packed, tmp_path, edit, said):
    dst = copy_of(packed, tmp_path)
    rewrite_manifest(dst, edit)
    proc = cli(flat_folder(tmp_path / "other", 7), dst, "-q", "--workers", "1")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "packed from other inputs or with other settings" in proc.stderr and said in proc.stderr
    assert "stopped before its end" not in proc.stderr, "it has a manifest"


@pytest.mark.parametrize(
    "edit",
    [
        lambda j: j.__setitem__("shards", [{"bytes": 1}]),
        lambda j: j.__setitem__("shards", "ab"),
        lambda j: j.__setitem__("skipped", [{"path": "a"}]),
        lambda j: j.__setitem__("next_input", "x"),
    ],
    ids=["shard-without-name", "shards-str", "skipped-without-position", "next-input-str"],
)
def test_a_hand_edited_journal_is_a_named_error(tmp_path, edit):
    src = flat_folder(tmp_path / "src", 6)
    dst = tmp_path / "packed"
    pack(src, dst, PackSettings(), workers=1, progress=False)
    (dst / shardfmt.MANIFEST).unlink()  # a pack stopped at its end: the journal is what a rerun reads
    journal = next(dst.glob(".pack-journal*.json"))
    saved = json.loads(journal.read_text())
    edit(saved)
    journal.write_text(json.dumps(saved))
    with pytest.raises(PackError, match="pack-journal.*unreadable"):
        pack(src, dst, PackSettings(), workers=1, progress=False)


@pytest.fixture(scope="module")
def three_shards(tmp_path_factory) -> tuple[Path, Path]:
    """A folder of 9 noise images and its pack of 3 shards (64 KiB each at most)."""
    root = tmp_path_factory.mktemp("three")
    (root / "src" / "a").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(9):
        Image.fromarray(rng.integers(0, 255, (128, 128, 3), np.uint8)).save(root / "src" / "a" / f"{i}.bmp")
    pack(root / "src", root / "ref", PackSettings(shard_size=1 << 16), workers=1, progress=False)
    assert len(list((root / "ref").glob("*.tar"))) >= 3
    return root / "src", root / "ref"


@pytest.mark.parametrize("damage", ["index-deleted", "index-same-size", "tar-same-size"])
def test_a_resume_repacks_a_finished_shard_whose_index_or_tar_was_damaged(three_shards, tmp_path, damage):
    """A pack stopped at its end (journal, no manifest) whose second shard lost its index, or had it or its
    tar overwritten at the same size: the rerun used to keep it (size only) and report success on a pack
    that --verify and the loader refuse; it now packs again from that shard, to the very bytes."""
    src, ref = three_shards
    dst = tmp_path / "packed"
    shutil.copytree(ref, dst)
    (dst / shardfmt.MANIFEST).unlink()
    index, tar = dst / "shard-000001.idx", dst / "shard-000001.tar"
    if damage == "index-deleted":
        index.unlink()
    else:
        hurt = index if damage == "index-same-size" else tar
        hurt.write_bytes(b"x" * hurt.stat().st_size)
    pack(src, dst, PackSettings(shard_size=1 << 16), workers=1, progress=False)
    assert verify(dst) == []
    for name in ("shard-000001.idx", "shard-000001.tar", shardfmt.MANIFEST):
        assert (dst / name).read_bytes() == (ref / name).read_bytes(), name


def test_remote_verify_reads_shards_kept_in_a_subfolder_as_local_verify_does(packed, tmp_path):
    from servers import FolderServer

    dst = copy_of(packed, tmp_path)
    (dst / "part").mkdir()
    shutil.move(dst / "shard-000000.tar", dst / "part" / "shard-000000.tar")
    rewrite_manifest(dst, lambda m: m["shards"][0].__setitem__("name", "part/shard-000000.tar"))
    assert verify(dst) == []
    server = FolderServer(tmp_path)
    try:
        proc = cli("--verify", f"{server.url.rstrip('/')}/packed")
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ": OK" in proc.stdout


@pytest.mark.parametrize("text", ["", "# a comment\n", "\n\n"], ids=["empty", "comment", "blank-lines"])
def test_a_list_file_of_no_entries_is_named_by_the_packer(tmp_path, text):
    listed = tmp_path / "train list.txt"
    listed.write_text(text)
    proc = cli(listed, tmp_path / "packed", "-q", "--workers", "1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"no entries in {str(listed)!r}" in proc.stderr, proc.stderr


# -- 13's class: each reading setting skips the same files on every kind of source --------------------------


def _png(value: int, side: int, noise: bool = False) -> bytes:
    rng = np.random.default_rng(value)
    pixels = rng.integers(0, 255, (side, side, 3), np.uint8) if noise else np.full((side, side, 3), value, np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """One set of files as a folder, a list file, a CSV list and a WebDataset tar: flat 8x8 images, two
    40x40 ones (over ``max_pixels=1000``), two noisy ones (large files), a text file and an empty one."""
    root = tmp_path_factory.mktemp("mixed10")
    files = {}
    for i in range(8):
        side, noise = (40, False) if i in (3, 7) else (16, True) if i in (1, 5) else (8, False)
        files[f"c{i % 2}/img{i}.png"] = _png(20 * i + 10, side, noise)
    files["c0/text.png"] = b"not an image"
    files["c1/empty.png"] = b""
    folder = root / "folder"
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    (root / "list.txt").write_text("".join(f"{folder / n} {n[:2]}\n" for n in files))
    (root / "list.csv").write_text("path,label\n" + "".join(f"{folder / n},{n[:2]}\n" for n in files))
    with tarfile.open(root / "wds.tar", "w") as tar:
        for name, data in sorted(files.items()):
            for member, body in (
                (name.replace("/", "_"), data),
                (name.replace("/", "_")[:-4] + ".cls", name[1:2].encode()),
            ):
                info = tarfile.TarInfo(member)
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
    noisy = max(len(files["c1/img1.png"]), len(files["c1/img5.png"]))
    limit = (noisy + max(len(d) for n, d in files.items() if "img1" not in n and "img5" not in n)) // 2
    assert min(len(files["c1/img1.png"]), len(files["c1/img5.png"])) > limit
    return root, limit


def _read(source, backend: str, **settings):
    loader = gpupipe.loader(source, PIPELINE, batch_size=2, backend=backend, num_threads=1, shuffle=False, **settings)
    means = sorted(round(float(x.float().mean())) for images, _ in loader for x in images)
    skipped = sorted(Path(s.path.split("#")[-1]).name.split("_")[-1] for s in loader.skipped)
    return skipped, means


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_each_reading_setting_skips_the_same_files_from_every_kind_of_source(mixed, tmp_path, backend):
    root, limit = mixed
    sources = {
        "folder": lambda: root / "folder",
        "list.txt": lambda: root / "list.txt",
        "list.csv": lambda: root / "list.csv",
        "FileList": lambda: gpupipe.FileList(root / "list.txt"),
        "WebDataset": lambda: gpupipe.WebDataset(root / "wds.tar", cache_dir=tmp_path / "wds"),
    }
    cases = [
        (dict(on_error="skip"), {"text.png", "empty.png"}),
        (dict(on_error="skip", max_pixels=1000), {"text.png", "empty.png", "img3.png", "img7.png"}),
        (dict(on_error="skip", max_file_size=limit), {"text.png", "empty.png", "img1.png", "img5.png"}),
    ]
    for settings, bad in cases:
        results = {name: _read(make(), backend, **settings) for name, make in sources.items()}
        for name, (skipped, means) in results.items():
            assert skipped == sorted(bad), (settings, name)
            assert means == results["folder"][1], (settings, name)
        assert len(results["folder"][1]) == 10 - len(bad)
    for make in sources.values():
        with pytest.raises(gpupipe.SampleError, match="4 of 10 files cannot be used"):
            _read(make(), backend, on_error="raise", max_pixels=1000)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_files_under_the_loaders_max_file_size_are_read_whatever_the_sources_own_default(
    tmp_path, monkeypatch, backend
):
    """The loader's ``max_file_size`` above a source's own default (1 GiB: images of 1.5 GB with
    ``max_file_size=4 << 30``) governed the scan, and DALI read the files, while the torchvision backend
    refused every one at read time with the source's default. The default is lowered here to stand for it."""
    from gpupipe.sources.base import Source

    root = flat_folder(tmp_path / "data", 6)
    monkeypatch.setattr(Source, "max_file_size", 50)  # below every file (~90 bytes)
    listed = gpupipe.FileList([(p, p.parent.name) for p in sorted(root.rglob("*.png"))])
    for source in (root, listed):
        skipped, means = _read(source, backend, max_file_size=10_000, on_error="skip")
        assert skipped == [] and len(means) == 6, type(source).__name__
    with pytest.raises(ValueError, match="none of the 6 files can be used"):  # a limit below them: all skipped
        _read(root, backend, max_file_size=60, on_error="skip")


def test_pack_and_verify_read_a_tilde_as_the_home_folder_as_the_loader_does(tmp_path, monkeypatch):
    """``pack("~/data", "~/packed")`` from Python made a folder named ``~`` in the working directory (the
    loader then found no pack at ``~/packed``), and ``verify("~/packed")`` called it no packed folder."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    flat_folder(tmp_path / "home" / "data", 4)
    pack("~/data", "~/packed", PackSettings(), workers=1, progress=False)
    assert not (tmp_path / "~").exists()
    assert (tmp_path / "home" / "packed" / shardfmt.MANIFEST).is_file()
    assert verify("~/packed") == [] and len(Shards("~/packed")) == 4
