"""The scores a cell writes, byte for byte: cells scored through the real client (VLLMBackend over HTTP, the server
check, chunked requests, answer mass, content-free probes, adaptive rotations) against the stub server, whose values
are a function of the prompt ids, must equal the files committed in tests/data/scores-bytes/, written by this module
(``python -m tests.unit.test_scores_bytes``) before the client's hot path was made faster. Any change to the prompts
sent, the values read, the records or how they are written shows here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from anyjev.backends.vllm import VLLMBackend
from anyjev.data.tasks import Item
from anyjev.decision.labels import LabelChecker
from anyjev.decision.options import PromptOptions
from anyjev.decision.questions import choice, noul, score
from anyjev.run.identity import ScoringOptions, scoring_identity
from anyjev.run.prepared import prepare_items
from anyjev.run.scoring import score_cell
from anyjev.run.server_check import ServerGuard
from tests.stub_http import StubCompletions

EXPECTED = Path(__file__).resolve().parents[1] / "data" / "scores-bytes"
TOPICS = ["politics", "sport", "science", "religion", "computers", "cars", "medicine", "space", "guns", "hockey",
          "baseball", "crypto", "electronics", "motorcycles", "graphics", "windows", "mac", "sale", "atheism", "mideast"]
STATES = ["The match went to extra time before the home side scored.", "Ünïcödé state — with dashes… and “quotes”",
          "A line\u2028separator and a tab\there.", "", "Short.", "The probe reached orbit after a two-stage burn.",
          "Prices fell again; the board met on Tuesday.", "Ein Zustand auf Deutsch, mit Umlauten: äöü ß."]


def items() -> list[Item]:
    """Questions of every kind and K from 2 to 12, two listings of one option set, states with non-ASCII text."""
    questions = [choice("Which topic is it about?", TOPICS[:k]) for k in (3, 4, 5, 12)]
    questions += [noul("Is it about sport?"), score("How technical is it?", ["not", "somewhat", "very"]),
                  choice("Which topic is it about?", list(reversed(TOPICS[:4])))]
    out = []
    for i in range(14):
        q = questions[i % len(questions)]
        out.append(Item(f"it-{i:02d}", STATES[i % len(STATES)], q, i % len(q.options), "calib" if i % 3 == 2 else "test"))
    return out


CELLS = {
    "full": ScoringOptions(answer_mass=True, content_free=True),
    "adaptive": ScoringOptions(rotations="adaptive", target_disagreement=0.5, confidence=0.5, rotations_per_round=1),
    "canonical": ScoringOptions(prompt=PromptOptions(option_order="canonical"), answer_mass=True),
}
TOKENIZERS = ("smollm2", "qwen3")


def score_fixture(cell: str, tokenizer, out: Path, *, chunk_items: int = 3) -> None:
    """Score CELL's items with TOKENIZER against a fresh stub server, as a score job does, into OUT."""
    options = CELLS[cell]
    task = items()
    prepared = prepare_items(tokenizer, task, [it.question.key() for it in task], options.prompt,
                             checker=LabelChecker(tokenizer))
    identity = {"task": cell, "model": {"backend": "vllm", "served_name": "m"}, **scoring_identity(options)}
    with StubCompletions() as stub, VLLMBackend(stub.url, "m", prompts_per_request=4, max_concurrency=2) as backend:
        guard = ServerGuard(backend, prepared[0], where=f"m/{cell}")
        score_cell(backend, tokenizer, prepared, str(out), identity, options=options, chunk_items=chunk_items,
                   guard=guard)


@pytest.fixture(scope="module")
def tokenizers(smollm2_tokenizer, qwen3_tokenizer) -> dict:
    return {"smollm2": smollm2_tokenizer, "qwen3": qwen3_tokenizer}


