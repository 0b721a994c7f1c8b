# Snakemake's scheduler, kept from re-planning itself many times a second in a long run (plain Python: tests and
# bench/bench_scheduler.py read this file too).
#
# With its default rate limit (--max-jobs-per-timespan 100/1s) the scheduler starts a new one-second timer after every
# round that had jobs waiting, and every finished job starts a round: the timers are never replaced, so each finished
# job adds one more wake-up a second for as long as jobs wait (snakemake/snakemake#3804, #3744). Each round re-reads
# every waiting job's params and resources, so the scheduler's own CPU time grows with jobs x run time: 311 s in a run
# of 90 cells (results/bench/scale.json). One timer pending at a time keeps what the timer is for (a round once the
# rate limit frees a slot) without the pile-up; it is a daemon, so the end of a run does not wait for it.
import threading

from snakemake.scheduling.job_scheduler import JobScheduler

_PENDING = threading.Lock()


def _one_reevaluation_pending(scheduler, delay):
    """JobScheduler._schedule_reevalutation (a round after DELAY seconds), unless a round is already pending. The timer
    marks itself done before it wakes the scheduler, so the round it starts can arm the next one."""
    with _PENDING:
        if getattr(scheduler, "_reevaluation_pending", False):
            return
        scheduler._reevaluation_pending = True

    def wake():
        with _PENDING:
            scheduler._reevaluation_pending = False
        scheduler._open_jobs.release()

    timer = threading.Timer(delay, wake)
    timer.daemon = True
    timer.start()


if not hasattr(JobScheduler, "_schedule_reevalutation"):  # the pinned Snakemake has it (requirements/)
    raise RuntimeError(
        "workflow/rules/scheduler.smk: this Snakemake's scheduler has no _schedule_reevalutation; "
        "check whether snakemake/snakemake#3804 is fixed and remove this file"
    )
JobScheduler._schedule_reevalutation = _one_reevaluation_pending
