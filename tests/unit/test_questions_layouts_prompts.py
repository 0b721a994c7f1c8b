"""Questions (validation, identity keys), layouts (rotations, reversed probe, swapped Yes/No) and the user message."""

from __future__ import annotations

import string

import pytest

from anyjev.decision.labels import label_strings
from anyjev.decision.layouts import Layout, orders_array, rotations
from anyjev.decision.options import PromptOptions
from anyjev.decision.prompts import SYSTEM_PROMPT, has_chat_template, user_message
from anyjev.decision.questions import Question, choice, noul, score
from anyjev.errors import QuestionError

# ------------------------------------------------------------------------------------------ validation
DEFAULT = PromptOptions()  # the schema's prompt options


@pytest.mark.parametrize(
    ("build", "field", "value_text"),
    [
        (lambda: choice("", ["a", "b"]), "text", "''"),
        (lambda: choice("   ", ["a", "b"]), "text", "'   '"),
        (lambda: noul(""), "text", "''"),
        (lambda: choice("Pick one", ["only"]), "options", "1 options"),
        (lambda: choice("Pick one", list(string.ascii_lowercase) + ["aa"]), "options", "27 options"),
        (lambda: choice("Pick one", ["red", "green", "red"]), "options[2]", "'red'"),
        (lambda: choice("Pick one", ["red", "green", " red "]), "options[2]", "' red '"),
        (lambda: choice("Pick one", ["red", "", "blue"]), "options[1]", "''"),
        (lambda: choice("Pick one", ["red", "  "]), "options[1]", "'  '"),
        (lambda: choice("Pick one", "abc"), "options", "'abc'"),
        (lambda: Question("noul", "Is it spam?", ("No", "Yes")), "options", "('No', 'Yes')"),
        (lambda: Question("noul", "Is it spam?", ("Yes", "No", "Maybe")), "options", "('Yes', 'No', 'Maybe')"),
        (lambda: score("How bad?", [f"level {i}" for i in range(11)]), "options", "11 levels"),
        (lambda: score("How bad?", ["low"]), "options", "1 levels"),
        (lambda: score("How bad?", ["low", "high"], scale=(10, 0)), "scale", "(10.0, 0.0)"),
        (lambda: score("How bad?", ["low", "high"], scale=(3, 3)), "scale", "(3.0, 3.0)"),
        (lambda: score("How bad?", ["low", "high"], scale=(0, 5, 10)), "scale", "(0.0, 5.0, 10.0)"),
        (lambda: score("How bad?", ["low", "high"], centers=(1.0,)), "centers", "(1.0,)"),
        (lambda: Question("choice", "Pick", ("a", "b"), scale=(0.0, 1.0)), "scale", "(0.0, 1.0)"),
        (lambda: Question("ranking", "Pick", ("a", "b")), "kind", "'ranking'"),
    ],
    ids=[
        "empty-text", "blank-text", "noul-empty-text", "one-option", "27-options", "duplicate", "duplicate-after-strip",
        "empty-option", "blank-option", "options-as-string", "noul-swapped-options", "noul-three-options", "score-11-levels",
        "score-1-level", "scale-reversed", "scale-empty", "scale-three-numbers", "centers-count", "choice-with-scale", "bad-kind",
    ],
)  # fmt: skip
def test_validation_error_names_field_and_value(build, field: str, value_text: str) -> None:
    with pytest.raises(QuestionError) as info:
        build()
    err = info.value
    assert err.field == field
    msg = str(err)
    assert f"field {field!r}" in msg
    assert value_text in msg
    assert isinstance(err, ValueError)


def test_limits_are_inclusive() -> None:
    assert choice("Pick", ["a", "b"]).k == 2
    assert choice("Pick", list(string.ascii_uppercase)).k == 26
    assert score("How much?", [str(i) for i in range(10)]).k == 10
    assert score("How much?", ["lo", "hi"], scale=(-1, 1)).scale == (-1.0, 1.0)
    assert noul("Is it?").options == ("Yes", "No")


def test_duplicate_option_error_points_at_the_first_copy() -> None:
    with pytest.raises(QuestionError, match=r"duplicates options\[0\]"):
        choice("Pick", ["same", "other", "same"])


# ------------------------------------------------------------------------------------------ identity keys


def test_key_is_stable_and_content_addressed() -> None:
    a = choice("Which colour?", ["red", "green", "blue"])
    b = choice("Which colour?", ("red", "green", "blue"))
    assert a.key() == b.key()
    assert a == b
    assert len(a.key()) == 16 and all(c in "0123456789abcdef" for c in a.key())
    # a fresh construction in another process would hash the same canonical JSON: the key is a pure function
    assert Question.from_dict(a.to_dict()).key() == a.key()


