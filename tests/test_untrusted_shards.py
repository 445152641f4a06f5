"""Packed shards as they arrive after an interrupted copy, an edit or bit rot: checked when the
source is built, so no backend crashes, reads outside the folder, or gives a wrong label.

Cases that crashed the process (DALI's reader past the end of a tar) run in
a subprocess, so that a regression fails the test instead of killing pytest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gpupipe
from gpupipe.shards import format as shardfmt
from gpupipe.pack import PackSettings, pack, verify
from helpers import CPU_BACKEND_NAMES, CPU_BACKENDS, flat_folder, rewrite_manifest
from script_batch import run_scripts

HERE = Path(__file__).parent
SMALL = PackSettings(shard_size=64 * 1024)


@pytest.fixture
def packed(tmp_path):
    """12 flat images (class = id % 3) packed into several small shards."""
    folder = flat_folder(tmp_path / "folder", 12, size=(48, 64))
    dst = tmp_path / "packed"
    pack(folder, dst, PackSettings(shard_size=64 * 1024), workers=1, progress=False)
    return dst


def run_child(code: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Runs ``code`` in a new interpreter (a crash there fails the test, not pytest)."""
    return subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(HERE)!r})\n" + code],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})


LOAD_ALL = """
import json, gpupipe
from helpers import sample_ids
def load(dst, backend, on_error):
    try:
        loader = gpupipe.loader(dst, [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")], batch_size=4,
                                backend=backend, shuffle=False, num_threads=1, on_error=on_error)
        out = [(i, l) for x, y in loader for i, l in zip(sample_ids(x), y.tolist())]
        return {"delivered": out, "skipped": [[s.path, s.reason] for s in loader.skipped]}
    except (ValueError, gpupipe.SampleError) as err:
        return {"error": str(err)}
"""


def last_member(dst: Path):
    source = gpupipe.Shards(dst)
    return source, source.entries[-1]["jpg"], Path(source.tar_paths[-1])


def refusal(error: str, tar: Path) -> bool:
    """One line naming the shard and the command that checks the pack."""
    return "\n" not in error and tar.name in error and "python -m gpupipe.pack --verify" in error


