#!/usr/bin/env bash
# Resolve the CUDA vLLM install (requirements/server-gpu.txt) without installing it: pip's resolver chooses every
# package a GPU machine's `bash scripts/setup_env.sh` would install from PyPI (Python 3.11, Linux x86_64) and writes
# the choice to .venv/cuda-vllm-resolve.json; scripts/check_cuda_resolution.py then refuses it (exit 1) unless torch is
# a CUDA build with its NVIDIA runtime packages at the CUDA version the requirements file declares. No GPU needed.
# Run by `scripts/setup_env.sh --test` (about 1.5 min, beside the other installs); skipped while the report is newer
# than the requirements file and passes the check. tests/unit/test_setup_gpu.py checks the report again.
set -euo pipefail
cd "$(dirname "$0")/.."
report=.venv/cuda-vllm-resolve.json
check() { .venv/bin/python scripts/check_cuda_resolution.py "$1"; }
if [ "$report" -nt requirements/server-gpu.txt ] && check "$report" >/dev/null 2>&1; then
  exit 0
fi
# PyPI alone, without this machine's pip configuration: a find-links folder or extra index that serves a CPU torch
# (2.13.0+cpu sorts above PyPI's 2.13.0) would win the resolution, and a machine without one installs PyPI's build.
# (On a GPU machine, setup_env.sh refuses a torch without CUDA after installing it.)
PIP_CONFIG_FILE=/dev/null .venv/bin/pip install --isolated --index-url https://pypi.org/simple --dry-run \
  --ignore-installed --quiet --report "$report.tmp" -r requirements/server-gpu.txt
mv "$report.tmp" "$report"
check "$report"
