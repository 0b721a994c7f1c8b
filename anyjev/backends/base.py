"""The one protocol every backend implements."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol

import numpy as np


class Backend(Protocol):
    """Label log-probabilities for a batch of prompts that share one label set.

    ``label_logprobs(prompts, label_ids)`` returns an (N, K) float64 array: for prompt i, the
    log-probabilities of ``label_ids`` at the next position, renormalised over the labels (a softmax
    restricted to the label set), in the order of ``label_ids``. ``vocab_logprobs`` returns the same
    labels' log-probabilities under the full vocabulary, not renormalised (``exp`` summed over a row is
    the answer mass).
    """

    name: str

    def label_logprobs(self, prompts: Sequence[Sequence[int]], label_ids: Sequence[int]) -> np.ndarray: ...

    def vocab_logprobs(self, prompts: Sequence[Sequence[int]], label_ids: Sequence[int]) -> np.ndarray: ...

    def exclusive(self) -> AbstractContextManager[None]:
        """A block in which the backend's vocab_logprobs calls have the model to themselves (a shared server's label
        requests wait), where that matters: a cell reads its answer masses in one."""
        ...

    def describe(self) -> dict: ...
