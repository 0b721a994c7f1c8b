"""Two cells of one `url` model scored at once on one real server, each reading answer mass (a cell must not be lost to
its neighbour). vLLM 0.32 returns only the sampled token to label requests that share an engine batch with a
`logprob_token_ids` (answer-mass) request; the score jobs of one url server share a request lock
(`.anyjev/servers/url-<hash>.requests.lock`, named by the URL), so the two cells run side by side and neither
collides. (tests/integration/test_vllm_real.py shows the collision on the real server without the lock, recognised
and resent.) The server requires an API key, which the url model names by its environment variable (`api_key_env`):
the run reads it there and writes it nowhere. That the cells run at once is forced, not left to the scheduler: the
test holds their request lock until both cells' scoring processes wait for it."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta

import pytest

from tests.e2e.workflow_helpers import files_holding, make_workdir, run_holding_request_locks, url_request_lock

pytestmark = pytest.mark.vllm
KEY_VARIABLE = "ANYJEV_E2E_URL_KEY"


def write_tasks(work) -> dict:
    (work / "tasks").mkdir(parents=True, exist_ok=True)
    capitals = [{"id": f"c{i}", "state": f"Country number {i} lies in Europe.", "question": "Which city is its capital?",
                 "kind": "choice", "options": ["Paris", "Rome", "Madrid", "Berlin"], "gold": i % 4} for i in range(8)]
    yesno = [{"id": f"y{i}", "state": f"Statement {i}: water is wet.", "question": "Is the statement true?",
              "kind": "noul", "gold": i % 2} for i in range(8)]
    for name, items in (("capitals", capitals), ("yesno", yesno)):
        (work / "tasks" / f"{name}.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))
    return {name: {"source": "file", "path": f"tasks/{name}.jsonl", "n_test": 6, "n_calib": 2} for name in ("capitals", "yesno")}


def window(provenance: dict) -> tuple[datetime, datetime]:
    start = datetime.fromisoformat(provenance["started"])
    return start, start + timedelta(seconds=provenance["seconds"])


def test_two_cells_of_one_url_server_at_once_with_answer_mass(tmp_path, vllm_fp32, smollm2_dir, fault_seen):
    work = tmp_path / "w"
    # the session's server requires its own key (tests/conftest.py): the url model reads it from the variable it names
    model = {"source": "url", "url": vllm_fp32.url, "served_name": vllm_fp32.served_name, "tokenizer": str(smollm2_dir),
             "api_key_env": KEY_VARIABLE}
    config = {"models": {"shared": model}, "tasks": write_tasks(work), "levels": ["raw", "L0"], "score_jobs": "cell",
              "scoring": {"answer_mass": True}, "client": {"chunk_items": 2, "prompts_per_request": 2}, "published": None}
    make_workdir(work, config, smollm2_dir)
    lock = url_request_lock(work, vllm_fp32.url)
    proc, waited, _ = run_holding_request_locks(work, [lock], 2, "results/cells/shared/capitals/metrics.json",
                                                "results/cells/shared/yesno/metrics.json",
                                                extra_env={KEY_VARIABLE: vllm_fp32.api_key})
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert files_holding(work, vllm_fp32.api_key) == [] and vllm_fp32.api_key not in proc.stdout
    assert waited == [["-m", "anyjev", "score"]] * 2, f"two scoring jobs, one per cell, waited on the URL's lock: {waited}"
    digest = hashlib.sha256(vllm_fp32.url.rstrip("/").encode()).hexdigest()[:16]
    assert lock.name == f"url-{digest}.requests.lock", "the cells' shared lock, named by the URL"
    provs = {t: json.loads((work / f"results/cells/shared/{t}/provenance.json").read_text()) for t in ("capitals", "yesno")}
    (a0, a1), (b0, b1) = window(provs["capitals"]), window(provs["yesno"])
    assert a0 < b1 and b0 < a1, "the two cells' scoring windows do not overlap"
    assert {t: p["backend"]["batch_collisions_resent"] for t, p in provs.items()} == {"capitals": 0, "yesno": 0}
    assert {(p["server"]["api_key_env"], p["server"]["api_key_sent"]) for p in provs.values()} == {(KEY_VARIABLE, True)}
    for t in ("capitals", "yesno"):
        metrics = json.loads((work / f"results/cells/shared/{t}/metrics.json").read_text())
        assert 0 < metrics["answer_mass"]["value"] <= 1, metrics.get("answer_mass")
    overlap = (min(a1, b1) - max(a0, b0)).total_seconds()
    fault_seen(f"(no message) capitals and yesno scored {overlap:.0f} s side by side on one url server, each with answer "
               "mass; 0 label requests collided (the URL's request lock)")
