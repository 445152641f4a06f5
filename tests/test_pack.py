"""python -m gpupipe.pack: checking and normalising inputs, the format, --verify, resume, reading shards."""

import io
import logging
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import gpupipe
from helpers import CPU_BACKENDS, make_image_folder, rewrite_manifest
from gpupipe.shards import format as shardfmt
from gpupipe.pack import ConvertSettings, PackError, PackSettings, pack, parse_size, verify
from gpupipe.pack.manifest import read_sources
from gpupipe.fileio import sha256_of
from imagecases import bomb, write_cases
from script_batch import run_scripts

SMALL_SHARDS = PackSettings(shard_size=64 * 1024)


@pytest.fixture
def messy_folder(tmp_path):
    """Good photos in two classes, plus every awkward case in a third."""
    root = tmp_path / "messy"
    make_image_folder(root, {"apple": 6, "pear": 5}, sizes=(60, 140))
    cases = write_cases(root / "odd")
    bomb(root / "odd" / "bomb.png")
    (root / "odd" / "notes.txt").write_text("ignored: not an image extension")
    return root, cases


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "gpupipe.pack", *map(str, args)], capture_output=True, text=True)


def sources_table(dst):
    return {key: (path, int(label)) for key, (path, label) in read_sources(dst).items()}


def decode_jpg(data):
    with Image.open(io.BytesIO(data)) as img:
        assert img.format == "JPEG" and img.mode == "RGB"
        return np.asarray(img)


