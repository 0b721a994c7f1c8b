"""score_cell with a fake in-process backend and the real SmolLM2 tokenizer: final files in task order,
resume after an interruption (byte-identical to an uninterrupted run), torn checkpoints, stale identities,
prompt de-duplication, and label checks before any request."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import threading

import numpy as np
import pytest

from anyjev.data.tasks import Item
from anyjev.decision.options import PromptOptions
from anyjev.decision.prompts import prompt_hash
from anyjev.decision.questions import choice, noul, score
from anyjev.errors import LabelTokenError, TaskDataError
from anyjev.numbers.logprobs import log_softmax
from anyjev.run.identity import ScoringOptions
from anyjev.run.prepared import prepare_items
from anyjev.run.scoring import score_cell
from anyjev.run.store import PartialScores, partial_path
from anyjev.rundata.scores import FORMAT, read_scores

IDENTITY = {"task": "mixed", "model": {"backend": "fake"}, "prompt_version": "test", "layouts": {"permute": True, "flip": True}}

COLOUR = choice("Which colour is the object?", ["red", "green", "blue"])
SPAM = noul("Is this message spam?")
SEVERITY = score("How severe is it?", ["low", "medium", "high"])
# SmolLM2 ids of the labels right after "<|im_start|>assistant\n" (see test_labels_tokenizers.py)
LABEL_IDS = {"choice": [49, 50, 51], "noul": [10539, 5230], "score": [33, 34, 35]}


@pytest.fixture(scope="module")
def smol(smollm2_tokenizer):
    """The real SmolLM2 tokenizer (shared session fixture in tests/conftest.py)."""
    return smollm2_tokenizer


class Interrupted(Exception):
    """Stands in for a killed job / lost server in the middle of a cell."""


class FakeBackend:
    """Label log-probs that are a deterministic function of the prompt ids; counts calls and prompts."""

    name = "fake"

    def __init__(self, fail_after_calls: int | None = None) -> None:
        self.fail_after_calls = fail_after_calls
        self.calls = 0
        self.sent: list[tuple[int, ...]] = []
        self.call_log: list[list[tuple[int, ...]]] = []
        self.value_by_sha: dict[str, list[float]] = {}

    @staticmethod
    def values(prompt, label_ids) -> np.ndarray:
        logits = []
        for lab in label_ids:
            digest = hashlib.sha256(f"{list(prompt)}|{lab}".encode()).digest()
            logits.append(int.from_bytes(digest[:4], "big") / 2**32 * 8.0)
        return log_softmax(np.array(logits))

    def label_logprobs(self, prompts, label_ids) -> np.ndarray:
        if self.fail_after_calls is not None and self.calls >= self.fail_after_calls:
            raise Interrupted(f"interrupted after {self.calls} calls")
        self.calls += 1
        self.call_log.append([tuple(p) for p in prompts])
        rows = []
        for p in prompts:
            self.sent.append(tuple(p))
            row = self.values(p, label_ids)
            self.value_by_sha[prompt_hash(p)] = row.tolist()
            rows.append(row)
        return np.array(rows).reshape(len(prompts), len(label_ids))

    def describe(self) -> dict:
        return {"backend": self.name}

    @property
    def sent_shas(self) -> list[str]:
        return [prompt_hash(p) for p in self.sent]

    @property
    def work(self) -> list[tuple[int, ...]]:
        """The prompts sent for scoring: all of them, less a leading one-prompt canary request whose
        prompt is sent again with its chunk (score_cell may probe the server with one prompt first)."""
        log = self.call_log
        if log and len(log[0]) == 1 and any(log[0][0] in call for call in log[1:]):
            log = log[1:]
        return [p for call in log for p in call]

    @property
    def work_shas(self) -> list[str]:
        return [prompt_hash(p) for p in self.work]


def make_items() -> list[Item]:
    """Mixed kinds, ids deliberately not in sorted order."""
    states = ["a red apple", "the sky at noon", "fresh grass", "WIN A FREE PHONE!!!", "lunch at 12?", "server down",
              "typo in docs", "a ripe tomato", "CLAIM YOUR PRIZE", "disk 95% full"]  # fmt: skip
    questions = [COLOUR, COLOUR, COLOUR, SPAM, SPAM, SEVERITY, SEVERITY, COLOUR, SPAM, SEVERITY]
    ids = ["i07", "i03", "i09", "i01", "i08", "i02", "i06", "i00", "i05", "i04"]
    golds = [0, 2, 1, 0, 1, 2, 0, 0, 0, 1]
    rows = zip(ids, states, questions, golds, strict=True)
    return [Item(i, s, q, g, "test" if n % 3 else "calib") for n, (i, s, q, g) in enumerate(rows)]


def groups_of(items: list[Item]) -> list[str]:
    return [it.question.key() for it in items]


def run(backend, tok, items, out, identity=IDENTITY, chunk_items: int = 2) -> dict:
    options = ScoringOptions()
    return score_cell(backend, tok, prepare_items(tok, items, groups_of(items), options.prompt), str(out), identity,
                      options=options, chunk_items=chunk_items)


def partial_records(out) -> tuple[dict, list[dict]]:
    lines = partial_path(out).read_text(encoding="utf-8").splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def record_shas(rec: dict) -> set[str]:
    return {lay["prompt_sha"] for lay in rec["layouts"].values()}


@pytest.fixture(scope="module")
def reference(smol, tmp_path_factory) -> tuple[bytes, list[dict], FakeBackend, dict]:
    """An uninterrupted run: the bytes every resumed run must reproduce."""
    out = tmp_path_factory.mktemp("ref") / "cell.jsonl"
    backend = FakeBackend()
    counts = run(backend, smol, make_items(), out)
    read = read_scores(out)
    identity, records = read.identity, read.items
    assert identity == IDENTITY
    return out.read_bytes(), records, backend, counts


def interrupted_run(smol, out, calls: int) -> list[dict]:
    """Score until the backend fails after ``calls`` calls; returns the records the checkpoint holds."""
    with pytest.raises(Interrupted):
        run(FakeBackend(fail_after_calls=calls), smol, make_items(), out)
    assert not out.exists()
    header, recs = partial_records(out)
    assert header["identity"] == IDENTITY and header["format"] == FORMAT
    assert 0 < len(recs) < len(make_items())  # a real partial: some but not all items
    return recs


# ------------------------------------------------------------------------------------------ plain run


def test_final_file_in_task_order_with_all_layouts(reference, tmp_path) -> None:
    data, records, backend, counts = reference
    items = make_items()
    assert [r["id"] for r in records] == [it.id for it in items]
    canary = backend.call_log[0]
    assert len(canary) == 1 and len(backend.sent) == len(backend.work) + 1  # the canary: one prompt, apart
    assert counts == {"items": 10, "scored": 10, "resumed": 0, "prompts": len(backend.work),
                      "prompt_tokens": sum(map(len, backend.work)),
                      "canary": {"prompts": 1, "prompt_tokens": len(canary[0])}}
    assert len(set(backend.work)) == len(backend.work)  # no prompt scored twice
    assert set(backend.sent_shas) == set().union(*(record_shas(r) for r in records))
    lines = data.decode().splitlines()
    assert json.loads(lines[0]) == {"type": "header", "format": FORMAT, "identity": IDENTITY}
    assert len(lines) == 1 + len(items)
    for it, rec in zip(items, records, strict=True):
        q = it.question
        expected_layouts = {lay.name: lay for group in PromptOptions().layouts(q).values() for lay in group}
        assert set(rec["layouts"]) == set(expected_layouts)
        assert len(rec["layouts"]) == {"choice": 6, "noul": 4, "score": 1}[q.kind]
        assert rec["label_ids"] == LABEL_IDS[q.kind]
        assert (rec["gold"], rec["split"], rec["group"], rec["question"], rec["k"]) == (it.gold, it.split, q.key(), q.key(), q.k)
        for name, lay in rec["layouts"].items():
            assert lay["order"] == list(expected_layouts[name].order)
            assert lay["swapped"] == expected_layouts[name].swapped
            # each layout holds the backend's values for exactly its own prompt
            assert lay["lp"] == backend.value_by_sha[lay["prompt_sha"]]
            assert abs(np.logaddexp.reduce(lay["lp"])) < 1e-12


def test_different_states_give_different_prompts(reference) -> None:
    _, records, _, _ = reference
    shas = [record_shas(r) for r in records]
    for a in range(len(shas)):
        for b in range(a + 1, len(shas)):
            assert shas[a].isdisjoint(shas[b])


# ---------------------------------------------------------------------------------------------- resume


def test_interrupted_then_resumed_is_byte_identical_and_scores_only_the_rest(smol, reference, tmp_path,
                                                                           fault_seen) -> None:
    ref_bytes, ref_records, _, _ = reference
    out = tmp_path / "cell.jsonl"
    saved = interrupted_run(smol, out, calls=3)
    saved_ids = {r["id"] for r in saved}
    backend = FakeBackend()
    counts = run(backend, smol, make_items(), out)
    assert counts["resumed"] == len(saved_ids)
    assert counts["scored"] == 10 - len(saved_ids)
    missing_shas = set().union(*(record_shas(r) for r in ref_records if r["id"] not in saved_ids))
    assert sorted(backend.work_shas) == sorted(missing_shas)  # every missing prompt once, nothing already saved
    assert set(backend.sent_shas) == missing_shas
    assert counts["prompts"] == len(backend.work)
    assert out.read_bytes() == ref_bytes
    assert not partial_path(out).exists()
    fault_seen(f"(no message) {len(saved_ids)} items resumed, {counts['scored']} scored; the final file equals the "
               f"uninterrupted run's byte for byte")


def test_torn_last_line_is_dropped_and_rescored(smol, reference, tmp_path) -> None:
    ref_bytes, ref_records, _, _ = reference
    out = tmp_path / "cell.jsonl"
    saved = interrupted_run(smol, out, calls=3)
    torn_id = saved[-1]["id"]
    text = partial_path(out).read_text(encoding="utf-8")
    partial_path(out).write_text(text[: -len(text.splitlines()[-1]) // 2], encoding="utf-8")  # half the last line
    backend = FakeBackend()
    counts = run(backend, smol, make_items(), out)
    kept = {r["id"] for r in saved} - {torn_id}
    assert counts["resumed"] == len(kept)
    rescored = set().union(*(record_shas(r) for r in ref_records if r["id"] not in kept))
    assert sorted(backend.work_shas) == sorted(rescored)
    assert record_shas(next(r for r in ref_records if r["id"] == torn_id)) <= set(backend.work_shas)
    assert out.read_bytes() == ref_bytes


def test_last_line_without_newline_survives_a_second_interruption(smol, reference, tmp_path) -> None:
    # A kill can land after a record's text but before its "\n". The record must not be glued to the next one.
    ref_bytes, _, _, _ = reference
    out = tmp_path / "cell.jsonl"
    saved = interrupted_run(smol, out, calls=2)
    text = partial_path(out).read_text(encoding="utf-8")
    partial_path(out).write_text(text.rstrip("\n"), encoding="utf-8")
    with pytest.raises(Interrupted):
        run(FakeBackend(fail_after_calls=4), smol, make_items(), out)
    _, recs = partial_records(out)  # every line of the checkpoint is still one JSON record
    assert len(recs) >= len(saved)  # the unterminated record was dropped, and the second run added more
    run(FakeBackend(), smol, make_items(), out)
    assert out.read_bytes() == ref_bytes


def test_torn_header_is_moved_aside(smol, reference, tmp_path) -> None:
    ref_bytes, _, _, _ = reference
    out = tmp_path / "cell.jsonl"
    partial_path(out).write_text('{"type": "header", "form', encoding="utf-8")
    backend = FakeBackend()
    counts = run(backend, smol, make_items(), out)
    assert counts["resumed"] == 0
    assert out.read_bytes() == ref_bytes
    assert len(list(tmp_path.glob("cell.jsonl.partial.stale-*"))) == 1


def test_line_separator_characters_in_item_ids(smol, tmp_path) -> None:
    # json.dumps(ensure_ascii=False) writes U+2028 / U+0085 raw; they must not split a record in two
    items = [Item(f"id\u2028{n}\x85", f"state {n}", SPAM, 0, "test") for n in range(6)]
    out = tmp_path / "odd.jsonl"
    with pytest.raises(Interrupted):
        run(FakeBackend(fail_after_calls=2), smol, items, out)
    backend = FakeBackend()
    counts = run(backend, smol, items, out)
    assert counts["resumed"] > 0
    assert [r["id"] for r in read_scores(out).items] == [it.id for it in items]


def test_corrupt_middle_line_is_refused(smol, tmp_path) -> None:
    out = tmp_path / "cell.jsonl"
    interrupted_run(smol, out, calls=3)
    lines = partial_path(out).read_text(encoding="utf-8").splitlines()
    lines[1] = lines[1][:20]
    partial_path(out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    backend = FakeBackend()
    with pytest.raises(TaskDataError, match=r"line 2"):
        run(backend, smol, make_items(), out)
    assert backend.calls == 0


def test_partial_under_another_identity_is_moved_aside(smol, tmp_path) -> None:
    out = tmp_path / "cell.jsonl"
    interrupted_run(smol, out, calls=3)
    old_partial = partial_path(out).read_text(encoding="utf-8")
    other = copy.deepcopy(IDENTITY)
    other["model"] = {"backend": "fake", "revision": "2"}
    backend = FakeBackend()
    counts = run(backend, smol, make_items(), out, identity=other)
    assert counts["resumed"] == 0 and counts["scored"] == 10
    stale = list(tmp_path.glob("cell.jsonl.partial.stale-*"))
    assert len(stale) == 1
    assert stale[0].read_text(encoding="utf-8") == old_partial  # kept intact, not mixed in
    read = read_scores(out)
    identity, records = read.identity, read.items
    assert identity == other
    assert sorted(backend.work_shas) == sorted(set().union(*(record_shas(r) for r in records)))
    fresh = tmp_path / "fresh.jsonl"
    run(FakeBackend(), smol, make_items(), fresh, identity=other)
    assert out.read_bytes() == fresh.read_bytes()


# ----------------------------------------------------------------------------------------- de-duplication


def test_noul_reversed_layouts_reuse_the_forward_prompts(smol, tmp_path) -> None:
    out = tmp_path / "one.jsonl"
    backend = FakeBackend()
    items = [Item("only", "Meeting moved to 3pm.", SPAM, 1, "test")]
    counts = run(backend, smol, items, out)
    (rec,) = read_scores(out).items
    lay = rec["layouts"]
    assert len(backend.work) == 2 and counts["prompts"] == 2
    assert set(backend.sent_shas) == {lay["fwd/r0"]["prompt_sha"], lay["fwd/r1"]["prompt_sha"]}
    assert lay["rev/r0"]["prompt_sha"] == lay["fwd/r1"]["prompt_sha"] != lay["fwd/r0"]["prompt_sha"]
    assert lay["rev/r1"]["prompt_sha"] == lay["fwd/r0"]["prompt_sha"]
    assert lay["rev/r0"]["lp"] == lay["fwd/r1"]["lp"] and lay["rev/r1"]["lp"] == lay["fwd/r0"]["lp"]
    assert lay["fwd/r0"]["lp"] != lay["fwd/r1"]["lp"]


def test_two_option_choice_reversed_order_is_a_rotation(smol, tmp_path) -> None:
    q = choice("Which is heavier?", ["a feather", "a brick"])
    backend = FakeBackend()
    run(backend, smol, [Item("x", "", q, 1, None)], tmp_path / "c.jsonl")
    (rec,) = read_scores(tmp_path / "c.jsonl").items
    assert len(rec["layouts"]) == 4 and len(backend.work) == 2 and len(set(backend.sent)) == 2
    assert rec["layouts"]["rev/r0"]["prompt_sha"] == rec["layouts"]["fwd/r1"]["prompt_sha"]


def test_identical_items_are_sent_once(smol, tmp_path) -> None:
    items = [Item("a", "same text", SPAM, 0, "test"), Item("b", "same text", SPAM, 0, "test")]
    backend = FakeBackend()
    run(backend, smol, items, tmp_path / "dup.jsonl")
    assert len(backend.work) == 2 and len(set(backend.sent)) == 2
    assert len(backend.call_log[-1]) == 2  # one request holds both items' prompts, each once
    a, b = read_scores(tmp_path / "dup.jsonl").items
    assert a["layouts"] == b["layouts"] and (a["id"], b["id"]) == ("a", "b")


# ------------------------------------------------------------------------------------------ label checks


def test_labels_not_single_tokens_fail_before_any_backend_call(smol, tmp_path) -> None:
    # a generation prompt ending in a space: every label merges with it (" A" instead of "A")
    tok = copy.deepcopy(smol)
    tok.chat_template = smol.chat_template.replace("'<|im_start|>assistant\n'", "'<|im_start|>assistant\nAnswer: '")
    assert tok.chat_template != smol.chat_template
    out = tmp_path / "cell.jsonl"
    backend = FakeBackend()
    with pytest.raises(LabelTokenError) as info:
        run(backend, tok, make_items(), out)
    assert backend.calls == 0 and backend.sent == []
    assert "i07" in str(info.value) and "merges with the end of the prompt" in str(info.value)
    assert not out.exists() and not partial_path(out).exists()


def test_backend_label_error_names_the_items(smol, tmp_path) -> None:
    class Missing(FakeBackend):
        def label_logprobs(self, prompts, label_ids):
            self.calls += 1
            raise LabelTokenError("label 50 missing", missing_ids=[50], returned_ids=[49, 51, 99])

    backend = Missing()
    with pytest.raises(LabelTokenError) as info:
        run(backend, smol, make_items(), tmp_path / "cell.jsonl")
    assert "'i07'" in str(info.value) and "label 50 missing" in str(info.value)
    assert info.value.missing_ids == [50] and info.value.returned_ids == [49, 51, 99]
    assert backend.calls == 1  # the first failure stops the cell
    assert not (tmp_path / "cell.jsonl").exists()


# ------------------------------------------------------------------------------------------ the order of a cell's requests
class Recording(FakeBackend):
    """FakeBackend that also reads answer masses, and logs each call (with the ids of the items its prompts belong to)
    and each window it is given to itself. A label call for an item of FAIL_AT raises."""

    def __init__(self, fail_at: str | None = None, hold: list[list[str]] | None = None) -> None:
        super().__init__()
        self.events: list[tuple] = []
        self.fail_at = fail_at
        self.owners: dict[tuple[int, ...], str] = {}  # prompt ids -> its item's id (score_chunks fills it)
        # HOLD (the chunks' ids): a chunk's requests answer only once a request of the next chunk has been sent.
        self.hold = hold or []
        self.sent = [threading.Event() for _ in self.hold]
        self.threads: set[threading.Thread] = set()  # those label calls came from

    def label_logprobs(self, prompts, label_ids) -> np.ndarray:
        ids = sorted({self.owners[tuple(p)] for p in prompts})
        self.events.append(("label", ids))
        chunk = next((n for n, c in enumerate(self.hold) if set(c) & set(ids)), None)
        if chunk is not None:
            self.sent[chunk].set()
            if chunk + 1 < len(self.hold) and not self.sent[chunk + 1].wait(timeout=60):
                self.events.append(("alone", chunk))
        self.threads.add(threading.current_thread())
        if self.fail_at in ids:
            raise Interrupted("the server went away")
        values = super().label_logprobs(prompts, label_ids)
        self.events.append(("answered", ids))
        return values

    def vocab_logprobs(self, prompts, label_ids) -> np.ndarray:
        self.events.append(("mass", len(prompts)))
        return self.values(prompts[0], label_ids)[None, :].repeat(len(prompts), axis=0) - 0.5

    @contextlib.contextmanager
    def exclusive(self):
        self.events.append(("exclusive",))
        yield
        self.events.append(("shared",))


def score_chunks(backend: Recording, smol, out, *, check_ahead, chunks_in_flight: int = 2) -> list[tuple]:
    """score_full over make_items()' items, chunks of 2, every checkpoint logged in BACKEND's events."""
    from anyjev.run.full import score_full
    from anyjev.run.progress import Progress

    items = make_items()
    todo = prepare_items(smol, items, groups_of(items), PromptOptions())
    backend.owners.update({tuple(ids): p.item.id for p in todo for _, ids in p.layouts})
    partial = PartialScores(out, IDENTITY)
    real_add = partial.add
    partial.add = lambda records: (backend.events.append(("write", [r["id"] for r in records])), real_add(records))
    try:
        score_full(backend, todo, partial, Progress(len(todo), 0), chunk_items=2, answer_mass=True,
                   check_ahead=check_ahead, chunks_in_flight=chunks_in_flight)
    finally:
        partial.close()
    return backend.events


def chunk_ids(smol) -> list[list[str]]:
    """make_items()' ids as score_chunks reads them, a chunk each."""
    items = make_items()
    ids = [p.item.id for p in prepare_items(smol, items, groups_of(items), PromptOptions())]
    return [ids[i : i + 2] for i in range(0, len(ids), 2)]


