"""The NVIDIA GPUs a server started on this machine would see, and their compute capability, from ``nvidia-smi`` (the
query scripts/setup_env.sh reads too), narrowed to ``CUDA_VISIBLE_DEVICES`` (a SLURM allocation sets it); and the
driver with the CUDA version it supports, from nvidia-smi's header."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

QUERY = ["--query-gpu=index,uuid,name,compute_cap", "--format=csv,noheader"]


class GpuQueryError(Exception):
    """nvidia-smi is missing, fails, or lists no GPU this process may use: the message says which."""


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    capability: tuple[int, int]

    def describe(self) -> str:
        return f"GPU {self.index} ({self.name}, compute capability {self.capability[0]}.{self.capability[1]})"


def _nvidia_smi(*args: str) -> str:
    """What ``nvidia-smi ARGS`` prints; GpuQueryError when it is missing, cannot be run or fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise GpuQueryError("no nvidia-smi on PATH")
    try:
        proc = subprocess.run([smi, *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GpuQueryError(f"nvidia-smi cannot be run ({type(exc).__name__}: {exc})") from exc
    if proc.returncode != 0:
        said = (proc.stdout + proc.stderr).strip().splitlines()[:1]
        raise GpuQueryError(f"{' '.join(['nvidia-smi', *args])} exited with {proc.returncode}: {' '.join(said)}")
    return proc.stdout


def driver_cuda() -> tuple[str, str]:
    """(driver version, CUDA version) as nvidia-smi's header names them: the CUDA version is the newest the driver
    supports, or what the header says instead of one (``N/A``: the driver cannot run CUDA here)."""
    header = _nvidia_smi()
    driver = re.search(r"Driver Version:\s*(\S+)", header)
    cuda = re.search(r"CUDA Version:\s*([^\s|]+)", header)
    if cuda is None:
        raise GpuQueryError(f"nvidia-smi's header names no CUDA version ({header.strip()[:200]!r})")
    return (driver.group(1) if driver else "unknown"), cuda.group(1)


def visible_gpus() -> list[Gpu]:
    """Every GPU nvidia-smi lists, or those ``CUDA_VISIBLE_DEVICES`` names (by index or UUID) when it is set."""
    listed = _nvidia_smi(*QUERY)
    gpus = []
    for line in listed.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4:
            continue
        index, uuid, name, capability = fields
        major, _, minor = capability.partition(".")
        if index.isdigit() and major.isdigit() and minor.isdigit():
            gpus.append(Gpu(int(index), uuid, name, (int(major), int(minor))))
    if not gpus:
        raise GpuQueryError(f"nvidia-smi lists no GPU ({listed.strip()[:200]!r})")
    chosen = os.environ.get("CUDA_VISIBLE_DEVICES")
    if chosen is None:
        return gpus
    names = [n.strip() for n in chosen.split(",") if n.strip()]
    visible = [g for g in gpus if str(g.index) in names or any(n.startswith("GPU-") and g.uuid.startswith(n) for n in names)]
    if not visible:
        raise GpuQueryError(f"CUDA_VISIBLE_DEVICES={chosen!r} names none of the GPUs nvidia-smi lists "
                            f"({', '.join(g.describe() for g in gpus)})")
    return visible