def block_means(image, block=4):
    h, w = (image.shape[0] // block) * block, (image.shape[1] // block) * block
    return image[:h, :w].reshape(h // block, block, w // block, block, 3).astype(float).mean(axis=(1, 3))


def test_pack_checks_and_normalises_every_case(messy_folder, tmp_path):
    root, cases = messy_folder
    dst = tmp_path / "packed"
    proc = run_cli(root, dst, "--shard-size", "64KB", "--workers", "2", "-q")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((dst / "manifest.json").read_text())
    bad = {c.name: c.reason for c in cases if c.kind == "bad"}
    skipped = {Path(s["path"]).name: s["reason"] for s in manifest["skipped"]}
    assert set(skipped) == set(bad) | {"bomb.png"}
    for name, fragment in bad.items():
        assert fragment in skipped[name]
    assert "121 MP exceeds the 100 MP limit" in skipped["bomb.png"]
    good = 11 + sum(c.kind != "bad" for c in cases)
    assert manifest["totals"] == {"inputs": good + len(skipped), "samples": good, "skipped": len(skipped),
                                  "shards": len(manifest["shards"]), "bytes": sum(s["bytes"] for s in manifest["shards"])}
    assert len(manifest["shards"]) > 1, "64KB shards roll over"
    assert manifest["classes"] == ["apple", "odd", "pear"]
    assert manifest["class_to_idx"] == {"apple": 0, "odd": 1, "pear": 2}
    assert f"packed {good} images" in proc.stdout and "images/s" in proc.stdout

    # Every converted case is a clean RGB JPEG showing what the original shows.
    source = gpupipe.Shards(dst)
    by_path = {path: key for key, (path, _) in sources_table(dst).items()}
    keys = [e["jpg"].name[:-4] for e in source.entries]
    for case in cases:
        if case.kind == "bad":
            continue
        sample = keys.index(by_path[str(case.path)])
        data = source.read_bytes(sample).tobytes()
        image = decode_jpg(data)
        assert image.shape == case.reference.shape, case.name
        # Colours compared on 4x4 block means: one JPEG generation (quality 90, 4:2:0 chroma) moves
        # them by ~1-2 levels even on dithered palette images; a wrong conversion (CMYK inverted,
        # 16-bit clipped, rotation missed) moves them by 30 or more.
        assert np.abs(block_means(image) - block_means(case.reference)).mean() < 3.0, case.name
        if case.kind == "good":
            assert data == case.path.read_bytes(), "clean JPEGs are copied byte for byte"


def test_labels_match_the_folder_source(messy_folder, tmp_path):
    root, _ = messy_folder
    dst = tmp_path / "packed"
    pack(root, dst, SMALL_SHARDS, workers=1, progress=False)
    folder = gpupipe.ImageFolder(root)
    folder_label = {s.path: s.label for s in folder.samples}
    shards = gpupipe.Shards(dst)
    table = sources_table(dst)
    assert shards.classes == folder.classes
    assert len(shards.entries) == len(shards.samples) == len(table) >= 11, "at least the 11 good photos"
    for entry, sample in zip(shards.entries, shards.samples):
        path, label = table[entry["jpg"].name[:-4]]
        assert sample.label == label == folder_label[path]
    assert sorted(np.bincount(shards.labels).tolist()) == sorted(np.bincount([folder_label[p] for p, _ in table.values()]).tolist())


def test_max_size_shrinks_and_never_enlarges(tmp_path):
    root = tmp_path / "src"
    make_image_folder(root, {"a": 4}, sizes=(40, 200), seed=2)
    dst = tmp_path / "packed"
    summary = pack(root, dst, PackSettings(convert=ConvertSettings(max_size=64)), workers=1, progress=False)
    source = gpupipe.Shards(dst)
    assert len(sources_table(dst)) == len(source) == 4
    for i, (path, _) in enumerate(sources_table(dst).values()):
        with Image.open(path) as original:
            before = min(original.size)
        after = decode_jpg(source.read_bytes(i).tobytes()).shape[:2]
        assert min(after) == min(before, 64)
    assert summary.packed == 4


def test_verify_passes_then_catches_a_flipped_byte_and_a_missing_shard(messy_folder, tmp_path):
    root, _ = messy_folder
    dst = tmp_path / "packed"
    pack(root, dst, SMALL_SHARDS, workers=1, progress=False)
    ok = run_cli("--verify", dst)
    assert ok.returncode == 0 and "OK" in ok.stdout, ok.stdout

    first = gpupipe.Shards(dst).entries[0]["jpg"]
    tar = dst / shardfmt.shard_name(0)
    data = bytearray(tar.read_bytes())
    data[first.offset + 100] ^= 0xFF
    tar.write_bytes(bytes(data))
    flipped = run_cli("--verify", dst)
    assert flipped.returncode == 1 and "shard-000000.tar: sha256 differs" in flipped.stdout

    (dst / shardfmt.shard_name(1)).unlink()
    missing = run_cli("--verify", dst)
    assert missing.returncode == 1 and "shard-000001.tar: missing" in missing.stdout


def test_verify_catches_an_index_that_does_not_match(messy_folder, tmp_path):
    root, _ = messy_folder
    dst = tmp_path / "packed"
    pack(root, dst, SMALL_SHARDS, workers=1, progress=False)
    index = dst / shardfmt.index_name(shardfmt.shard_name(0))
    lines = index.read_text().splitlines()
    lines[1] = lines[1].replace(" jpg ", " jpg ").replace(lines[1].split()[1], str(int(lines[1].split()[1]) + 512), 1)
    index.write_text("\n".join(lines) + "\n")
    assert any("differs from the one packed" in p for p in verify(dst)), "the index checksum catches the edit"
    rewrite_manifest(dst, lambda m: m["shards"][0].update(index_sha256=sha256_of(index)))
    problems = verify(dst)
    assert any("tar header" in p or "outside" in p for p in problems), problems


def test_resume_after_an_interruption_gives_identical_shards(messy_folder, tmp_path):
    root, _ = messy_folder
    whole = tmp_path / "whole"
    pack(root, whole, SMALL_SHARDS, workers=2, progress=False)

    interrupted = tmp_path / "interrupted"
    shutil.copytree(whole, interrupted)
    # As if killed while writing shard 1: shard 0 finished and journalled, shard 1 half written, no manifest.
    journal = json.loads((interrupted / ".pack-journal.json").read_text())
    journal["shards"] = journal["shards"][:1]
    journal["next_input"] = journal["shards"][0]["next_input"]
    (interrupted / ".pack-journal.json").write_text(json.dumps(journal))
    for later in sorted(interrupted.glob("shard-*.tar"))[1:]:
        later.unlink()
    (interrupted / "manifest.json").unlink()
    (interrupted / "shard-000001.tar.tmp").write_bytes(b"half a shard")

    summary = pack(root, interrupted, SMALL_SHARDS, workers=2, progress=False)
    assert summary.resumed_shards == 1
    assert not list(interrupted.glob("*.tmp"))
    assert len(list(whole.glob("shard-*.tar"))) >= 2, "the interruption fell between shards"
    for original in sorted(whole.glob("shard-*")):
        assert (interrupted / original.name).read_bytes() == original.read_bytes(), original.name
    assert (interrupted / "manifest.json").read_text() == (whole / "manifest.json").read_text()


def test_other_settings_on_the_same_folder_are_refused(tmp_path):
    root = tmp_path / "src"
    make_image_folder(root, {"a": 2})
    pack(root, tmp_path / "dst", workers=1, progress=False)
    with pytest.raises(PackError, match="other settings"):
        pack(root, tmp_path / "dst", PackSettings(convert=ConvertSettings(quality=50)), workers=1, progress=False)


def test_on_error_raise_names_the_file(messy_folder, tmp_path):
    root, _ = messy_folder
    with pytest.raises(gpupipe.SampleError, match=r"(empty|truncated|text|gzip|bomb)\.(jpg|png): "):
        pack(root, tmp_path / "dst", on_error="raise", workers=1, progress=False)
    proc = run_cli(root, tmp_path / "dst2", "--on-error", "raise", "-q")
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr


def test_cli_argument_errors(tmp_path):
    """Every error is one line, ``error: ...``, and exit status 2, without argparse's usage or a traceback."""
    argvs = [[tmp_path / "a", tmp_path / "b", "--shard-size", "lots"], [tmp_path / "b"],
             [tmp_path / "nothing", tmp_path / "out", "-q"]]  # in one process: torch imported once
    cases = [{"module": "gpupipe.pack", "args": [str(a) for a in argv], "cwd": str(tmp_path)} for argv in argvs]
    bad_size, no_dst, missing = run_scripts(cases, tmp_path)
    assert (bad_size["returncode"], bad_size["stderr"]) == (2, "error: --shard-size: shard size must look like "
                                                              "256MB, 1G or 4096, got 'lots' (see python -m "
                                                              "gpupipe.pack --help)\n")
    assert no_dst["stderr"] == "error: SRC and DST are required (or --verify DST) (see python -m gpupipe.pack --help)\n"
    assert parse_size("256MB") == 256 * 2**20 and parse_size("1.5G") == int(1.5 * 2**30)
    with pytest.raises(ValueError, match="shard size must be at least 65,536 bytes"):
        parse_size("10")
    for text in ("lots", "infGB", "nan", ""):
        with pytest.raises(ValueError, match=f"shard size must look like 256MB, 1G or 4096, got {text!r}"):
            parse_size(text)
    assert missing["returncode"] == 2 and missing["stderr"].startswith("error: ")
    assert "does not exist" in missing["stderr"] and missing["stderr"].count("\n") == 1, missing["stderr"]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_every_backend_reads_every_sample_of_the_shards(messy_folder, tmp_path, backend):
    root, _ = messy_folder
    dst = tmp_path / "packed"
    pack(root, dst, SMALL_SHARDS, workers=1, progress=False)
    source = gpupipe.Shards(dst)
    pipeline = [gpupipe.Decode(), gpupipe.CenterCrop(size=32), gpupipe.Output(dtype="uint8")]
    loader = gpupipe.loader(dst, pipeline, batch_size=5, backend=backend, shuffle=False, num_threads=1)
    assert isinstance(loader.source, gpupipe.Shards)
    batches = list(loader)
    labels = torch.cat([b[1] for b in batches]).tolist()
    assert labels == source.labels.tolist() and len(labels) == len(source)
    # The same files read as a file list (in key order) give the same pixels.
    table = sources_table(dst)
    files = gpupipe.FileList([table[e["jpg"].name[:-4]] for e in source.entries], classes=source.classes)
    copied = [i for i, e in enumerate(source.entries)
              if source.read_bytes(i).tobytes() == Path(table[e["jpg"].name[:-4]][0]).read_bytes()]
    from_files = torch.cat([b[0] for b in gpupipe.loader(files, pipeline, batch_size=5, backend=backend,
                                                         shuffle=False, num_threads=1)])
    from_shards = torch.cat([b[0] for b in batches])
    assert copied and torch.equal(from_shards[copied], from_files[copied])


def test_shuffled_shards_visit_every_sample_once_in_shard_blocks(messy_folder, tmp_path):
    root, _ = messy_folder
    dst = tmp_path / "packed"
    pack(root, dst, SMALL_SHARDS, workers=1, progress=False)
    source = gpupipe.Shards(dst)
    order = source.epoch_order(seed=1, epoch=0, shuffle=True)
    assert sorted(order.tolist()) == list(range(len(source)))
    assert not np.array_equal(order, source.epoch_order(seed=1, epoch=1, shuffle=True))
    runs = shardfmt.runs([source.shard_of[i] for i in order])
    assert len(runs) == len(source.tar_paths), "each shard read in one block"


def test_skipped_inputs_are_listed_in_the_manifest_and_logged_at_info_not_warned(messy_folder, tmp_path, caplog):
    """A pack records every skipped input in its manifest; a big dataset must not print a warning per file."""
    root, _ = messy_folder
    with caplog.at_level(logging.INFO, logger="gpupipe"):
        summary = pack(root, tmp_path / "dst", workers=1, progress=False)
    skipped = [r for r in caplog.records if r.getMessage().startswith("skipping ")]
    assert summary.skipped >= 4 and len(skipped) == summary.skipped
    assert {r.levelno for r in skipped} == {logging.INFO} and {r.name for r in skipped} == {"gpupipe.pack"}
    proc = run_cli(root, tmp_path / "dst2", "-q", "--workers", "1")
    assert proc.returncode == 0 and "skipping" not in proc.stderr, proc.stderr
