"""The NVIDIA GPUs a server started on this machine would see, and their compute capability, from ``nvidia-smi`` (the
query scripts/setup_env.sh reads too), narrowed to ``CUDA_VISIBLE_DEVICES`` (a SLURM allocation sets it)."""

from __future__ import annotations

import os
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


def visible_gpus() -> list[Gpu]:
    """Every GPU nvidia-smi lists, or those ``CUDA_VISIBLE_DEVICES`` names (by index or UUID) when it is set."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise GpuQueryError("no nvidia-smi on PATH")
    try:
        proc = subprocess.run([smi, *QUERY], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GpuQueryError(f"nvidia-smi cannot be run ({type(exc).__name__}: {exc})") from exc
    if proc.returncode != 0:
        said = (proc.stdout + proc.stderr).strip().splitlines()[:1]
        raise GpuQueryError(f"nvidia-smi {' '.join(QUERY)} exited with {proc.returncode}: {' '.join(said)}")
    gpus = []
    for line in proc.stdout.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4:
            continue
        index, uuid, name, capability = fields
        major, _, minor = capability.partition(".")
        if index.isdigit() and major.isdigit() and minor.isdigit():
            gpus.append(Gpu(int(index), uuid, name, (int(major), int(minor))))
    if not gpus:
        raise GpuQueryError(f"nvidia-smi lists no GPU ({proc.stdout.strip()[:200]!r})")
    chosen = os.environ.get("CUDA_VISIBLE_DEVICES")
    if chosen is None:
        return gpus
    names = [n.strip() for n in chosen.split(",") if n.strip()]
    visible = [g for g in gpus if str(g.index) in names or any(n.startswith("GPU-") and g.uuid.startswith(n) for n in names)]
    if not visible:
        raise GpuQueryError(f"CUDA_VISIBLE_DEVICES={chosen!r} names none of the GPUs nvidia-smi lists "
                            f"({', '.join(g.describe() for g in gpus)})")
    return visible