def test_a_cell_reads_every_answer_mass_in_one_window_then_checks_each_chunk_after_its_answers(smol, tmp_path) -> None:
    """The answer masses of all the items, every label set, in one window that has the server to itself, before any
    label request; then the chunks are written in order, each after its every answer has come back and after a check
    started once they had."""
    backend = Recording()
    events = score_chunks(backend, smol, tmp_path / "cell.jsonl", check_ahead=lambda: backend.events.append(("check",)))
    first_label = events.index(next(e for e in events if e[0] == "label"))
    assert events[0] == ("exclusive",) and events[first_label - 1] == ("shared",)
    assert {e[0] for e in events[1 : first_label - 1]} == {"mass"}
    assert sum(n for kind, n in events[1 : first_label - 1]) == len(make_items())
    chunks = chunk_ids(smol)
    assert [e for e in events if e[0] in ("check", "write")] == [e for c in chunks for e in (("check",), ("write", c))]
    for n, chunk in enumerate(chunks):
        check = [i for i, e in enumerate(events) if e == ("check",)][n]
        answered = [i for i, e in enumerate(events) if e[0] == "answered" and set(e[1]) & set(chunk)]
        assert answered and max(answered) < check, f"chunk {n + 1} is checked before its every answer is in"


def test_the_next_chunks_requests_are_sent_before_a_chunks_answers_come_back(smol, tmp_path) -> None:
    """Two chunks in flight: the next chunk's requests are sent while a chunk's are still out, so the engine does not
    wait for the client between chunks. The backend answers a chunk only once a request of the next one has been sent
    (a chunk waited for alone is logged, after a wait the test bounds); one chunk at a time, the next chunk is sent
    once every answer of the one before is in."""
    chunks = chunk_ids(smol)
    events = score_chunks(Recording(hold=chunks), smol, tmp_path / "ahead.jsonl", check_ahead=lambda: None)
    assert len(chunks) > 2 and [e for e in events if e[0] == "alone"] == []
    assert [e[1] for e in events if e[0] == "write"] == chunks

    events = score_chunks(Recording(), smol, tmp_path / "alone.jsonl", check_ahead=lambda: None, chunks_in_flight=1)
    for first, second in zip(chunks, chunks[1:], strict=False):
        sent = min(i for i, e in enumerate(events) if e[0] == "label" and set(e[1]) & set(second))
        answered = max(i for i, e in enumerate(events) if e[0] == "answered" and set(e[1]) & set(first))
        assert answered < sent


