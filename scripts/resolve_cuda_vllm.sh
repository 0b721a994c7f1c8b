#!/usr/bin/env bash
# Resolve the CUDA vLLM install (requirements/server-gpu.txt) without installing it: pip's resolver chooses every
# package a GPU machine's `bash scripts/setup_env.sh` would install (Python 3.11, Linux x86_64) and writes the
# choice to .venv/cuda-vllm-resolve.json, which tests/unit/test_setup_gpu.py checks against the pins. No GPU needed.
# Run by `scripts/setup_env.sh --test` (about 1.5 min, beside the other installs); skipped while the report is newer
# than the requirements file.
set -euo pipefail
cd "$(dirname "$0")/.."
report=.venv/cuda-vllm-resolve.json
if [ "$report" -nt requirements/server-gpu.txt ]; then
  exit 0
fi
.venv/bin/pip install --dry-run --ignore-installed --quiet --report "$report.tmp" -r requirements/server-gpu.txt
mv "$report.tmp" "$report"
echo "[setup] the CUDA vLLM install resolves: $report"