def test_option_order_text_kind_and_scale_change_the_key() -> None:
    base = choice("Which colour?", ["red", "green", "blue"])
    keys = {
        base.key(),
        choice("Which colour?", ["green", "red", "blue"]).key(),
        choice("Which colour ?", ["red", "green", "blue"]).key(),
        choice("Which colour?", ["red", "green", "blue", "black"]).key(),
        score("Which colour?", ["red", "green", "blue"]).key(),
        score("Which colour?", ["red", "green", "blue"], scale=(0, 1)).key(),
        score("Which colour?", ["red", "green", "blue"], scale=(0, 2)).key(),
        score("Which colour?", ["red", "green", "blue"], scale=(0, 2), centers=(0, 1, 2)).key(),
    }
    assert len(keys) == 8


def test_display_name_does_not_change_the_key() -> None:
    plain = noul("Is this spam?")
    named = noul("Is this spam?", name="spam-check")
    assert named.key() == plain.key()
    assert named == plain
    assert named.to_dict()["name"] == "spam-check"
    assert "name" not in plain.to_dict()
    assert choice("Pick", ["a", "b"], name="x").key() == choice("Pick", ["a", "b"], name="y").key()


def test_round_trip_through_dict() -> None:
    for q in (
        choice("Pick", ["a", "b", "c"], name="n"),
        noul("Is it?"),
        score("How much?", ["lo", "mid", "hi"], scale=(0, 9), centers=(1.5, 4.5, 7.5)),
    ):
        back = Question.from_dict(q.to_dict())
        assert back == q and back.key() == q.key() and back.name == q.name


# ---------------------------------------------------------------------------------------------- layouts


def names_orders(layouts: list[Layout]) -> list[tuple[str, tuple[int, ...], bool]]:
    return [(lay.name, lay.order, lay.swapped) for lay in layouts]


def test_choice_k4_rotations_and_reversed_rotations() -> None:
    q = choice("Pick", ["w", "x", "y", "z"])
    out = DEFAULT.layouts(q)
    assert list(out) == ["fwd", "rev"]
    # rotation s shows option (p + s) mod K at position p
    assert names_orders(out["fwd"]) == [
        ("fwd/r0", (0, 1, 2, 3), False),
        ("fwd/r1", (1, 2, 3, 0), False),
        ("fwd/r2", (2, 3, 0, 1), False),
        ("fwd/r3", (3, 0, 1, 2), False),
    ]
    # the same rotations of the reversed order
    assert names_orders(out["rev"]) == [
        ("rev/r0", (3, 2, 1, 0), False),
        ("rev/r1", (2, 1, 0, 3), False),
        ("rev/r2", (1, 0, 3, 2), False),
        ("rev/r3", (0, 3, 2, 1), False),
    ]


@pytest.mark.parametrize("k", [2, 3, 5, 20, 26])
def test_rotations_are_permutations_showing_each_option_once_per_position(k: int) -> None:
    q = choice("Pick", [f"o{i}" for i in range(k)])
    for group, layouts in DEFAULT.layouts(q).items():
        orders = orders_array(layouts)
        assert orders.shape == (k, k)
        for row in orders:
            assert sorted(row.tolist()) == list(range(k))
        for col in orders.T:  # every option appears at every position exactly once (a Latin square)
            assert sorted(col.tolist()) == list(range(k))
        assert layouts[0].order == (tuple(range(k)) if group == "fwd" else tuple(reversed(range(k))))


def test_choice_without_permute_or_flip() -> None:
    q = choice("Pick", ["a", "b", "c"])
    assert names_orders(PromptOptions(permute=False).layouts(q)["fwd"]) == [("fwd/r0", (0, 1, 2), False)]
    assert names_orders(PromptOptions(permute=False).layouts(q)["rev"]) == [("rev/r0", (2, 1, 0), False)]
    assert list(PromptOptions(flip=False).layouts(q)) == ["fwd"]
    assert len(PromptOptions(flip=False).layouts(q)["fwd"]) == 3


def test_noul_swaps_the_phrasing_not_the_options() -> None:
    out = DEFAULT.layouts(noul("Is it spam?"))
    assert names_orders(out["fwd"]) == [("fwd/r0", (0, 1), False), ("fwd/r1", (0, 1), True)]
    assert names_orders(out["rev"]) == [("rev/r0", (0, 1), True), ("rev/r1", (0, 1), False)]
    assert names_orders(PromptOptions(permute=False).layouts(noul("Is it spam?"))["rev"]) == [("rev/r0", (0, 1), True)]


def test_score_has_one_forward_layout_and_no_reversed_probe() -> None:
    q = score("How severe?", ["low", "mid", "high", "critical"])
    out = DEFAULT.layouts(q)
    assert list(out) == ["fwd"]
    assert names_orders(out["fwd"]) == [("fwd/r0", (0, 1, 2, 3), False)]
    assert PromptOptions(permute=True, flip=True).layouts(q) == out


def test_rotations_of_an_arbitrary_base() -> None:
    assert [lay.order for lay in rotations((2, 0, 1), "g")] == [(2, 0, 1), (0, 1, 2), (1, 2, 0)]


# ----------------------------------------------------------------------------------------- user message


