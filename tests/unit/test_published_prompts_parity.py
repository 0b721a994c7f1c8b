"""The 'published' prompt profile sends, token for token, what the published library (PyPI anyjev==0.3.0)
sends: its own prompt builder + chat template on the same tokenizer, for real items of every kind.

Reference side (the published library, nothing of ours): ``resolve_labels`` -> labels and ids;
the published ``Decider``'s own permutations (``Decider._perms(q, "L0")``: cyclic shifts for choice,
``[[0,1],[1,0]]`` for noul, identity for score); ``render_chat_parts(build_prompt(render_state(state), q, perm,
DEFAULT_SYSTEM, labels))``; ``tokenizer.encode(prefix + suffix, add_special_tokens=False)`` as its HFBackend
does. Our side: ``prepare_item(..., PUBLISHED)``, i.e. exactly the ids scoring sends.

Differences by design, asserted as such:
- our ``rev`` layouts (reversed-order rotations, the order-flip probe) are not among the published Decider's
  permutations; for them the published *builder* is checked with our permutation (``perm = layout.order``).
- label ids are stored in option order for every layout (noul included); the published backend reads them in
  position order (``label_ids_for_perm``). The set of ids read, and so every value, is the same.
- the published VLLMBackend sends text and lets the server tokenise it with its default special tokens; we
  send the ids above. On SmolLM2 and Qwen3 the tokenizer adds no BOS, so the ids are the same (checked below).

Needs the published package (``scripts/setup_env.sh`` installs it into ``.assets/anyjev-published``; or
``ANYJEV_PUBLISHED_PATH``). Skipped when it is absent, unless ``ANYJEV_REQUIRE_PUBLISHED=1`` (set by .ci/run).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from anyjev.data import builtin
from anyjev.data.tasks import Item
from anyjev.decision import published
from anyjev.decision.labels import LabelChecker
from anyjev.decision.options import PromptOptions
from anyjev.decision.prompts import PROFILES, encode
from anyjev.decision.questions import choice, noul, score
from anyjev.errors import ConfigError, LabelTokenError
from anyjev.run.identity import ScoringOptions, scoring_identity
from anyjev.run.prepared import prepare_item
from tests.conftest import REPO
from tests.published import require_published

PUBLISHED = PromptOptions(prompt_profile="published")


@pytest.fixture(scope="module")
def pub():
    return require_published()


@pytest.fixture(params=["smollm2", "qwen3"])
def tokenizer(request):
    return request.getfixturevalue("smollm2_tokenizer" if request.param == "smollm2" else "qwen3_tokenizer")


def _score_items() -> list[tuple[Item, object]]:
    """Score questions of both published shapes, built on each side with its own constructor:
    bins over a scale (published ``Question.score(bins=K, scale=...)``) and ordered levels
    (``Question.score(levels=...)``), K = 2..10, with assorted states (empty, multi-line, unicode)."""
    P = published.module("question").Question  # noqa: N806 - the published class
    states = ["", "Line one.\nLine two: déjà vu — 42 °C", "The patient reports mild pain.", "{\"k\": 1}"]
    out = []
    for k in range(2, 11):
        theirs = P.score("How severe is it?", bins=k, scale=(0, 10 * k))
        ours = score("How severe is it?", list(theirs.options), scale=(0, 10 * k))
        out.append((Item(f"bins-{k}", states[k % 4], ours, gold=0, split="test"), theirs))
        levels = [f"level {i} of {k}" for i in range(1, k + 1)]
        out.append((Item(f"levels-{k}", states[(k + 1) % 4], score("Which level applies?", levels), gold=0, split="test"),
                    P.score("Which level applies?", levels=levels)))
    return out


def _items() -> list[tuple[Item, object]]:
    """(our item, the published question) for real items: MMLU (K=4, empty state), SocialIQA (K=3),
    Rotten Tomatoes (Yes/No, both phrasings) and the score questions above."""
    P = published.module("question").Question  # noqa: N806
    pairs = []
    for task, n in ((builtin.mmlu(), 30), (builtin.socialiqa(), 30), (builtin.rotten_tomatoes(), 30)):
        for it in task.items[:n]:
            q = it.question
            pairs.append((it, P.noul(q.text) if q.kind == "noul" else P.choice(q.text, list(q.options))))
    return pairs + _score_items()


class _Tok:
    """The published Decider only needs ``backend.tokenizer`` to list its permutations."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.name = "none"


def _published_ids(tok, pq, state, perm) -> tuple[list[int], list[int]]:
    """The published library's own recipe: (input ids, label ids in position order) for one permutation."""
    ro = published.readout()
    labels, ids = ro.resolve_labels(tok, pq)
    spec = ro.build_prompt(published.module("state").render_state(state), pq, perm, ro.DEFAULT_SYSTEM, labels)
    pre, suf = ro.render_chat_parts(tok, spec)
    return tok.encode(pre + suf, add_special_tokens=False), ro.label_ids_for_perm(pq, ids, perm)


