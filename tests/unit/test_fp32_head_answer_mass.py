"""The pinned fp32 lm-head flag, and the answer-mass read (request shape, faults, records).

The request shape is checked against what vLLM 0.32 accepts (``logprob_token_ids`` with ``logprobs`` set,
no ``allowed_token_ids``); tests/integration/test_fidelity_real.py checks the values on a real server.
The responses here are hand-written (a stub server, tests/stub_http.py) to inject faults.
"""

from __future__ import annotations

import contextlib
import json
import math

import numpy as np
import pytest

from anyjev.backends.vllm import VLLMBackend
from anyjev.data.tasks import Item
from anyjev.decision.prompts import prompt_hash
from anyjev.decision.questions import choice, noul
from anyjev.errors import ConfigError, LabelTokenError
from anyjev.numbers.logprobs import log_softmax
from anyjev.run.identity import ScoringOptions, scoring_identity
from anyjev.run.prepared import prepare_items
from anyjev.run.scoring import score_cell
from anyjev.rundata.scores import read_scores
from anyjev.serving.argv import PINNED_FLAGS, build_argv, check_extra_flags
from anyjev.serving.build import resolve_server
from anyjev.serving.spec import ServerSpec
from tests.stub_http import Reply, StubCompletions


def spec(**kw: object) -> ServerSpec:
    return resolve_server(ServerSpec(name="smol", model="/m", served_name="smol", python="py",
                                     **({"dtype": "bfloat16", "block_size": 128} | kw)))  # type: ignore[arg-type]


def overrides(argv: list[str]) -> list[dict]:
    return [json.loads(argv[i + 1]) for i, tok in enumerate(argv) if tok == "--hf-overrides"]


def test_fp32_head_is_on_by_default_and_pinned() -> None:
    assert overrides(build_argv(spec(), 8000)) == [{"head_dtype": "float32"}]
    assert overrides(build_argv(spec(fp32_head=False), 8000)) == [{"head_dtype": "model"}]
    assert spec().spec_hash() != spec(fp32_head=False).spec_hash(), "a lease is not reused across head dtypes"
    assert ServerSpec.from_dict({k: v for k, v in spec().to_dict().items() if k != "fp32_head"}).fp32_head is True
    assert "fp32_head" in PINNED_FLAGS["--hf-overrides"]
    for extra in (("--hf-overrides", '{"head_dtype": "bfloat16"}'), ("--hf-overrides.head_dtype=model",), ("--hf_overrides={}",)):
        with pytest.raises(ConfigError, match=r"models\.smol\.server_flags.*pinned flag --hf-overrides.*fp32_head"):
            check_extra_flags(extra, "models.smol.server_flags")


# ------------------------------------------------------------------------------------------ answer mass

LABELS = [49, 50, 51]
MASS = ScoringOptions(answer_mass=True)


def vocab_reply(payload: dict, drop: int | None = None) -> dict:
    """A vLLM 0.32 response to a logprob_token_ids request: the labels' full-vocabulary log-probs plus the
    sampled token, keyed 'token_id:<id>'."""
    choices = []
    for i, prompt in enumerate(payload["prompt"]):
        top = {f"token_id:{t}": -1.0 - 0.5 * j - 0.01 * len(prompt) for j, t in enumerate(payload["logprob_token_ids"])}
        top["token_id:7"] = -0.2
        if drop is not None:
            del top[f"token_id:{drop}"]
        choices.append({"index": i, "text": "token_id:7", "logprobs": {"top_logprobs": [top]}})
    return {"choices": choices}


@contextlib.contextmanager
def client(reply):
    """A client of a stub server that answers each request with REPLY(its payload)."""
    with StubCompletions() as stub:
        stub.default = Reply(mutate=lambda body, payload: body.update(reply(payload)))
        with VLLMBackend(stub.url, "smol", retries=0, prompts_per_request=2) as backend:
            yield backend


def test_vocab_request_names_labels_and_masks_nothing() -> None:
    seen = []

    def reply(payload: dict) -> dict:
        seen.append(payload)
        return vocab_reply(payload)

    prompts = [[1, 2, 3], [4, 5], [6]]
    with client(reply) as backend:
        values = backend.vocab_logprobs(prompts, LABELS)
    assert len(seen) == 2
    for payload in seen:
        assert "allowed_token_ids" not in payload
        assert payload["logprob_token_ids"] == LABELS and payload["logprobs"] == len(LABELS)
        assert payload["temperature"] == 0.0 and payload["max_tokens"] == 1
    expected = [[-1.0 - 0.5 * j - 0.01 * len(p) for j in range(3)] for p in prompts]
    np.testing.assert_allclose(values, expected)


