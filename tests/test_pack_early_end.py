"""A pack that ends early (``on_error="raise"`` at a bad file, while the workers are sending large results)
ends: ``multiprocessing.Pool.terminate()`` could kill a worker holding the result queue's lock mid-send, and the
pool's task thread then waited for that lock for ever (a ``python -m gpupipe.pack --on-error raise`` that hung
17 minutes in CI). Runs in a subprocess with a time limit, so a hang fails the test instead of the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import textured_image
from PIL import Image

SCRIPT = """
import sys
import gpupipe
from gpupipe.pack import pack
for attempt in range(int(sys.argv[3])):
    try:
        pack(sys.argv[1], f"{sys.argv[2]}/dst{attempt}", on_error="raise", workers=2, progress=False)
    except gpupipe.SampleError as err:
        print("raised:", str(err).split(":")[0].rsplit("/", 1)[-1])
    else:
        print("packed")
"""


@pytest.mark.timeout(600)
def test_a_pack_raising_at_a_bad_file_among_large_results_ends_every_time(tmp_path: Path):
    data = tmp_path / "data" / "a"
    data.mkdir(parents=True)
    rng = np.random.default_rng(5)
    for i in range(48):  # PNGs of ~1 MB each: each worker's result outlasts a pipe's 64 KiB buffer
        Image.fromarray(textured_image(rng, 600, 600)).save(data / f"{i:03d}.png", compress_level=0)
    (data / "024.png").write_bytes((data / "023.png").read_bytes()[:5000])  # truncated, read mid-stream
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "data"), str(tmp_path), "4"],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["raised: 024.png"] * 4
