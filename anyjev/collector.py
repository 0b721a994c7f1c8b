"""Python's cyclic garbage collector paused around work that builds a large structure without cycles and keeps it
(every prompt of a plan, a cell's prepared items): each collection it sets off would only traverse those containers
again, and everything imported before them (transformers' modules, a tokenizer), and free nothing."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block, and as it was after (an inner pause leaves an outer one on)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
