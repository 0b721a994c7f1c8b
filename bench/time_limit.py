"""Every benchmark runs under a time limit and fails loudly past it: a wait that never ends (a page that never
renders, a server that never answers) stops the benchmark with one line naming it and the limit, exit code 124, and
the benchmark's own ``finally`` blocks (servers stopped, scratch folders removed) still run.

    if __name__ == "__main__":
        sys.exit(time_limit.run(main, seconds=3600))

``ANYJEV_BENCH_TIME_LIMIT`` (seconds) overrides every benchmark's own limit.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

LIMIT_ENV = "ANYJEV_BENCH_TIME_LIMIT"
EXIT_TIMED_OUT = 124  # as timeout(1)


class BenchmarkTimeout(BaseException):
    """The benchmark ran past its time limit (a BaseException, like KeyboardInterrupt: no ``except Exception`` in a
    benchmark swallows it)."""


def limit_seconds(default: float) -> float:
    """The time limit in force: ``ANYJEV_BENCH_TIME_LIMIT`` when set, else DEFAULT."""
    value = os.environ.get(LIMIT_ENV)
    return float(value) if value else float(default)


def run(main: Callable[[], int | None], seconds: float) -> int:
    """MAIN() under a time limit of SECONDS (or ``ANYJEV_BENCH_TIME_LIMIT``); its exit code, or 124 with a line on
    stderr when the limit passes first."""
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