def test_vocab_request_missing_label_is_refused_naming_the_id() -> None:
    with client(lambda payload: vocab_reply(payload, drop=50)) as backend, \
            pytest.raises(LabelTokenError, match=r"prompt 0: .*no full-vocabulary log-prob for label ids 50") as info:
        backend.vocab_logprobs([[1, 2]], LABELS)
    assert info.value.missing_ids == [50]


class MassBackend:
    """Label log-probs and full-vocabulary values that are a known function of the prompt."""

    name = "mass"

    def __init__(self) -> None:
        self.vocab_calls: list[list[list[int]]] = []

    @staticmethod
    def raw(prompt, label_ids) -> np.ndarray:
        return np.array([-1.5 - 0.1 * ((sum(prompt) + 3 * j) % 7) for j in range(len(label_ids))])

    def label_logprobs(self, prompts, label_ids) -> np.ndarray:
        return np.array([log_softmax(self.raw(p, label_ids)) for p in prompts])

    def vocab_logprobs(self, prompts, label_ids) -> np.ndarray:
        self.vocab_calls.append([list(p) for p in prompts])
        return np.array([self.raw(p, label_ids) for p in prompts])

    def exclusive(self):
        return contextlib.nullcontext()

    def describe(self) -> dict:
        return {"backend": self.name}


def items() -> list[Item]:
    q, s = choice("Which colour?", ["red", "green", "blue"]), noul("Is it spam?")
    return [Item(f"i{n}", f"state {n}", q if n % 2 else s, 0, "test") for n in range(5)]


def score(backend, tokenizer, its, out, options: ScoringOptions, chunk_items: int = 16) -> dict:
    """Score ITS as one cell under OPTIONS (one prior group)."""
    return score_cell(backend, tokenizer, prepare_items(tokenizer, its, ["g"] * len(its), options.prompt), str(out),
                      scoring_identity(options), options=options, chunk_items=chunk_items)


def test_answer_mass_is_stored_per_item_from_the_raw_layout(smollm2_tokenizer, tmp_path) -> None:
    backend, its = MassBackend(), items()
    out = tmp_path / "cell.jsonl"
    counts = score(backend, smollm2_tokenizer, its, out, MASS, chunk_items=2)
    records = read_scores(out).items
    assert len(records) == len(its)
    sent = [p for call in backend.vocab_calls for p in call]
    for rec in records:
        raw_sha = rec["layouts"]["fwd/r0"]["prompt_sha"]
        prompt = next(p for p in sent if prompt_hash(p) == raw_sha)
        expected = math.exp(float(np.logaddexp.reduce(MassBackend.raw(prompt, rec["label_ids"]))))
        assert rec["answer_mass"] == pytest.approx(expected, abs=1e-12)
        assert 0 < rec["answer_mass"] < 1
    assert counts["prompts"] == sum(len({lay["prompt_sha"] for lay in r["layouts"].values()}) for r in records) + len(its)


def test_answer_mass_off_adds_nothing(smollm2_tokenizer, tmp_path) -> None:
    backend, its = MassBackend(), items()
    score(backend, smollm2_tokenizer, its, tmp_path / "a.jsonl", ScoringOptions())
    assert backend.vocab_calls == []
    assert all("answer_mass" not in r for r in read_scores(tmp_path / "a.jsonl").items)


def test_the_backend_protocol_declares_what_the_library_asks_of_a_backend() -> None:
    """Code written against the Backend protocol calls only what the protocol declares (answer mass reads
    vocab_logprobs, which every backend has), and never looks a method up by name."""
    import ast
    import inspect

    from anyjev.backends.base import Backend
    from anyjev.backends.hf import HFBackend
    from anyjev.backends.vllm import VLLMBackend
    from tests.conftest import REPO

    declared = {n for n in vars(Backend) if not n.startswith("_")} | set(Backend.__annotations__)
    assert "vocab_logprobs" in declared
    for impl in (VLLMBackend, HFBackend):
        assert all(callable(getattr(impl, n)) for n in declared - set(Backend.__annotations__)), impl
    used, looked_up = set(), []
    for path in sorted((REPO / "anyjev").rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            typed = {a.arg for a in fn.args.args + fn.args.kwonlyargs
                     if a.annotation is not None and ast.unparse(a.annotation) == "Backend"}
            for node in ast.walk(fn):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in typed:
                    used.add(node.attr)
                if (isinstance(node, ast.Call) and ast.unparse(node.func) in ("getattr", "hasattr") and node.args
                        and ast.unparse(node.args[0]) in typed):
                    looked_up.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert "vocab_logprobs" in used and used <= declared, used - declared
    assert not looked_up, f"a backend's method looked up by name: {looked_up}"
    assert inspect.signature(Backend.vocab_logprobs) == inspect.signature(Backend.label_logprobs)
