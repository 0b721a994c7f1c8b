"""workflow/rules/scheduler.smk: Snakemake's scheduler keeps one re-evaluation timer pending at a time, not one more
for every round (snakemake/snakemake#3804); a round still follows each timer, and the timer does not hold the run's end.
"""

from __future__ import annotations

import threading

import pytest
from snakemake.scheduling.job_scheduler import JobScheduler

from tests.conftest import REPO

SCHEDULER_SMK = REPO / "workflow" / "rules" / "scheduler.smk"
WAIT_S = 60  # a bound on a wait for an event that comes within its delay (0.05 s); never reached when it works


class FakeScheduler:
    """What the timer touches of a JobScheduler: the semaphore its main loop waits on."""

    def __init__(self) -> None:
        self._open_jobs = threading.Semaphore(0)


@pytest.fixture()
def patched(monkeypatch: pytest.MonkeyPatch) -> list[threading.Timer]:
    """scheduler.smk run as Snakemake includes it, with every timer it starts recorded."""
    monkeypatch.setattr(JobScheduler, "_schedule_reevalutation", JobScheduler._schedule_reevalutation)
    started: list[threading.Timer] = []

    class RecordedTimer(threading.Timer):
        def start(self) -> None:
            started.append(self)
            super().start()

    monkeypatch.setattr(threading, "Timer", RecordedTimer)
    exec(compile(SCHEDULER_SMK.read_text(), str(SCHEDULER_SMK), "exec"), {"__name__": "scheduler_smk"})
    return started


def test_the_workflow_includes_it_before_its_rules() -> None:
    snakefile = (REPO / "workflow" / "Snakefile").read_text()
    assert snakefile.index('include: "rules/scheduler.smk"') < snakefile.index('include: "rules/common.smk"')


def test_many_rounds_leave_one_timer_pending_and_it_wakes_the_scheduler_once(patched: list[threading.Timer]) -> None:
    scheduler = FakeScheduler()
    for _ in range(50):  # fifty rounds that left jobs waiting
        JobScheduler._schedule_reevalutation(scheduler, 0.05)
    assert len(patched) == 1 and patched[0].daemon
    assert scheduler._open_jobs.acquire(timeout=WAIT_S), "the pending timer never woke the scheduler"
    patched[0].join(WAIT_S)
    assert not scheduler._open_jobs.acquire(blocking=False), "fifty rounds woke the scheduler more than once"


def test_the_round_a_timer_starts_can_arm_the_next(patched: list[threading.Timer]) -> None:
    scheduler = FakeScheduler()
    JobScheduler._schedule_reevalutation(scheduler, 0.05)
    assert scheduler._open_jobs.acquire(timeout=WAIT_S)
    # the round the timer started: it still has jobs waiting, so it asks for the next wake-up, which must come
    JobScheduler._schedule_reevalutation(scheduler, 0.05)
    assert len(patched) == 2
    assert scheduler._open_jobs.acquire(timeout=WAIT_S), "the round after a timer could not arm the next one"
