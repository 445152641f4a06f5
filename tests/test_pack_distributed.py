"""``torchrun -m gpupipe.pack`` (gloo, two ranks): the same samples as one process, a manifest that
verifies, and packing straight to an S3 URL (moto's server on 127.0.0.1) that reads back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import gpupipe
from helpers import flat_folder

pytestmark = pytest.mark.slow
PACK = ["--workers", "1", "--shard-size", "64KB", "-q"]


def run(args, nproc: int = 1) -> subprocess.CompletedProcess:
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] if nproc > 1 else []
    proc = subprocess.run([sys.executable, *launcher, "-m", "gpupipe.pack", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def members(folder: Path) -> dict:
    """``{member name: bytes}`` over every tar of a pack."""
    out = {}
    for path in sorted(folder.glob("*.tar")):
        with tarfile.open(path) as tar:
            for info in tar:
                assert info.name not in out, f"{info.name} is in two shards"
                out[info.name] = tar.extractfile(info).read()
    return out


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """40 PNGs in 3 classes and one file that is not an image; its single-process pack."""
    root = tmp_path_factory.mktemp("dpack")
    folder = flat_folder(root / "images", 40, classes=3, size=(24, 32))
    (folder / "class_1" / "broken.png").write_bytes(b"not an image")
    run([str(folder), str(root / "one"), *PACK])
    return folder, root / "one"


def test_two_ranks_pack_the_same_samples_as_one_process(inputs, tmp_path):
    folder, one = inputs
    out = run([str(folder), str(tmp_path / "two"), *PACK], nproc=2)
    assert "rank 0 of 2: packed" in out.stdout and "rank 1 of 2: packed" in out.stdout
    expected, got = members(one), members(tmp_path / "two")
    assert len(expected) == 2 * 40 and got == expected  # image and label of every sample, byte for byte
    manifests = [json.loads((p / "manifest.json").read_text()) for p in (one, tmp_path / "two")]
    counts = [{k: m["totals"][k] for k in ("inputs", "samples", "skipped")} for m in manifests]
    assert counts == [{"inputs": 41, "samples": 40, "skipped": 1}] * 2
    assert [[Path(s["path"]).name for s in m["skipped"]] for m in manifests] == [["broken.png"], ["broken.png"]]
    assert {Path(s["name"]).name.split("-")[1] for s in manifests[1]["shards"]} == {"r0000", "r0001"}
    run(["--verify", str(tmp_path / "two")])
    assert sorted(gpupipe.Shards(tmp_path / "two").labels.tolist()) == sorted(gpupipe.Shards(one).labels.tolist())


def test_two_ranks_pack_to_s3_and_the_pack_reads_back(inputs, tmp_path):
    pytest.importorskip("s3fs")
    from servers import S3Server

    folder, one = inputs
    s3 = S3Server()
    try:
        import fsspec

        fsspec.filesystem("s3", skip_instance_cache=True).mkdir("packs")
        url = "s3://packs/train"
        run([str(folder), url, "--staging", str(tmp_path / "staging"), *PACK], nproc=2)
        verified = run(["--verify", url])
        assert verified.stdout.strip().endswith(f"{url}: OK")
        remote = gpupipe.Shards(url, cache_dir=tmp_path / "cache")
        local = gpupipe.Shards(one)
        assert len(remote) == len(local) == 40
        assert sorted(remote.labels.tolist()) == sorted(local.labels.tolist())
        loader = gpupipe.loader(remote, [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")],
                                batch_size=8, backend="torchvision", num_threads=1, shuffle=False)
        assert sum(len(y) for _, y in loader) == 40
        again = run([str(folder), url, "--staging", str(tmp_path / "staging"), *PACK], nproc=2)
        assert "this run: 0 inputs" in again.stdout  # a rerun finds every part done
    finally:
        s3.stop()
