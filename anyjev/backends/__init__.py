"""Backends turn token-id prompts and their label ids into label log-probabilities (N x K)."""

from anyjev.backends.base import Backend

__all__ = ["Backend"]