def test_choice_user_message_lists_options_in_layout_order() -> None:
    q = choice("Which planet is largest?", ["Mars", "Jupiter", "Venus", "Earth"])
    lay = DEFAULT.layouts(q)["fwd"][1]  # (1, 2, 3, 0)
    msg = user_message(q, "A science quiz.", lay, label_strings(q))
    assert msg == (
        "State:\nA science quiz.\n\nQuestion: Which planet is largest?\nOptions:\n"
        "A. Jupiter\nB. Venus\nC. Earth\nD. Mars\nAnswer with the letter only."
    )
    rev = user_message(q, "A science quiz.", DEFAULT.layouts(q)["rev"][0], label_strings(q))
    assert rev.splitlines()[5:9] == ["A. Earth", "B. Venus", "C. Jupiter", "D. Mars"]


@pytest.mark.parametrize("state", ["", "   ", "\n\t"])
def test_empty_state_is_shown_as_empty(state: str) -> None:
    q = choice("Pick", ["a", "b"])
    msg = user_message(q, state, DEFAULT.layouts(q)["fwd"][0], ["A", "B"])
    assert msg.splitlines()[:3] == ["State:", "(empty)", ""]


def test_multiline_state_is_kept_verbatim() -> None:
    q = noul("Is it spam?")
    msg = user_message(q, "line one\nline two", DEFAULT.layouts(q)["fwd"][0], ["Yes", "No"])
    assert msg.startswith("State:\nline one\nline two\n\nQuestion: Is it spam?\n")


def test_noul_user_message_phrasing() -> None:
    q = noul("Is it spam?")
    out = DEFAULT.layouts(q)
    plain = user_message(q, "Buy now!", out["fwd"][0], ["Yes", "No"])
    swapped = user_message(q, "Buy now!", out["fwd"][1], ["Yes", "No"])
    assert plain == "State:\nBuy now!\n\nQuestion: Is it spam?\nAnswer Yes or No."
    assert swapped == "State:\nBuy now!\n\nQuestion: Is it spam?\nAnswer No or Yes."
    assert user_message(q, "Buy now!", out["rev"][0], ["Yes", "No"]) == swapped
    assert user_message(q, "Buy now!", out["rev"][1], ["Yes", "No"]) == plain
    assert "Options:" not in plain


def test_score_user_message_digits_and_letters() -> None:
    q = score("How severe?", ["low", "mid", "high"])
    lay = DEFAULT.layouts(q)["fwd"][0]
    digits = user_message(q, "x", lay, label_strings(q))
    assert digits.splitlines()[4:] == ["Levels (ordered from first to last):", "1. low", "2. mid", "3. high",
                                       "Answer with the number only."]
    letters = user_message(q, "x", lay, label_strings(q, "letters"))
    assert letters.splitlines()[5:] == ["A. low", "B. mid", "C. high", "Answer with the letter only."]
    scaled = score("How hot?", ["cold", "warm"], scale=(-5, 42.5))
    assert "Levels (ordered, over the scale -5 to 42.5):" in user_message(scaled, "x", DEFAULT.layouts(scaled)["fwd"][0], ["1", "2"])


def test_label_strings() -> None:
    assert label_strings(choice("P", list("abcde"))) == ["A", "B", "C", "D", "E"]
    assert label_strings(noul("Is it?")) == ["Yes", "No"]
    assert label_strings(score("How?", ["a", "b", "c"])) == ["1", "2", "3"]
    assert label_strings(score("How?", ["a", "b", "c"]), "letters") == ["A", "B", "C"]
    assert label_strings(choice("P", [str(i) for i in range(26)]))[-1] == "Z"


class NoTemplate:
    chat_template = None


def test_render_without_chat_template() -> None:
    q = noul("Is it spam?")
    text = DEFAULT.render(NoTemplate(), q, "Buy now!", DEFAULT.layouts(q)["fwd"][0], ["Yes", "No"])
    assert not has_chat_template(NoTemplate())
    assert text == f"{SYSTEM_PROMPT}\n\nState:\nBuy now!\n\nQuestion: Is it spam?\nAnswer Yes or No.\nAnswer:"


def test_a_prompt_has_one_version_its_profiles_and_the_committed_identities_stand() -> None:
    """A prompt's version is its profile's (no second or third version constant beside it), and a cell scored now
    gets the identity the committed reference cells carry, so their scores are still recognised."""
    import json

    import anyjev.decision.prompts
    import anyjev.run.identity
    from anyjev.run.identity import ScoringOptions, scoring_identity
    from tests.conftest import REPO

    constants = [f"{m.__name__}.{n}" for m in (anyjev.decision.prompts, anyjev.run.identity) for n in vars(m)
                 if n.isupper() and n.endswith("VERSION")]
    assert constants == [], f"prompt versions beside the profiles': {constants}"
    cells = sorted((REPO / "results" / "cells").glob("*/*/scores.jsonl"))
    assert cells
    for scores in cells:
        identity = json.loads(scores.read_text(encoding="utf-8").split("\n", 1)[0])["identity"]
        ours = scoring_identity(ScoringOptions(answer_mass=identity["answer_mass"]))
        assert {k: identity.get(k) for k in ours} == ours, scores
