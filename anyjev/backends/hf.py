"""transformers in-process: the reference implementation the vLLM path is checked against.

Batched with left padding, explicit position ids (so a padded prompt sees the same positions as an
unpadded one), and only the last position's logits are computed."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from anyjev.backends.base import restrict_and_normalise

log = logging.getLogger(__name__)


class HFBackend:
    """Label log-probabilities from a causal LM loaded with transformers (CPU or GPU)."""

    name = "hf"

    def __init__(self, model_path: str, *, dtype: str = "float32", device: str | None = None, batch_size: int = 8) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self.torch = torch
        self.model_path = str(model_path)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.dtype = dtype
        self.batch_size = batch_size
        self.model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=getattr(torch, dtype)).to(self.device)
        self.model.eval()
        cfg = self.model.config
        pad = getattr(cfg, "pad_token_id", None)
        self.pad_id = int(pad if pad is not None else (cfg.eos_token_id if isinstance(cfg.eos_token_id, int) else 0))

    def describe(self) -> dict:
        return {"backend": self.name, "model": self.model_path, "dtype": self.dtype, "device": self.device,
                "batch_size": self.batch_size}

    def label_logprobs(self, prompts: Sequence[Sequence[int]], label_ids: Sequence[int]) -> np.ndarray:
        torch = self.torch
        labels = torch.tensor([int(i) for i in label_ids], device=self.device)
        out = np.empty((len(prompts), len(label_ids)))
        for start in range(0, len(prompts), self.batch_size):
            batch = [list(map(int, p)) for p in prompts[start : start + self.batch_size]]
            width = max(len(p) for p in batch)
            ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, p in enumerate(batch):
                ids[row, width - len(p) :] = torch.tensor(p)
                mask[row, width - len(p) :] = 1
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            with torch.inference_mode():
                logits = self.model(
                    input_ids=ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    position_ids=positions.to(self.device),
                    logits_to_keep=1,
                ).logits[:, -1, :]
            full = torch.log_softmax(logits.float(), dim=-1)
            out[start : start + len(batch)] = restrict_and_normalise(full[:, labels].cpu().double().numpy())
        return out
