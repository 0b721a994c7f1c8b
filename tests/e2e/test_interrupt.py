"""SIGINT to Snakemake's process alone (`kill -INT <pid>`, a supervisor's signal; issue 46, 5): the jobs Snakemake
stops stop too, and the run's last words say what was stopped.

Snakemake's local executor waits for its running jobs on SIGINT; a terminal's Ctrl-C reaches them because they are
in its process group, a SIGINT to Snakemake alone did not, and the model's scoring job ran on to its end. The model is
a `url` model read from an in-process stub of vLLM's completions endpoint that answers slowly (no vLLM starts): the
signal lands while the job scores, after a chunk is checkpointed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import yaml

from anyjev.serving.proc import descendants, pid_alive, proc_cmdline
from tests.conftest import QWEN3_TOKENIZER_DIR
from tests.e2e.workflow_helpers import env, snakemake_cmd
from tests.stub_http import Reply, StubCompletions
from tests.waiting import HANG_GUARD, wait_for

MODEL = "stub"


def test_sigint_to_snakemake_alone_stops_the_scoring_job_and_says_so(tmp_path, qwen3_tokenizer) -> None:
    work = tmp_path / "w"
    (work / "tasks").mkdir(parents=True)
    items = [{"id": f"c{i}", "state": f"Country number {i}.", "question": "Which city is the capital?", "kind": "choice",
              "options": ["Paris", "Rome", "Madrid"], "gold": i % 3} for i in range(24)]
    (work / "tasks/capitals.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))
    with StubCompletions() as stub:
        stub.served_names, stub.default = [MODEL], Reply(delay=0.5)
        config = {"models": {MODEL: {"source": "url", "url": stub.url, "tokenizer": str(QWEN3_TOKENIZER_DIR)}},
                  "tasks": {"capitals": {"source": "file", "path": "tasks/capitals.jsonl", "n_test": 20, "n_calib": 4}},
                  "levels": ["raw", "L0"], "published": None, "client": {"chunk_items": 1}}
        (work / "config").mkdir()
        (work / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        staged = work / f"results/cells/{MODEL}/capitals/staged"
        log = tmp_path / "snakemake.out"
        with open(log, "w") as out:
            # in the test's own process group, as a supervisor starts it: the signal below reaches Snakemake alone
            run = subprocess.Popen(snakemake_cmd(work), stdout=out, stderr=subprocess.STDOUT, env=env())

        def exited() -> str | None:
            return None if run.poll() is None else f"snakemake exited ({run.returncode}): {log.read_text()[-3000:]}"

        partial = staged / "scores.jsonl.partial"
        wait_for(lambda: partial.is_file() and len(partial.read_text().splitlines()) >= 3, "two items checkpointed",
                 unless=exited)
        jobs = [p for p in descendants(run.pid) if "score-model" in proc_cmdline(p)]
        assert jobs, "the model's scoring job runs"
        os.kill(run.pid, signal.SIGINT)
        run.wait(HANG_GUARD)
    text = log.read_text()
    assert run.returncode != 0, text[-3000:]
    assert not [p for p in jobs if pid_alive(p)], "a job process outlived the run"
    assert not (staged / "scores.jsonl").exists(), "the scoring job ran on to its end after Snakemake was interrupted"
    assert len(partial.read_text().splitlines()) - 1 < len(items), "every item was scored"
    last = [line for line in text.splitlines() if line.startswith("anyjev: ")][-1]
    assert last == (f"anyjev: interrupted (SIGINT): stopped the scoring job of model {MODEL!r} (cells capitals); run the "
                    "same command again: what they checkpointed resumes"), text[-3000:]
    [model_log] = list((work / f"logs/score_model/{MODEL}").glob("*.log"))
    assert model_log.read_text().strip().endswith("anyjev score-model: interrupted"), model_log.read_text()[-2000:]
    assert Path(partial).is_file(), "the checkpoint stays for the next run"