def test_published_prompt_ids_equal_the_published_library(pub, tokenizer) -> None:
    decider = published.module("decider").Decider(_Tok(tokenizer))
    checker = LabelChecker(tokenizer)
    counted = {"choice": 0, "noul": 0, "score": 0}
    phrasings: set[tuple[int, ...]] = set()
    builder_only = 0
    for item, pq in _items():
        prepared = prepare_item(tokenizer, checker, item, "g", PUBLISHED)
        their_labels, their_ids = pub.readout.resolve_labels(tokenizer, pq)
        assert prepared.labels == list(their_labels), item.id
        assert prepared.label_ids == list(their_ids), f"{item.id}: label ids {prepared.label_ids} vs published {their_ids}"
        by_name = {lay.name: (lay, ids) for lay, ids in prepared.layouts}
        perms = decider._perms(pq, "L0")
        for s, perm in enumerate(perms):
            layout, ours = by_name[f"fwd/r{s}"]
            assert published.perm_of(item.question, layout) == list(perm)
            theirs, position_ids = _published_ids(tokenizer, pq, item.state, perm)
            assert ours == theirs, f"{item.id} fwd/r{s}: token ids differ from the published prompt"
            assert sorted(position_ids) == sorted(prepared.label_ids)
            counted[item.question.kind] += 1
            if item.question.kind == "noul":
                phrasings.add(tuple(perm))
        for name, (layout, ours) in by_name.items():  # by design: our order-flip probe, the published builder
            if name.startswith("rev/"):
                theirs, _ = _published_ids(tokenizer, pq, item.state, published.perm_of(item.question, layout))
                assert ours == theirs, f"{item.id} {name}"
                builder_only += 1
        text = PUBLISHED.render(tokenizer, item.question, item.state, prepared.layouts[0][0], prepared.labels)
        assert encode(tokenizer, text) == prepared.layouts[0][1]
    assert sum(counted.values()) >= 200, counted
    assert min(counted.values()) >= 18, counted
    assert phrasings == {(0, 1), (1, 0)}, "both Yes/No phrasings are covered"
    assert builder_only >= 100


def test_server_side_tokenisation_adds_nothing(pub, tokenizer) -> None:
    """The published VLLMBackend posts text (default special tokens); we post ids encoded without them.
    Equal here because neither tokenizer adds a BOS/EOS to a chat-templated text."""
    item, _ = _items()[0]
    layout = prepare_item(tokenizer, LabelChecker(tokenizer), item, "g", PUBLISHED).layouts[0][0]
    text = PUBLISHED.render(tokenizer, item.question, item.state, layout, ["A", "B", "C", "D"])
    assert tokenizer(text)["input_ids"] == tokenizer(text, add_special_tokens=False)["input_ids"]


def test_profiles_differ_and_anyjev_is_the_default(pub, tokenizer) -> None:
    item = Item("x", "A state.", choice("Which planet is the largest?", ["Mars", "Jupiter", "Venus"]), gold=1, split="test")
    checker = LabelChecker(tokenizer)
    default = prepare_item(tokenizer, checker, item, "g", PromptOptions())
    mine = prepare_item(tokenizer, checker, item, "g", PromptOptions(prompt_profile="anyjev"))
    theirs = prepare_item(tokenizer, checker, item, "g", PUBLISHED)
    assert [ids for _, ids in default.layouts] == [ids for _, ids in mine.layouts]
    assert all(a != b for (_, a), (_, b) in zip(mine.layouts, theirs.layouts, strict=True))
    text = PUBLISHED.render(tokenizer, item.question, item.state, theirs.layouts[0][0], theirs.labels)
    assert published.system_prompt() in text


def test_profile_identity_names_profile_version_and_source(pub) -> None:
    ident = scoring_identity(ScoringOptions(prompt=PUBLISHED, answer_mass=True))
    assert ident["prompt_profile"]["name"] == "published"
    assert ident["prompt_profile"]["version"] == "anyjev==0.3.0"
    assert len(ident["prompt_profile"]["readout_sha256"]) == 64
    assert ident["answer_mass"] is True
    assert scoring_identity(ScoringOptions())["prompt_profile"] == {"name": "anyjev", "version": PROFILES["anyjev"].version}
    assert scoring_identity(ScoringOptions())["prompt_version"] == "1.1", "the anyjev profile's prompt_version is unchanged"
    with pytest.raises(ConfigError, match="prompt.profile.*'nope'.*anyjev, published"):
        PromptOptions(prompt_profile="nope")


def test_published_label_disagreement_fails_the_item(pub, smollm2_tokenizer, monkeypatch) -> None:
    item = Item("x", "A state.", noul("Is it spam?"), gold=0, split="test")
    monkeypatch.setattr(published, "resolve_labels", lambda tok, q: (["Yes", "No"], [1, 2]))
    with pytest.raises(LabelTokenError, match=r"'x'.*published library resolves labels \['Yes', 'No'\] to ids \[1, 2\]"):
        prepare_item(smollm2_tokenizer, LabelChecker(smollm2_tokenizer), item, "g", PUBLISHED)


def test_missing_package_names_folder_and_setup_command(tmp_path) -> None:
    """In a fresh interpreter (the package is loaded once per process)."""
    code = ("from anyjev.decision.published import load_published\n"
            "try:\n    load_published()\nexcept ImportError as e:\n    print(type(e).__name__, e)\n")
    env = dict(os.environ, ANYJEV_PUBLISHED_PATH=str(tmp_path / "nowhere"), PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.startswith("PublishedPackageError")
    assert str(tmp_path / "nowhere") in out
    assert "scripts/setup_env.sh" in out and "pip install --no-deps --target" in out


def test_our_anyjev_stays_ours(pub) -> None:
    import anyjev

    assert Path(anyjev.__file__).resolve().is_relative_to(REPO)
    assert pub.__version__ == "0.3.0"
    assert Path(pub.__file__).resolve().is_relative_to(published.published_folder())