def test_one_chunk_in_flight_is_read_on_the_calling_thread_and_two_beside_it(smol, tmp_path) -> None:
    """One chunk at a time needs no thread of its own: the job's thread sends each chunk's requests itself (a stack
    sampler of the job sees them where they run, and no hand-over costs CPU). Two at once are read on threads beside
    it."""
    backend = Recording()
    score_chunks(backend, smol, tmp_path / "one.jsonl", check_ahead=lambda: None, chunks_in_flight=1)
    assert backend.threads == {threading.current_thread()}
    backend = Recording()
    score_chunks(backend, smol, tmp_path / "two.jsonl", check_ahead=lambda: None, chunks_in_flight=2)
    assert backend.threads and threading.current_thread() not in backend.threads


@pytest.mark.parametrize("chunks_in_flight", [1, 2])
def test_a_chunk_read_before_a_failing_chunk_is_written_and_nothing_after_it(smol, tmp_path, chunks_in_flight) -> None:
    """A job stopped by an error loses only the chunk that failed and those after it: the third chunk's failing request
    does not drop the first two, read before it (the fourth, which may have been read beside it, is not written)."""
    chunks = chunk_ids(smol)
    out = tmp_path / "cell.jsonl"
    with pytest.raises(Interrupted):
        score_chunks(Recording(fail_at=chunks[2][0]), smol, out, check_ahead=lambda: None,
                     chunks_in_flight=chunks_in_flight)
    assert [r["id"] for r in partial_records(out)[1]] == chunks[0] + chunks[1]
