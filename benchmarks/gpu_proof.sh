#!/usr/bin/env bash
# The GPU proof in one command (see benchmarks/gpu_proof.py and benchmarks/NOTES.md):
#   bash benchmarks/gpu_proof.sh OUT [--rehearse] [--steps a,b]   -- results, logs and summary.md into OUT
#   bash benchmarks/gpu_proof.sh OUT --quick [--rehearse] [--pack FILE] [--budget S]   -- the <= 7 min proof
# Without a CUDA GPU it says so and exits 2, doing nothing else (--rehearse: every step on the CPU).
# The bench extra and the test tools come from .gpu-extras/extras.tar.xz where the machine
# lacks them (benchmarks/gpu_extras.sh makes it; it is unpacked here once).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: gpu_proof.sh OUT [--quick] [--rehearse] [--steps a,b]}
if [ -f .gpu-extras/extras.tar.xz ]; then
  if [ ! -f .gpu-extras/site/.done ]; then
    mkdir -p .gpu-extras/site && xz -dc .gpu-extras/extras.tar.xz | tar -C .gpu-extras/site -xf - \
      && touch .gpu-extras/site/.done || { echo "cannot unpack .gpu-extras/extras.tar.xz" >&2; exit 1; }
  fi
  export PYTHONPATH=$PWD/.gpu-extras/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
script=benchmarks/gpu_proof.py
args=()
for a in "${@:2}"; do  # --quick: the short proof of issue #36 (benchmarks/gpu_quick.py), every figure in <= 7 min
  if [ "$a" = "--quick" ]; then script=benchmarks/gpu_quick.py; else args+=("$a"); fi
done
mkdir -p "$(dirname "$out")"
python3 "$script" --out "$out" ${args[@]+"${args[@]}"} 2>&1 | tee -a "$out.log"
exit "${PIPESTATUS[0]}"