@pytest.mark.parametrize("name", TOKENIZERS)
@pytest.mark.parametrize("cell", sorted(CELLS))
def test_scores_are_byte_identical_to_the_committed_files(tokenizers, tmp_path, cell: str, name: str) -> None:
    out = tmp_path / "scores.jsonl"
    score_fixture(cell, tokenizers[name], out)
    expected = (EXPECTED / f"{name}-{cell}.jsonl").read_bytes()
    got = out.read_bytes()
    assert got.count(b"\n") == expected.count(b"\n")
    for n, (a, b) in enumerate(zip(got.split(b"\n"), expected.split(b"\n"), strict=True), start=1):
        assert a == b, f"line {n} differs"


def main(argv: list[str]) -> int:
    """Write the expected files (ARGV: the SmolLM2 and Qwen3 tokenizer folders)."""
    from anyjev.decision.tokenizer import load_tokenizer

    EXPECTED.mkdir(parents=True, exist_ok=True)
    for name, folder in zip(TOKENIZERS, argv, strict=True):
        tokenizer = load_tokenizer(folder)
        for cell in CELLS:
            score_fixture(cell, tokenizer, EXPECTED / f"{name}-{cell}.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def _random_value(rng, depth: int = 0):
    """Anything a record may hold, edge cases often: floats of every magnitude (NaN, infinities, -0.0, subnormals),
    ints beyond 64 bits, strings of every kind of character (controls, quotes, backslashes, line separators, lone
    surrogates, astral planes), numpy scalars, nested lists, tuples and dicts."""
    import math
    import struct

    import numpy as np

    kind = rng.randrange(12 if depth < 3 else 8)
    if kind == 0:
        return struct.unpack("d", rng.getrandbits(64).to_bytes(8, "little"))[0]  # any double, NaN and inf among them
    if kind == 1:
        return rng.choice([0.0, -0.0, 1e-4, -1e-4, 9.999999999999999e-5, 1e16, 9999999999999998.0, 1e-7, 5e-324,
                           math.inf, -math.inf, math.nan, -1.2345e-5, 0.5, -2.0])
    if kind == 2:
        return -rng.expovariate(0.3) * 10 ** rng.randint(-9, 3)  # log-probs, some of them tiny
    if kind == 3:
        return rng.choice([0, -1, 2**63 - 1, 2**64, -(2**70), True, False, None])
    if kind == 4:
        return rng.choice([np.float64(0.25), np.int64(3), np.float32(1.5)])
    if kind in (5, 6, 7):
        alphabet = ["a", "Z", " ", '"', "\\", "/", "\n", "\t", "\x00", "\x1f", "\x7f", "\x85", "\xa0", "é", "\u2028",
                    "\u2029", "\ufeff", "\U0001f600", "\ud800", "€", "ß", "\u0301"]
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(6)))
    if kind in (8, 9):
        return [_random_value(rng, depth + 1) if rng.random() < 0.3 else -rng.random() * 30 for _ in range(rng.randrange(8))]
    if kind == 10:
        return tuple(_random_value(rng, depth + 1) for _ in range(rng.randrange(3)))
    return {str(_random_value(rng, 3)): _random_value(rng, depth + 1) for _ in range(rng.randrange(5))}


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # numpy ints summed with ints beyond 64 bits
def test_a_record_line_is_the_text_json_dumps_writes_whatever_the_record_holds() -> None:
    """store._dumps writes through orjson where the two codecs agree, through json elsewhere: the line is always
    json.dumps' own, and both paths are taken."""
    import json
    import random

    from anyjev.run import store

    rng = random.Random(20261205)
    took = {True: 0, False: 0}
    for _ in range(20000):
        record = {"layouts": _random_value(rng), "id": _random_value(rng, 3), "lp": _random_value(rng, 2)}
        try:
            expected = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        except TypeError:  # numpy ints: not a record json can write, and _dumps must refuse it too
            with pytest.raises(TypeError):
                store._dumps(record)
            continue
        assert store._dumps(record) == expected, record
        took[store._written_alike(record)] += 1
    assert min(took.values()) > 1000, took
