"""Does the DALI build on this machine run beside its torch? One small ``dali`` pipeline feeding torch.

    python3 benchmarks/dali_check.py OUT.json [--cpu]   (exit 0: it runs; 3: it does not; OUT.json says why)

The question of issue #36: the default install puts ``nvidia-dali-cuda120`` next to PyPI's torch, which is
built for CUDA 13. In a child process (a crash is an answer too): 32 small 4:2:0 JPEGs, one epoch of the
``train`` preset (the fused ROI decode) and one of a centre crop as uint8 on ``backend="dali"``, each batch
used by torch on the GPU (a convolution, a matmul after DALI has run); the centre crops are compared with
``dali-cpu``'s decode of the same files (mean absolute difference, uint8 levels: recorded, not judged here;
the question is whether the build runs, parity is the tests' business). OUT.json records the
versions (torch, its CUDA, the DALI build, the driver), the figures, the child's exit status, its stderr's
warning lines and the last lines of its output. ``--cpu``: the same on ``dali-cpu`` (the CPU rehearsal).
The quick GPU proof runs it as its ``dali`` step (``benchmarks/gpu_quick.py``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
def child(folder: Path, gpu: bool) -> dict:
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    import torch
    from host_proxy import tiny_folder

    import gpupipe

    tiny_folder(folder, 32, side=64, classes=2)
    from gpupipe.env import versions

    device, backend = ("cuda", "dali") if gpu else ("cpu", "dali-cpu")
    out: dict = {"backend": backend, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
                 "gpu": torch.cuda.get_device_name(0) if gpu else None, "versions": versions()}
    weight = torch.randn(8, 3, 3, 3, device=device)
    seen = 0
    for images, labels in gpupipe.loader(folder, gpupipe.presets.train(32), batch_size=8, backend=backend,
                                         device=device, hw_decoder_load=0.65):
        assert images.device.type == labels.device.type == device and images.shape == (8, 3, 32, 32), images.shape
        seen += int(torch.nn.functional.conv2d(images, weight).isfinite().all().item()) * len(labels)
    out["train_images"] = seen
    crop = [gpupipe.Decode(), gpupipe.CenterCrop(size=48), gpupipe.Output(dtype="uint8")]
    ours = torch.cat([x.cpu() for x, _ in gpupipe.loader(folder, crop, batch_size=8, backend=backend, device=device,
                                                         shuffle=False, hw_decoder_load=0.65)])
    cpu = torch.cat([x for x, _ in gpupipe.loader(folder, crop, batch_size=8, backend="dali-cpu", device="cpu",
                                                  shuffle=False)])
    diff = (ours.float() - cpu.float()).abs().mean(dim=(1, 2, 3))
    out["decode_vs_cpu"] = {"images": len(diff), "mean": round(float(diff.mean()), 3),
                            "max": round(float(diff.max()), 3)}
    a = torch.randn(512, 512, device=device)
    out["matmul_after_dali"] = bool(torch.isfinite(a @ a).all().item())
    out["ok"] = seen == 32 and len(diff) == 32 and bool(diff.isfinite().all()) and out["matmul_after_dali"]
    return out


def main(argv) -> int:
    if argv[:1] == ["--child"]:
        print("RESULT " + json.dumps(child(Path(argv[1]), gpu=argv[2:] != ["--cpu"])), flush=True)
        return 0
    if argv[:1] in (["--help"], ["-h"]):
        print("usage: " + __doc__.splitlines()[2].strip() + "\n\n" + __doc__.split("\n\n", 2)[2])
        return 0
    cpu = [a for a in argv if a == "--cpu"]
    argv = [a for a in argv if a != "--cpu"]
    if len(argv) != 1:
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    path = Path(argv[0])
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            proc = subprocess.run([sys.executable, __file__, "--child", str(Path(tmp) / "data"), *cpu],
                                  capture_output=True, text=True, timeout=240)
            code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as err:
            code, stdout, stderr = 124, str(err.stdout or ""), str(err.stderr or "")
    found = [line[len("RESULT "):] for line in stdout.splitlines() if line.startswith("RESULT ")]
    result = json.loads(found[-1]) if found else {"ok": False}
    warnings = [line for line in stderr.splitlines() if re.search(r"warn|fancy upsampling", line, re.IGNORECASE)]
    result.update(exit=code, seconds=round(time.monotonic() - started, 1), warning_lines=len(warnings),
                  warning_examples=sorted(set(warnings))[:5], output_tail=(stdout + stderr).splitlines()[-30:])
    result["ok"] = bool(result.get("ok")) and code == 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"DALI beside torch: {'OK' if result['ok'] else 'FAILED'} ({path})")
    return 0 if result["ok"] else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
