"""Progress of a scoring job, as periodic log lines (items done, rate, ETA): a progress bar would flood Snakemake's
job logs."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("anyjev.run.scoring")


class Progress:
    """Periodic log lines (a progress bar would flood Snakemake's job logs)."""

    def __init__(self, total: int, done: int, every: float = 10.0) -> None:
        self.total, self.done, self.every = total, done, every
        self.start = self.last = time.monotonic()
        self.start_done = done

    def update(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.every or self.done == self.total:
            rate = (self.done - self.start_done) / max(now - self.start, 1e-9)
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            log.info("scored %d/%d items (%.0f%%), %.2f items/s, eta %.0f s", self.done, self.total,
                     100 * self.done / max(self.total, 1), rate, eta)
            self.last = now
