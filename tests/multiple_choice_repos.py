"""Local folders in the hub's layout with the exact schemas of three multiple-choice datasets, a few rows each, and
the worked examples of docs/configuration.md that declare them.

* cais/mmlu, config ``all``: ``question`` string, ``subject`` string, ``choices`` a list of strings, ``answer`` a
  ClassLabel A-D (stored as 0-3); splits test and validation.
* allenai/ai2_arc, config ``ARC-Challenge``: ``id``, ``question``, ``choices`` {text: [...], label: [...]},
  ``answerKey`` a string; rows with 3, 4 and 5 options in both splits (L1 is fitted per K: each K needs calibration
  items), one row a split labelled 1-4 instead of A-D; splits test and validation.
* Rowan/hellaswag: ``ind`` int32, ``activity_label``, ``ctx_a``, ``ctx_b``, ``ctx``, ``endings`` a list of strings,
  ``source_id``, ``split``, ``split_type``, ``label`` the index as a string ("0"-"3"); splits validation and test (as
  on the hub, the test split's labels are empty).

Each row's correct option is known here (``ANSWERS``: item id -> the option's text), so a test checks the gold a
declaration reads against it. Six test and four calibration items a task: ``N_TEST``, ``N_CALIB``.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.conftest import REPO
from tests.hub_repos import write_hub_repo

N_TEST, N_CALIB = 6, 4
DOC = REPO / "docs" / "configuration.md"


def _mmlu_rows(split: str, n: int, offset: int) -> dict[str, list]:
    rows: dict[str, list] = {"question": [], "subject": [], "choices": [], "answer": []}
    for i in range(n):
        a, b = i + offset + 2, i + 3
        options = [str(a + b), str(a + b + 1), str(a * b + 10), str(a + b - 1)]
        rows["question"].append(f"What is {a} + {b}?")
        rows["subject"].append("elementary_mathematics")
        rows["choices"].append(options[i % 4:] + options[:i % 4])  # the correct option at every position
        rows["answer"].append((4 - i % 4) % 4)
    return rows


ARC_TEST = [  # question, option texts, option labels, answerKey
    ("Which gas do plants take in for photosynthesis?", ["oxygen", "carbon dioxide", "nitrogen", "helium"],
     ["A", "B", "C", "D"], "B"),
    ("What is the boiling point of water at sea level?", ["50 C", "100 C", "150 C"], ["A", "B", "C"], "B"),
    ("Which is a mammal?", ["shark", "frog", "whale", "trout", "crow"], ["A", "B", "C", "D", "E"], "C"),
    ("What makes the Moon shine?", ["its own light", "reflected sunlight", "volcanoes", "city lights"],
     ["1", "2", "3", "4"], "2"),
    ("Which force pulls objects toward Earth?", ["magnetism", "friction", "gravity", "tension"], ["A", "B", "C", "D"], "C"),
    ("What do bees collect from flowers?", ["nectar", "sand", "salt", "oil"], ["A", "B", "C", "D"], "A"),
]
ARC_VALIDATION = [
    ("Which organ pumps blood?", ["lung", "heart", "kidney", "skin"], ["A", "B", "C", "D"], "B"),
    ("What state of matter is ice?", ["gas", "liquid", "solid"], ["A", "B", "C"], "C"),
    ("Which planet is closest to the Sun?", ["Venus", "Earth", "Mars", "Mercury", "Jupiter"], ["A", "B", "C", "D", "E"], "D"),
    ("What do roots take up from soil?", ["water", "light", "heat", "sound"], ["1", "2", "3", "4"], "1"),
]


def _arc_rows(rows: list[tuple]) -> dict[str, list]:
    return {"id": [f"Mercury_{i}" for i in range(len(rows))], "question": [q for q, *_ in rows],
            "choices": [{"text": texts, "label": labels} for _, texts, labels, _ in rows], "answerKey": [key for *_, key in rows]}


HELLASWAG = [  # activity, ctx_a, ctx_b, endings, the correct ending's index
    ("Making a sandwich", "A man lays two slices of bread on a board.", "he",
     ["spreads butter on one slice.", "throws the board in a lake.", "paints the bread blue.", "sings to the knife."], 0),
    ("Washing a car", "A woman fills a bucket with soapy water.", "she",
     ["drinks the water slowly.", "scrubs the car with a sponge.", "buries the bucket.", "reads the bucket aloud."], 1),
    ("Walking the dog", "A boy clips a leash to his dog's collar.", "they",
     ["fly over the roof.", "bake a cake together.", "walk down the street.", "swim in the sink."], 2),
    ("Tying shoes", "A girl sits down and pulls on her sneakers.", "she",
     ["eats the laces.", "mails the shoes away.", "plants the shoes.", "ties the laces in a bow."], 3),
    ("Brushing teeth", "A man squeezes paste onto a toothbrush.", "he",
     ["brushes his teeth carefully.", "brushes the cat's fur.", "paints the wall.", "hides it in a drawer."], 0),
    ("Raking leaves", "A woman gathers leaves in the yard.", "she",
     ["irons the leaves flat.", "rakes them into a pile.", "sends them by post.", "glues them to the tree."], 1),
    ("Pouring cereal", "A child opens a box of cereal.", "he",
     ["reads the box to a fish.", "wears the box as a hat.", "pours it into a bowl.", "throws it at the moon."], 2),
    ("Mowing the lawn", "A man pushes a mower out of the shed.", "he",
     ["feeds the mower soup.", "folds the mower up.", "paints the grass.", "mows the grass in rows."], 3),
    ("Reading a book", "A woman opens a novel on the couch.", "she",
     ["reads the first page.", "cooks the novel.", "throws it in a pond.", "uses it as a plate."], 0),
    ("Watering plants", "A boy fills a watering can.", "he",
     ["drinks from the can.", "waters the plants on the porch.", "waters the television.", "buries the can."], 1),
]


def _hellaswag_rows(rows: list[tuple], split: str, labelled: bool) -> dict[str, list]:
    return {"ind": list(range(len(rows))), "activity_label": [r[0] for r in rows], "ctx_a": [r[1] for r in rows],
            "ctx_b": [r[2] for r in rows], "ctx": [f"{r[1]} {r[2]}" for r in rows], "endings": [r[3] for r in rows],
            "source_id": [f"activitynet~v_{i}" for i in range(len(rows))], "split": [split] * len(rows),
            "split_type": ["indomain"] * len(rows), "label": [str(r[4]) if labelled else "" for r in rows]}


def mmlu_repo(root: Path) -> Path:
    import datasets

    features = datasets.Features({"question": datasets.Value("string"), "subject": datasets.Value("string"),
                                  "choices": datasets.Sequence(datasets.Value("string")),
                                  "answer": datasets.ClassLabel(names=["A", "B", "C", "D"])})
    return write_hub_repo(root, {"test": _mmlu_rows("test", N_TEST, 0), "validation": _mmlu_rows("validation", N_CALIB, 20)},
                          features, "all")


def arc_repo(root: Path) -> Path:
    import datasets

    features = datasets.Features({"id": datasets.Value("string"), "question": datasets.Value("string"),
                                  "choices": datasets.Sequence({"text": datasets.Value("string"), "label": datasets.Value("string")}),
                                  "answerKey": datasets.Value("string")})
    return write_hub_repo(root, {"test": _arc_rows(ARC_TEST), "validation": _arc_rows(ARC_VALIDATION)}, features, "ARC-Challenge")


def hellaswag_features():
    import datasets

    text = datasets.Value("string")
    return datasets.Features({"ind": datasets.Value("int32"), "activity_label": text, "ctx_a": text, "ctx_b": text, "ctx": text,
                              "endings": datasets.Sequence(text), "source_id": text, "split": text, "split_type": text,
                              "label": text})


def hellaswag_repo(root: Path, rows: list[tuple] = HELLASWAG) -> Path:
    return write_hub_repo(root, {"validation": _hellaswag_rows(rows, "val", True), "test": _hellaswag_rows(rows[:3], "test", False)},
                          hellaswag_features())


REPOS = {"cais/mmlu": mmlu_repo, "allenai/ai2_arc": arc_repo, "Rowan/hellaswag": hellaswag_repo}


def _answers() -> dict[str, dict[str, str]]:
    mmlu = {}
    for split, n, offset in (("test", N_TEST, 0), ("validation", N_CALIB, 20)):
        rows = _mmlu_rows(split, n, offset)
        mmlu |= {f"{split}-{i}": rows["choices"][i][rows["answer"][i]] for i in range(n)}
    arc = {f"{split}-{i}": texts[labels.index(key)] for split, rows in (("test", ARC_TEST), ("validation", ARC_VALIDATION))
           for i, (_, texts, labels, key) in enumerate(rows)}
    hellaswag = {f"validation-{i}": endings[gold] for i, (_, _, _, endings, gold) in enumerate(HELLASWAG)}
    return {"cais/mmlu": mmlu, "allenai/ai2_arc": arc, "Rowan/hellaswag": hellaswag}


ANSWERS = _answers()


def worked_examples() -> dict[str, dict]:
    """The multiple-choice worked examples of docs/configuration.md: task name -> its config entry, as written."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    found = {}
    for block in blocks:
        tasks = yaml.safe_load(block).get("tasks", {}) if "hub:" in block else {}
        found |= {name: task for name, task in tasks.items() if task["hub"]["dataset"] in REPOS}
    return found


def as_fixture_task(task: dict, root: Path, *, local: bool) -> dict:
    """A worked example's task with N_TEST and N_CALIB items, reading its fixture: as a local dataset folder (LOCAL: the
    declared dataset replaced by the folder, no revision), else still declared under its hub id."""
    hub = dict(task["hub"])
    if local:
        hub["dataset"] = str(REPOS[hub["dataset"]](root / hub["dataset"].replace("/", "--")))
        hub.pop("revision", None)
    return task | {"hub": hub, "n_test": N_TEST, "n_calib": N_CALIB, "allow_fewer": False}
