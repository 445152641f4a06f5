#!/usr/bin/env bash
# Packs what the GPU proof needs beyond DALI for a GPU machine whose Python is 3.12 and which
# reaches no package index: the bench extra (matplotlib and its own dependencies, psutil) and the
# test tools (hypothesis, pytest-timeout), as one file of a few MiB to carry with DALI's last part.
#   usage: bash benchmarks/gpu_extras.sh        (in the project's root; writes .gpu-extras/extras.tar.xz)
# benchmarks/gpu_proof.sh unpacks it there (once) and puts it on PYTHONPATH. Left out on purpose:
# what that machine already has (torch, torchvision, numpy, pillow, packaging, pytest, nvidia-ml-py).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
wheels=.gpu-extras/wheels
mkdir -p "$wheels"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$wheels" "matplotlib>=3.7" contourpy cycler fonttools kiwisolver pyparsing python-dateutil six \
  "psutil>=5.9" "hypothesis>=6.90" attrs sortedcontainers "pytest-timeout>=2.2" 2> .gpu-extras/pip.log \
  || { grep -v "is ignored" .gpu-extras/pip.log; exit 1; }
site=$(mktemp -d)
for w in "$wheels"/*.whl; do python3 -m zipfile -e "$w" "$site"; done
find "$site" -name '*cpython-3*' ! -name '*cpython-312-*' -delete
tar -C "$site" -cf - . | xz -T0 -6 > .gpu-extras/extras.tar.xz
rm -rf "$site"
echo "carry .gpu-extras/extras.tar.xz ($(du -h .gpu-extras/extras.tar.xz | cut -f1)) with DALI's last part"
