"""The one protocol every backend implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Backend(Protocol):
    """Label log-probabilities for a batch of prompts that share one label set.

    ``label_logprobs(prompts, label_ids)`` returns an (N, K) float64 array: for prompt i, the
    log-probabilities of ``label_ids`` at the next position, renormalised over the labels (a softmax
    restricted to the label set), in the order of ``label_ids``.
    """

    name: str

    def label_logprobs(self, prompts: Sequence[Sequence[int]], label_ids: Sequence[int]) -> np.ndarray: ...

    def describe(self) -> dict: ...


def restrict_and_normalise(values: np.ndarray) -> np.ndarray:
    """Log-softmax along the last axis: turns label logits or log-probs into a distribution over labels."""
    values = np.asarray(values, dtype=np.float64)
    m = values.max(axis=-1, keepdims=True)
    return values - (m + np.log(np.exp(values - m).sum(axis=-1, keepdims=True)))
