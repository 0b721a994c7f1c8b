"""The vLLM processes of this machine, counted by the tests that start and stop servers (what a server leaves)."""

from __future__ import annotations

import os

from anyjev.serving.argv import API_MODULE
from anyjev.serving.proc import NAME_ENV, SUPERVISOR_MODULE, TOKEN_ENV, proc_cmdline, proc_environ, proc_stat


def vllm_process_pids(match: str | None = None, *, include_supervisors: bool = True) -> list[int]:
    """Live (non-zombie) vLLM server processes on this machine (tests use it to count orphans).

    Counted: command lines containing the api_server module (our supervisors too, unless excluded), vLLM
    processes renamed by setproctitle ("VLLM::EngineCore", "VLLM::Worker"), and any process started by
    the supervisor (marked in its environment). MATCH filters on the command line and the anyjev name/token
    markers; since setproctitle overwrites /proc/PID/environ, a process also matches when it shares the process
    group of a matching one (vLLM's engine processes stay in the server's group).
    """
    me = os.getpid()
    candidates: list[tuple[int, int, bool]] = []  # pid, process group, matches MATCH by itself
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        fields = proc_stat(pid)
        if fields is None or fields[0] in ("Z", "X"):
            continue
        cmd = proc_cmdline(pid)
        line = " ".join(cmd)
        if SUPERVISOR_MODULE in cmd and not include_supervisors:
            continue
        env: dict[str, str] | None = None
        hit = API_MODULE in line or line.startswith("VLLM::")
        if not hit:
            env = proc_environ(pid)
            hit = TOKEN_ENV in env
        if not hit:
            continue
        matched = True
        if match is not None:
            env = proc_environ(pid) if env is None else env
            matched = match in line or match in env.get(NAME_ENV, "") or match in env.get(TOKEN_ENV, "")
        candidates.append((pid, int(fields[2]), matched))
    groups = {pgrp for _, pgrp, matched in candidates if matched}
    return sorted(pid for pid, pgrp, matched in candidates if matched or pgrp in groups)
