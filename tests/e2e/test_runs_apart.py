"""A finished run's files are never replaced by a run of another config in the same folder (issue 46, 1).

One finished run of a `url` model served by an in-process stub of vLLM's completions endpoint (no vLLM starts; what
is checked is which jobs run and which files they touch), then, in the same folder: a second config that shares the
model and adds a task that fails (an item longer than the server's context), and a third that declares `mmlu` again
as a file task. Every file of the finished run is hashed before and after: every byte is as it was, the third config
is refused before any job in one line, and the next run of the first config has nothing to do. The first config,
edited, still replaces its own cell as Snakemake does.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import yaml

from tests.conftest import QWEN3_TOKENIZER_DIR
from tests.e2e.workflow_helpers import SNAKEFILE, SNAKEMAKE, env
from tests.stub_http import StubCompletions
from tests.waiting import HANG_GUARD

MODEL = "stub"
RUN_FOLDERS = ("results", "resources/tasks", "logs", "benchmarks")


def snakemake(work: Path, config: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SNAKEMAKE), "-s", str(SNAKEFILE), "-d", str(work), "--configfile", str(work / config),
                           "--cores", "2", *args], capture_output=True, text=True, timeout=HANG_GUARD, env=env())


def hashes(work: Path) -> dict[str, str]:
    """Every file of the run in WORK: its path and the SHA-256 of its bytes."""
    return {str(p.relative_to(work)): hashlib.sha256(p.read_bytes()).hexdigest()
            for folder in RUN_FOLDERS for p in sorted((work / folder).rglob("*")) if p.is_file()}


def changed(before: dict[str, str], work: Path) -> list[str]:
    """The files of BEFORE that are gone or hold other bytes now."""
    now = hashes(work)
    return sorted(p for p, h in before.items() if now.get(p) != h)


def write_task(work: Path, name: str, items: list[dict]) -> str:
    path = work / "tasks" / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(it) + "\n" for it in items))
    return f"tasks/{name}.jsonl"


def capitals(n: int = 8) -> list[dict]:
    return [{"id": f"c{i}", "state": f"Country number {i}.", "question": "Which city is the capital?", "kind": "choice",
             "options": ["Paris", "Rome", "Madrid"], "gold": i % 3} for i in range(n)]


def test_a_run_of_another_config_leaves_a_finished_run_as_it_was(tmp_path, qwen3_tokenizer) -> None:
    work = tmp_path / "w"
    long_state = " ".join(["The committee met again and discussed the budget at length."] * 200)  # > 1024 tokens
    with StubCompletions() as stub:
        stub.served_names, stub.max_model_len = [MODEL], 1024
        model = {"source": "url", "url": stub.url, "tokenizer": str(QWEN3_TOKENIZER_DIR)}
        first = {"models": {MODEL: model}, "levels": ["raw", "L0"], "published": None,
                 "tasks": {"mmlu": {"source": "builtin", "n_test": 4, "n_calib": 2},
                           "capitals": {"source": "file", "path": write_task(work, "capitals", capitals()), "n_test": 4,
                                        "n_calib": 2}}}
        configs = {
            "config/config.yaml": first,
            # the same model and tasks, and a task whose one item is longer than the server's context: it fails
            "config/longer.yaml": first | {"tasks": first["tasks"] | {"long": {
                "source": "file", "n_test": 1, "n_calib": 0, "allow_fewer": True, "path": write_task(work, "long", [
                    {"id": "l0", "state": long_state, "question": "Was it?", "kind": "noul", "gold": 0}])}}},
            # `mmlu` declared again, as another task: a file task
            "config/renamed.yaml": first | {"tasks": first["tasks"] | {"mmlu": {
                "source": "file", "path": write_task(work, "mmlu", capitals(6)), "n_test": 4, "n_calib": 2}}},
        }
        for name, config in configs.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_text(yaml.safe_dump(config, sort_keys=False))

        run = snakemake(work, "config/config.yaml")
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        finished = hashes(work)
        assert f"results/cells/{MODEL}/mmlu/scores.jsonl" in finished and "results/tables/summary.csv" in finished
        sent = len(stub.requests)

        # Another config that shares the model and adds a task that fails: its job scores the new cell only, fails it,
        # and removes nothing; its end does not write its tables over the finished run's.
        longer = snakemake(work, "config/longer.yaml")
        out = longer.stdout + longer.stderr
        assert longer.returncode != 0 and "Error in rule score_cell" in out, out[-3000:]
        assert changed(finished, work) == [], "the failed run of another config changed the finished run's files"
        assert "> 1024" in (work / f"logs/score/{MODEL}/long.log").read_text()
        assert len(stub.requests) == sent, "the finished cells were not sent again"
        assert "results/tables/summary.csv was made by a run of config/config.yaml, another config" in out, out[-3000:]

        # Another config that declares `mmlu` as another task: refused before any job, in one line.
        renamed = snakemake(work, "config/renamed.yaml")
        out = renamed.stdout + renamed.stderr
        refused = [line for line in out.splitlines() if line.startswith("anyjev: refused before any job:")]
        assert renamed.returncode != 0 and refused, out[-3000:]
        assert "rule prepare_task" not in out and "rule score" not in out, "a job ran"
        [task_line] = [line for line in refused if ": tasks.mmlu is not what" in line]
        assert task_line.startswith("anyjev: refused before any job: config/renamed.yaml: tasks.mmlu is not what "
                                    "config/config.yaml made its files from (PrepareJob "), task_line
        assert "source: 'builtin' -> 'file'" in task_line, task_line
        assert "resources/tasks/mmlu.jsonl" in task_line and "--directory" in task_line and "remove those files" in task_line
        assert changed(finished, work) == []

        # The first config again: nothing to do, nothing changed.
        again = snakemake(work, "config/config.yaml")
        assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, again.stderr[-3000:]
        assert changed(finished, work) == [] and len(stub.requests) == sent

        # The first config, edited (capitals' items): its own cell is scored and published again, as Snakemake does;
        # the other cell is left as it was.
        first["tasks"]["capitals"]["n_test"] = 5
        (work / "config/config.yaml").write_text(yaml.safe_dump(first, sort_keys=False))
        edited = snakemake(work, "config/config.yaml", f"results/cells/{MODEL}/capitals/scores.jsonl")
        assert edited.returncode == 0, edited.stdout[-3000:] + edited.stderr[-3000:]
        assert len(stub.requests) > sent
        moved = changed(finished, work)
        assert f"results/cells/{MODEL}/capitals/scores.jsonl" in moved
        assert not [p for p in moved if p.startswith(f"results/cells/{MODEL}/mmlu/")], moved
