"""The canary: one prompt before a cell's real work, proving that the server returns exactly the label ids,
renormalised over them (``--logprobs-mode processed_logprobs``), or failing the cell at once naming the missing ids."""

from __future__ import annotations

import logging

from anyjev.backends.base import Backend
from anyjev.errors import LabelTokenError
from anyjev.run.prepared import PreparedItem

log = logging.getLogger(__name__)


def canary(backend: Backend, p: PreparedItem, *, answer_mass: bool) -> None:
    """One prompt first: proves the server returns exactly the label ids, renormalised over them (or
    raises LabelTokenError naming the missing ids) before the cell's real work starts."""
    try:
        backend.label_logprobs([p.layouts[0][1]], p.label_ids)
        if answer_mass:  # the server must also name every label's full-vocabulary value (logprob_token_ids)
            backend.vocab_logprobs([p.layouts[0][1]], p.label_ids)
    except LabelTokenError as exc:
        raise exc.within(f"canary request (item {p.item.id!r}) failed") from exc
    log.info("canary ok: the server returned exactly the label ids %s, summing to one", p.label_ids)