def test_a_shard_cut_short_inside_its_last_member(packed):
    source, member, tar = last_member(packed)
    with open(tar, "r+b") as fh:
        fh.truncate(member.offset + member.size // 2)  # an interrupted copy
    # every CPU backend in one child: {backend: [on_error="raise", on_error="skip"]}
    code = LOAD_ALL + (f"print(json.dumps({{b: [load({str(packed)!r}, b, m) for m in ('raise', 'skip')] "
                       f"for b in {CPU_BACKEND_NAMES!r}}}))")
    proc = run_child(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.splitlines()[-1])
    assert list(results) == CPU_BACKEND_NAMES
    for backend, pair in results.items():
        for result in pair:
            assert refusal(result["error"], tar) and "cut short" in result["error"], (backend, result)


@pytest.mark.parametrize("cut", [512, 1024])
def test_a_shard_cut_only_in_its_end_blocks_is_refused_by_its_size(packed, cut):
    tar = Path(gpupipe.Shards(packed).tar_paths[-1])
    with open(tar, "r+b") as fh:
        fh.truncate(tar.stat().st_size - cut)  # every member intact: only the manifest's size tells
    with pytest.raises(ValueError) as info:
        gpupipe.Shards(packed)
    assert refusal(str(info.value), tar) and f"{tar.stat().st_size:,} bytes" in str(info.value)


def test_an_altered_shard_is_refused_by_its_checksum_where_that_is_cheap(packed):
    source = gpupipe.Shards(packed)
    member, tar = source.entries[3]["jpg"], Path(source.tar_paths[0])
    data = bytearray(tar.read_bytes())
    data[member.offset + member.size // 2] ^= 0x55  # bit rot: same size, other pixels
    tar.write_bytes(bytes(data))
    with pytest.raises(ValueError) as info:
        gpupipe.Shards(packed)  # a small pack: its shards are hashed when it is opened
    assert refusal(str(info.value), tar) and "sha256" in str(info.value)
    with pytest.raises(ValueError, match="sha256"):
        gpupipe.Shards(packed, checksums=True)
    assert len(gpupipe.Shards(packed, checksums=False)) == 12, "checksums=False: sizes only"


def test_an_index_member_size_past_the_tar_is_a_bad_sample(packed, tmp_path):
    """A member size just past the tar (80 KiB) and far past it (8 GiB), each in its own copy of the pack,
    both loaded in one child."""
    packs = {}
    for size in (80 * 1024, 8 * 2**30):
        copy = packs[size] = Path(shutil.copytree(packed, tmp_path / f"packed-{size}"))
        index = copy / shardfmt.index_name(shardfmt.shard_name(0))
        lines = index.read_text().splitlines()
        fields = lines[1].split()
        fields[2] = str(size)
        lines[1] = " ".join(fields)
        index.write_text("\n".join(lines) + "\n")
        rewrite_manifest(copy, lambda m: m["shards"][0].update(
            index_sha256=__import__("hashlib").sha256(index.read_bytes()).hexdigest()))
        source = gpupipe.Shards(copy)
        assert list(source.damaged) == [0] and "lie past the end of the tar" in source.damaged[0], size
    code = LOAD_ALL + (f"print(json.dumps([[load(p, b, 'skip') for b in ('dali-cpu', 'torchvision')] "
                       f"for p in {[str(p) for p in packs.values()]!r}]))")
    proc = run_child(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for size, results in zip(packs, json.loads(proc.stdout.splitlines()[-1])):
        assert len(results) == 2, f"{size}: one result per backend"
        for result in results:
            assert len(result["delivered"]) == 11 and len(result["skipped"]) == 1, (size, result)


LEAVING = [
    ("name", "/etc/passwd", "leaves the packed folder"),
    ("name", "../folder/class_0/s0000.png", "leaves the packed folder"),
    ("index", "sub/../../escape.idx", "leaves the packed folder"),
    ("name", 7, "shards[0].name must be a string"),
]


@pytest.fixture(scope="module")
def leaving(tmp_path_factory):
    """A copy of one pack per case of :data:`LEAVING`, its manifest edited, and ``gpupipe.pack --verify`` of each,
    all run in one process (``script_batch``: torch imported once): ``{case: (pack, the command's result)}``."""
    tmp = tmp_path_factory.mktemp("leaving")
    folder = flat_folder(tmp / "folder", 12, size=(48, 64))
    pack(folder, tmp / "packed", PackSettings(shard_size=64 * 1024), workers=1, progress=False)
    packs = []
    for n, (field, value, _) in enumerate(LEAVING):
        dst = Path(shutil.copytree(tmp / "packed", tmp / f"packed-{n}"))
        rewrite_manifest(dst, lambda m: m["shards"][0].update({field: value}))
        packs.append(dst)
    results = run_scripts([{"module": "gpupipe.pack", "args": ["--verify", str(dst)], "cwd": str(tmp)}
                           for dst in packs], tmp)
    return {case: (dst, result) for case, dst, result in zip(LEAVING, packs, results)}


@pytest.mark.parametrize("field, value, fragment", LEAVING)
def test_manifest_names_that_leave_the_folder_are_refused(leaving, field, value, fragment):
    packed, cli = leaving[field, value, fragment]
    with pytest.raises(ValueError) as info:
        gpupipe.Shards(packed)
    assert fragment in str(info.value)
    assert any(fragment in p for p in verify(packed))
    assert cli["returncode"] == 1 and fragment in cli["stdout"], cli


def test_a_shard_that_is_a_link_outside_is_refused(packed, tmp_path):
    outside = tmp_path / "outside.tar"
    tar = packed / shardfmt.shard_name(0)
    outside.write_bytes(tar.read_bytes())
    tar.unlink()
    tar.symlink_to(outside)
    with pytest.raises(ValueError, match="leads outside the packed folder"):
        gpupipe.Shards(packed)


@pytest.mark.parametrize("label", [10**12, -5, 3])
def test_manifest_labels_out_of_range_are_refused(packed, label):
    rewrite_manifest(packed, lambda m: m["shards"][0]["labels"].__setitem__(0, label))
    with pytest.raises(ValueError, match=rf"label {label} of .* is outside the class range 0\.\.2"):
        gpupipe.Shards(packed)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_both_backends_take_labels_from_the_manifest_not_the_cls_bytes(packed, backend):
    source = gpupipe.Shards(packed)
    tar = Path(source.tar_paths[0])
    data = bytearray(tar.read_bytes())
    cls = source.entries[0]["cls"]
    data[cls.offset:cls.offset + cls.size] = b"99999999"  # garbage class bytes
    tar.write_bytes(bytes(data))
    unhashed = gpupipe.Shards(packed, checksums=False)  # same size: only the sha256 would tell
    loader = gpupipe.loader(unhashed, [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")],
                            batch_size=12, backend=backend, shuffle=False, num_threads=1)
    _, labels = next(iter(loader))
    assert labels.tolist() == source.labels.tolist()
    assert any("class differs from the manifest's label" in p for p in verify(packed))


@pytest.mark.parametrize("edit, fragment", [
    (lambda m: m.pop("classes"), "classes must be a list of names"),
    (lambda m: m["shards"][0].pop("samples"), "shards[0].samples must be an int >= 0"),
    (lambda m: m["shards"][0].update(labels="abc"), "shards[0].labels must be"),
    (lambda m: m["shards"][0].update(sizes=[[1, 2]]), "shards[0].sizes must be"),
    (lambda m: m.update(shards={"a": 1}), "shards must be a list"),
])
def test_malformed_manifests_name_the_field(packed, edit, fragment):
    rewrite_manifest(packed, edit)
    with pytest.raises(ValueError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        gpupipe.Shards(packed)


def test_an_edited_manifest_is_caught_by_its_checksum(packed):
    path = packed / shardfmt.MANIFEST
    manifest = json.loads(path.read_text())
    manifest["shards"][0]["labels"][0] = (manifest["shards"][0]["labels"][0] + 1) % 3  # another valid class
    path.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="is damaged: its checksum does not match its content"):
        gpupipe.Shards(packed)
    assert any("checksum" in p for p in verify(packed))


def test_subset_of_shards_reads_its_own_samples_with_its_own_files(packed):
    source = gpupipe.Shards(packed)
    keep = [11, 3, 7]
    part = source.subset(keep)
    assert [part.read_bytes(k).tobytes() for k in range(3)] == [source.read_bytes(i).tobytes() for i in keep]
    assert part.labels.tolist() == [source.labels[i] for i in keep]
    assert part.store is not source.store and part.store._files is not source.store._files
    assert sorted(part.epoch_order(seed=0, epoch=1, shuffle=True).tolist()) == [0, 1, 2]


FUZZ = """
import json, os, random, shutil, sys
from pathlib import Path
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st
from helpers import flat_folder, sample_ids
import gpupipe
from gpupipe.pack import PackSettings, pack
root, backends, examples = Path(sys.argv[1]), sys.argv[2].split(","), int(sys.argv[3])
clean = root / "clean"
pack(flat_folder(root / "folder", 12, size=(32, 40)), clean, PackSettings(shard_size=64 * 1024), workers=1,
     progress=False)
files = sorted(p.name for p in clean.iterdir() if p.suffix in (".tar", ".idx", ".json"))
reports = {}

def expected_slots(source, bad):
    out = []
    for slot in range(len(source)):
        i = slot
        while i in bad:
            i = (i + 1) % len(source)
        out.append(i)
    return out

@settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
@given(target=st.sampled_from(files), flips=st.lists(st.tuples(st.floats(0, 1), st.integers(1, 255)), max_size=6),
       cut=st.one_of(st.none(), st.floats(0, 1)))
def fuzz(target, flips, cut):
    work = root / "work"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(clean, work)
    data = bytearray((work / target).read_bytes())
    for where, value in flips:
        data[min(int(where * len(data)), len(data) - 1)] ^= value
    if cut is not None:
        data = data[:int(cut * len(data))]
    (work / target).write_bytes(bytes(data))
    try:
        loader = gpupipe.loader(work, [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")],
                                batch_size=5, backend=backend, shuffle=False, num_threads=1, on_error="skip")
        batches = [(x, y) for x, y in loader]
    except (ValueError, gpupipe.SampleError) as err:
        assert str(err), "a refusal says why"
        report["refused"] += 1
        return
    report["loaded"] += 1
    source = loader.source
    names = list(source.names)
    bad = {names.index(s.path) for s in loader.skipped if s.path in names}
    labels = [l for _, y in batches for l in y.tolist()]
    assert len(labels) == len(source), "every slot filled"
    assert labels == [int(source.labels[i]) for i in expected_slots(source, bad)], "the labels of the samples read"

for backend in backends:  # each in turn, in this one process
    report = reports[backend] = {"refused": 0, "loaded": 0}
    fuzz()
print(json.dumps(reports))
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fuzzed_shards_never_crash_hang_or_mislabel(tmp_path):
    """Every CPU backend in turn, in one child (a crash fails the test, not pytest)."""
    examples = os.environ.get("GPUPIPE_FUZZ_EXAMPLES", "25")
    script = tmp_path / "fuzz.py"
    script.write_text(f"import sys; sys.path.insert(0, {str(HERE)!r})\n" + FUZZ)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path), ",".join(CPU_BACKEND_NAMES), examples],
                          capture_output=True, text=True, timeout=880, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, f"exit {proc.returncode}: " + proc.stderr[-3000:]
    reports = json.loads(proc.stdout.splitlines()[-1])
    assert list(reports) == CPU_BACKEND_NAMES
    for backend, report in reports.items():
        assert report["refused"] + report["loaded"] >= 1, (backend, report)
