"""A tokenizer loads without torch once AutoTokenizer has chosen its class (anyjev/decision/tokenizer.py): the class is
remembered per folder content, a later load is the same tokenizer, and a remembered choice that no longer holds falls
back to AutoTokenizer."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from anyjev.decision import tokenizer as tokenizer_module
from anyjev.decision.options import PromptOptions
from anyjev.decision.questions import choice
from anyjev.decision.tokenizer import load_tokenizer
from tests.conftest import QWEN3_TOKENIZER_DIR, REPO

PROBE = """
import json, sys
from anyjev.decision.tokenizer import load_tokenizer
out = {}
for folder in sys.argv[1:]:
    tok = load_tokenizer(folder)
    chat = tok.apply_chat_template([{"role": "user", "content": "Which planet is the largest? A. Mars B. Jupiter"}],
                                   tokenize=False, add_generation_prompt=True)
    out[folder] = {"class": type(tok).__name__, "chat": chat, "ids": tok.encode(chat), "vocab": len(tok)}
print(json.dumps({"tokenizers": out, "torch": "torch" in sys.modules}))
"""


def _load_in_a_process(folders: list[str], cache: Path) -> dict:
    env = {"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(cache), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", PROBE, *folders], capture_output=True, text=True, env=env, cwd=REPO,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_second_load_skips_torch_and_is_the_same_tokenizer(smollm2_dir, tmp_path) -> None:
    folders = [str(smollm2_dir)] + ([str(QWEN3_TOKENIZER_DIR)] if (QWEN3_TOKENIZER_DIR / "tokenizer.json").is_file() else [])
    first = _load_in_a_process(folders, tmp_path / "cache")
    assert first["torch"]  # AutoTokenizer chose, and imported torch doing so
    remembered = sorted(json.loads(p.read_text())["class"] for p in (tmp_path / "cache" / "anyjev" / "tokenizers").iterdir())
    assert remembered == sorted(t["class"] for t in first["tokenizers"].values())
    second = _load_in_a_process(folders, tmp_path / "cache")
    assert second == first | {"torch": False}


def _copy(folder: Path, to: Path) -> Path:
    """FOLDER's tokenizer and configuration files (not its weights) copied to TO."""
    to.mkdir()
    for name in (*tokenizer_module.RENDERING_FILES, *tokenizer_module.CHOICE_FILES):
        if (folder / name).is_file():
            shutil.copyfile(folder / name, to / name)
    return to


def test_a_remembered_class_that_does_not_hold_falls_back_to_autotokenizer(smollm2_dir, tmp_path, monkeypatch) -> None:
    from transformers import AutoTokenizer

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = _copy(smollm2_dir, tmp_path / "smollm2")
    expected = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    question = choice("Which planet is the largest?", ["Mars", "Jupiter", "Venus", "Earth"])
    text = PromptOptions().render(expected, question, "A science quiz.", PromptOptions().layouts(question)["fwd"][0],
                                  ["A", "B", "C", "D"])
    choice_file = tokenizer_module._choice_file(folder)
    for remembered in ("NoSuchTokenizer", "AutoConfig", "PreTrainedModel", None):
        choice_file.parent.mkdir(parents=True, exist_ok=True)
        choice_file.write_text("{" if remembered is None else json.dumps({"class": remembered}))
        tok = load_tokenizer(folder)
        assert type(tok) is type(expected) and tok.encode(text) == expected.encode(text), remembered
        assert json.loads(choice_file.read_text())["class"] == type(expected).__name__  # chosen again, and kept


def test_the_choice_is_kept_per_folder_content(smollm2_dir, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = _copy(smollm2_dir, tmp_path / "smollm2")
    before = tokenizer_module._choice_file(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps(config | {"chat_template": "{{ messages[0].content }}"}))
    after_template = tokenizer_module._choice_file(folder)
    (folder / "config.json").write_text(json.dumps(json.loads((folder / "config.json").read_text()) | {"model_type": "qwen2"}))
    after_config = tokenizer_module._choice_file(folder)
    moved = _copy(folder, tmp_path / "elsewhere")
    assert len({before, after_template, after_config, tokenizer_module._choice_file(moved)}) == 4


@pytest.mark.parametrize("broken", ["tokenizer.json", "tokenizer_config.json"])
def test_a_broken_folder_is_still_named_after_its_class_was_remembered(smollm2_dir, tmp_path, monkeypatch, broken) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = _copy(smollm2_dir, tmp_path / "smollm2")
    load_tokenizer(folder)
    (folder / broken).write_text("{ not json")
    with pytest.raises(Exception, match=r"tokenizer folder .*smollm2.*no tokenizer could be loaded"):
        load_tokenizer(folder)
