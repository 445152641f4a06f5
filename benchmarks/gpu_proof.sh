#!/usr/bin/env bash
# The GPU proof in one command (see benchmarks/gpu_proof.py and benchmarks/NOTES.md):
#   bash benchmarks/gpu_proof.sh OUT      -- every result, log and summary.md into OUT
# Without a CUDA GPU it says so and exits 2, doing nothing else.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: gpu_proof.sh OUT}
export PYTHONUNBUFFERED=1
python3 benchmarks/gpu_proof.py --out "$out" 2>&1 | tee -a "$out.log"
exit "${PIPESTATUS[0]}"
