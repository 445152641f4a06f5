#!/usr/bin/env bash
# Runs `python -m gpupipe.bench` and keeps its JSON, PNG and table under
# benchmarks/results/<hardware>/ (e.g. cpu-2core, NVIDIA-H100-80GB-HBM3-16core).
# Extra arguments go to the bench: benchmarks/run_bench.sh --model resnet18
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python}
label=$("$python" - <<'PY'
import os, torch
cores = len(os.sched_getaffinity(0))
print(f"{torch.cuda.get_device_name().replace(' ', '-')}-{cores}core" if torch.cuda.is_available() else f"cpu-{cores}core")
PY
)
out="benchmarks/results/$label${SUFFIX:+-$SUFFIX}"
mkdir -p "$out"
"$python" -m gpupipe.bench --out "$out" "$@" | tee "$out/table.md"
