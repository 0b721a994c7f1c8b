"""A model's chat_template (auto, none, or a Jinja file): read and refused naming the key, recorded in the cell's
identity (a checkpoint made under another template, or under an edited file, is never resumed, and the score job's
file changes so Snakemake reruns it), read back from it, and rendered as docs/configuration.md says. That every path
renders the same prompt under it is tests/unit/test_prompt_paths.py; the real server,
tests/integration/test_chat_template_real.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from anyjev.cli import main
from anyjev.config import validate_config
from anyjev.decision.options import PromptOptions
from anyjev.decision.prompts import ChatTemplate
from anyjev.decision.questions import choice, noul
from anyjev.errors import ConfigError
from anyjev.run.cell import ScoreJob
from anyjev.run.identity import ScoringOptions, scoring_identity
from anyjev.run.prepared import prepare_items
from anyjev.run.scoring import score_cell
from anyjev.run.store import partial_path
from anyjev.rundata.scores import read_scores
from anyjev.settings import Settings
from tests.conftest import REPO
from tests.unit.test_store_scoring import FakeBackend, Interrupted, groups_of, make_items

QUESTION = choice("Which colour is the fruit?", ["red", "blue", "green"])


def render(tokenizer, options: PromptOptions, question=QUESTION) -> str:
    labels = ["Yes", "No"] if question.kind == "noul" else ["A", "B", "C"]
    return options.render(tokenizer, question, "A red apple.", options.layouts(question)["fwd"][0], labels)


def test_read_auto_none_and_a_file_relative_to_the_working_directory(tmp_path: Path) -> None:
    assert ChatTemplate.read("auto", key="k") == ChatTemplate() and ChatTemplate().name == "auto"
    assert ChatTemplate.read("none", key="k").text is None
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "base.jinja").write_text("{{ messages[1].content }}")
    read = ChatTemplate.read("t/base.jinja", key="k", workdir=tmp_path)
    assert (read.name, read.text) == ("t/base.jinja", "{{ messages[1].content }}")


@pytest.mark.parametrize(("value", "why"), [
    ("missing.jinja", r"'missing.jinja' is neither auto, none nor a file \(looked in "),
    ("t", r"'t' is a folder: name the Jinja file"),
    ("binary.jinja", r"'binary.jinja' is not UTF-8 text \(byte 0\)"),
    ("Auto", r"'Auto' is neither auto, none nor a file"),
])
def test_a_template_that_cannot_be_read_is_refused_naming_the_key(tmp_path: Path, value: str, why: str) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "binary.jinja").write_bytes(b"\xff\xfe")
    config = {"models": {"m": {"source": "smollm2", "chat_template": value}},
              "tasks": {"t": {"source": "builtin", "builtin": "mmlu"}}, "published": None}
    with pytest.raises(ConfigError, match=r"^config key models\.m\.chat_template: " + why):
        validate_config(config, workdir=tmp_path)


def test_a_template_jinja_cannot_render_is_one_line_naming_the_file_and_line(smollm2_dir, tmp_path: Path, capsys) -> None:
    (tmp_path / "bad.jinja").write_text("{{ bos_token }}\n{% for m in messages %}{{ m.content }}\n")
    (tmp_path / "t.jsonl").write_text('{"id": "a", "state": "s", "question": "q?", "kind": "noul", "gold": 0}\n')
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"models": {"m": {"source": "local", "path": str(smollm2_dir),
                                                       "chat_template": str(tmp_path / "bad.jinja")}},
                                      "tasks": {"t": {"source": "file", "path": str(tmp_path / "t.jsonl")}},
                                      "published": None}))
    assert main(["show", "--task-file", str(tmp_path / "t.jsonl"), "--item", "a", "--tokenizer", str(smollm2_dir),
                 "--config", str(config)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert re.fullmatch(rf"anyjev show: ArgumentError: chat template '{re.escape(str(tmp_path))}/bad\.jinja', line \d: "
                        r"TemplateSyntaxError: .*'endfor'.*", line), line


def test_the_identity_records_the_template_and_reads_it_back(tmp_path: Path) -> None:
    none, file = ChatTemplate("none"), ChatTemplate("base.jinja", "{{ messages[1].content }}")
    assert "chat_template" not in PromptOptions().identity(), "a default cell's identity is what it always was"
    assert PromptOptions(chat_template=none).identity()["chat_template"] == "none"
    recorded = PromptOptions(chat_template=file).identity()["chat_template"]
    assert recorded["file"] == "base.jinja" and recorded["text"] == file.text and len(recorded["sha256"]) == 64
    for options in (PromptOptions(chat_template=none), PromptOptions(prompt_profile="published", chat_template=file)):
        assert PromptOptions.from_identity(options.identity()) == options
    with pytest.raises(ValueError, match="does not hash to its recorded sha256"):
        ChatTemplate.from_identity(recorded | {"text": recorded["text"] + " "})


def test_another_template_or_an_edited_file_is_another_identity_and_another_job(smollm2_dir, tmp_path: Path) -> None:
    """The cell's identity (what a checkpoint resumes under) and the score job's file (what Snakemake reruns on) both
    change with the template, and with a template file's content; neither with the file's content unchanged."""
    template = tmp_path / "base.jinja"
    (tmp_path / "t.jsonl").write_text('{"id": "a", "state": "s", "question": "q?", "kind": "noul", "gold": 0}\n')

    def job(value: str) -> ScoreJob:
        config = tmp_path / "c.yaml"
        config.write_text(yaml.safe_dump({"models": {"m": {"source": "local", "path": str(smollm2_dir), "chat_template": value}},
                                          "tasks": {"t": {"source": "file", "path": str(tmp_path / "t.jsonl")}},
                                          "published": None}))
        return Settings.load(config).score_job("m", "t", models_dir="unused", server_log="s.log", state_dir="s")

    template.write_text("{{ messages[1].content }}")
    jobs = {"auto": job("auto"), "none": job("none"), "file": job(str(template)), "same file": job(str(template))}
    template.write_text("{{ messages[1].content }}\nAnswer:")
    jobs["edited file"] = job(str(template))
    identities = {name: scoring_identity(j.scoring) for name, j in jobs.items()}
    files = {name: j.to_file(str(tmp_path / "jobs")) for name, j in jobs.items()}
    assert identities["file"] == identities["same file"] and files["file"] == files["same file"]
    del identities["same file"], files["same file"]
    assert len({repr(i) for i in identities.values()}) == len(set(files.values())) == 4


def test_a_checkpoint_made_under_another_template_is_not_resumed(smollm2_tokenizer, tmp_path: Path) -> None:
    out = tmp_path / "cell.jsonl"
    items = make_items()

    def run(template: ChatTemplate, backend: FakeBackend) -> dict:
        options = ScoringOptions(prompt=PromptOptions(chat_template=template))
        prepared = prepare_items(smollm2_tokenizer, items, groups_of(items), options.prompt)
        return score_cell(backend, smollm2_tokenizer, prepared, str(out), {"task": "mixed", **scoring_identity(options)},
                          options=options, chunk_items=2)

    with pytest.raises(Interrupted):
        run(ChatTemplate(), FakeBackend(fail_after_calls=3))
    assert partial_path(out).is_file()
    counts = run(ChatTemplate("none"), FakeBackend())
    assert counts["resumed"] == 0 and counts["scored"] == len(items)
    assert list(tmp_path.glob("cell.jsonl.partial.stale-*")), "the other template's checkpoint is kept aside"
    assert read_scores(out).identity["chat_template"] == "none"


def test_the_documented_file_template_is_the_plain_prompt_after_the_bos_token(smollm2_tokenizer) -> None:
    """docs/configuration.md's example file, under both profiles and for both kinds of layout it renders."""
    doc = (REPO / "docs" / "configuration.md").read_text()
    [text] = re.findall(r"```jinja\n(.*?)```", doc, re.S)
    for profile in ("anyjev", "published"):
        for question in (QUESTION, noul("Is it ripe?")):
            plain = render(smollm2_tokenizer, PromptOptions(prompt_profile=profile, chat_template=ChatTemplate("none")),
                           question)
            assert plain.endswith("\nAnswer:") and "<|im_start|>" not in plain
            assert render(smollm2_tokenizer, PromptOptions(prompt_profile=profile, chat_template=ChatTemplate("doc", text)),
                          question) == smollm2_tokenizer.bos_token + plain
