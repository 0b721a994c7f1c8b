"""The evaluation's settings (the config's ``evaluation.*``) as one typed object, handed down unchanged from the
evaluate job to the functions that use each setting (:mod:`anyjev.numbers.levels`, :mod:`anyjev.numbers.bootstrap`)."""

from __future__ import annotations

from dataclasses import dataclass

from anyjev.errors import ConfigError
from anyjev.schema import check_settings, setting


@dataclass(frozen=True)
class EvaluationOptions:
    """Levels, priors and bootstrap of the offline evaluation (the config's ``evaluation.*``); the schema says which
    values each setting allows."""

    prior_strength: float = setting("evaluation", "prior_strength")
    prior_min_items: int = setting("evaluation", "prior_min_items")
    prior_mode: str = setting("evaluation", "prior_mode")
    prior_batch_size: int | None = setting("evaluation", "prior_batch_size")
    n_boot: int = setting("evaluation", "n_boot")
    bootstrap_seed: int = setting("evaluation", "bootstrap_seed")
    min_calib_items: int = setting("evaluation", "min_calib_items")

    def __post_init__(self) -> None:
        check_settings(self)
        if self.prior_mode != "streaming" and self.prior_batch_size is not None:
            raise ConfigError("evaluation.prior_batch_size", f"applies to prior_mode streaming only (batch uses the whole "
                              f"split), got {self.prior_batch_size} with prior_mode {self.prior_mode!r}")

    @property
    def effective_batch_size(self) -> int | None:
        """Items scored together per step of the running prior: ``prior_batch_size`` (one at a time when unset) under
        the streaming prior, None (the whole split at once) under the batch prior."""
        return (self.prior_batch_size or 1) if self.prior_mode == "streaming" else None
