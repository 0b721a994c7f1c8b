"""transformers in-process: the reference implementation the vLLM path is checked against.

Batched with left padding, explicit position ids (so a padded prompt sees the same positions as an
unpadded one), and only the last position's logits are computed. With ``fp32_head`` (the default) the
lm-head runs in fp32 whatever the model dtype, as the server does (vLLM ``head_dtype`` float32): the final
hidden state is cast to fp32 and multiplied by the fp32 head weight, so bf16 rounding of the logits
cannot make two labels tie."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

import numpy as np

from anyjev.errors import BackendError
from anyjev.numbers.logprobs import log_softmax
from anyjev.schema import default

log = logging.getLogger(__name__)


class HFBackend:
    """Label log-probabilities from a causal LM loaded with transformers (CPU or GPU)."""

    name = "hf"

    def __init__(
        self, model_path: str, *, dtype: str = "float32", device: str | None = None, batch_size: int = 8,
        fp32_head: bool = default("models", "*", "fp32_head"),
    ) -> None:
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
        self.fp32_head = fp32_head
        self._head: tuple | None = None
        if fp32_head and self.model.dtype != torch.float32:
            self._head = self._fp32_head()

    def _fp32_head(self) -> tuple:
        """(decoder, fp32 weight, fp32 bias or None) of a plain linear lm-head; refuses heads that do more."""
        cfg = self.model.config
        for attr, neutral in (("final_logit_softcapping", None), ("logit_scale", None), ("logits_scaling", 1.0)):
            value = getattr(cfg, attr, None)
            if value is not None and value != neutral:
                raise BackendError(f"{self.model_path}: fp32_head supports a plain linear lm-head only; config.{attr} = "
                                   f"{value!r} (use dtype float32, or fp32_head=False)")
        head = self.model.get_output_embeddings()
        bias = getattr(head, "bias", None)
        return (self.model.get_decoder(), head.weight.detach().float(), None if bias is None else bias.detach().float())

    def describe(self) -> dict:
        return {"backend": self.name, "model": self.model_path, "dtype": self.dtype, "device": self.device,
                "batch_size": self.batch_size, "fp32_head": self.fp32_head}

    def label_logprobs(self, prompts: Sequence[Sequence[int]], label_ids: Sequence[int]) -> np.ndarray:
        """Log-probs over the labels (the :class:`Backend` protocol)."""
        return log_softmax(self.vocab_logprobs(prompts, label_ids))

    def exclusive(self) -> contextlib.AbstractContextManager[None]:
        """In process, nothing else shares the model (the :class:`Backend` protocol)."""
        return contextlib.nullcontext()

    def vocab_logprobs(self, prompts: Sequence[Sequence[int]], label_ids: Sequence[int]) -> np.ndarray:
        """(N, K) full-vocabulary log-probs of ``label_ids`` at the next position (not renormalised):
        ``exp`` summed over a row is the answer mass."""
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
            inputs = {"input_ids": ids.to(self.device), "attention_mask": mask.to(self.device),
                      "position_ids": positions.to(self.device)}
            with torch.inference_mode():
                if self._head is None:
                    logits = self.model(**inputs, logits_to_keep=1).logits[:, -1, :]
                else:
                    decoder, weight, bias = self._head
                    hidden = decoder(**inputs).last_hidden_state[:, -1, :].float()
                    logits = hidden @ weight.T if bias is None else hidden @ weight.T + bias
            full = torch.log_softmax(logits.float(), dim=-1)
            out[start : start + len(batch)] = full[:, labels].cpu().double().numpy()
        return out
