"""The vLLM command line: pinned flags appear once with the spec's values, and no config can override them."""

from __future__ import annotations

import pytest

from anyjev.errors import ConfigError
from anyjev.serving.argv import API_MODULE, KEY_GUARD, PINNED_FLAGS, REFUSED_FLAGS, build_argv
from anyjev.serving.build import resolve_server
from anyjev.serving.spec import ServerSpec


def make_spec(**kw: object) -> ServerSpec:
    base: dict[str, object] = {
        "name": "smol", "model": "/models/smol", "served_name": "smol-served", "python": "/venv/bin/python",
        "dtype": "bfloat16",  # not auto, which asks the server environment's python (tests/unit/test_setup_gpu.py)
        "block_size": 128,  # likewise: the pinned block size is the server environment's vLLM's
    }  # fmt: skip
    base.update(kw)
    return resolve_server(ServerSpec(**base))  # type: ignore[arg-type]  # asks nothing: prefix_caching from the dtype


def flag_values(argv: list[str]) -> dict[str, list[str | None]]:
    """flag -> values it was given (None for a switch), in order."""
    out: dict[str, list[str | None]] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is not None and not nxt.startswith("--"):
                out.setdefault(tok, []).append(nxt)
                i += 2
                continue
            out.setdefault(tok, []).append(None)
        i += 1
    return out


def test_argv_shape_and_pinned_defaults() -> None:
    argv = build_argv(make_spec(), 8123)
    assert argv[:3] == ["/venv/bin/python", "-m", API_MODULE]
    flags = flag_values(argv[3:])
    expected = {
        "--model": "/models/smol",
        "--served-model-name": "smol-served",
        "--host": "127.0.0.1",
        "--port": "8123",
        "--logprobs-mode": "processed_logprobs",
        "--generation-config": "vllm",
        "--seed": "0",
        "--max-logprobs": "26",
        "--dtype": "bfloat16",
        "--tensor-parallel-size": "1",
        "--data-parallel-size": "1",
        "--middleware": KEY_GUARD,  # the run's key guard (tests/unit/test_key_guard.py)
    }
    for flag, value in expected.items():
        assert flags.get(flag) == [value], (flag, flags.get(flag))
    assert flags["--no-enable-prefix-caching"] == [None]
    assert "--enable-prefix-caching" not in flags
    assert "--max-model-len" not in flags  # vLLM's own default when the config sets none


def test_argv_follows_spec_values() -> None:
    spec = make_spec(dtype="bfloat16", max_model_len=2048, max_logprobs=40, tensor_parallel_size=2, data_parallel_size=3,
                     seed=7, prefix_caching=True, host="127.0.0.1")
    flags = flag_values(build_argv(spec, 9000)[3:])
    assert flags["--dtype"] == ["bfloat16"]
    assert flags["--max-model-len"] == ["2048"]
    assert flags["--max-logprobs"] == ["40"]
    assert flags["--tensor-parallel-size"] == ["2"]
    assert flags["--data-parallel-size"] == ["3"]
    assert flags["--seed"] == ["7"]
    assert flags["--enable-prefix-caching"] == [None]
    assert "--no-enable-prefix-caching" not in flags


def test_every_pinned_flag_is_in_argv_exactly_once() -> None:
    """... but --api-key, pinned by its absence: the key goes through the server's environment, never its command
    line (docs/servers.md, "Who can use a server")."""
    for prefix_caching in (False, True):
        argv = build_argv(make_spec(max_model_len=1024, prefix_caching=prefix_caching), 8000)
        for flag in PINNED_FLAGS:
            spellings = [flag, "--no-" + flag[2:]] if flag == "--enable-prefix-caching" else [flag]
            count = sum(tok in spellings for tok in argv)
            assert count == (0 if flag == "--api-key" else 1), (flag, argv)


def test_harmless_extra_flags_pass_through_after_pinned_ones() -> None:
    extra = ("--enforce-eager", "--max-num-seqs", "8", "--kv-cache-dtype=auto", "--disable-log-stats",
             "--return-tokens-as-token-ids", "-pp", "1", "--prefix-caching-hash-algo", "sha256")
    argv = build_argv(make_spec(server_flags=extra), 8000)
    assert tuple(argv[-len(extra):]) == extra


def override_attempts() -> list[tuple[str, ...]]:
    attempts: list[tuple[str, ...]] = []
    for flag in PINNED_FLAGS:
        bare = flag[2:]
        attempts += [
            (flag, "x"),
            (f"{flag}=x",),
            ("--" + bare.replace("-", "_"), "x"),
            ("--" + bare.replace("-", "_") + "=x",),
            ("--no-" + bare,),
            ("--no_" + bare.replace("-", "_"),),
        ]
    return attempts


@pytest.mark.parametrize("extra", override_attempts(), ids=lambda t: " ".join(t))
def test_override_of_pinned_flag_is_refused(extra: tuple[str, ...]) -> None:
    spec = make_spec(name="llama", server_flags=("--enforce-eager", *extra))
    with pytest.raises(ConfigError) as info:
        build_argv(spec, 8000)
    msg = str(info.value)
    assert info.value.key_path == "models.llama.server_flags"
    assert "models.llama.server_flags" in msg
    assert "pinned" in msg
    assert extra[0] in msg  # names the offending flag as written


@pytest.mark.parametrize(
    ("extra", "pinned"),
    [
        (("--max-logp", "5"), "--max-logprobs"),  # vLLM's argparse accepts unambiguous abbreviations
        (("--served", "other"), "--served-model-name"),
        (("--logprobs-m=raw_logprobs",), "--logprobs-mode"),
        (("--no-enable-prefix",), "--enable-prefix-caching"),
        (("-tp", "2"), "--tensor-parallel-size"),
        (("-tp=2",), "--tensor-parallel-size"),
        (("-dp", "2"), "--data-parallel-size"),
        (("-dp4",), "--data-parallel-size"),
        (("--data-parallel", "2"), "--data-parallel-size"),
    ],
)
def test_abbreviations_and_aliases_of_pinned_flags_are_refused(extra: tuple[str, ...], pinned: str) -> None:
    with pytest.raises(ConfigError, match="models.m.server_flags") as info:
        build_argv(make_spec(name="m", server_flags=extra), 8000)
    assert pinned in str(info.value)


@pytest.mark.parametrize("flag", sorted(REFUSED_FLAGS))
def test_flags_that_would_bypass_the_pins_are_refused(flag: str) -> None:
    with pytest.raises(ConfigError, match="models.m.server_flags") as info:
        build_argv(make_spec(name="m", server_flags=(flag, "x.yaml")), 8000)
    assert flag in str(info.value)


def test_pinned_value_in_flag_value_position_is_not_a_flag() -> None:
    # A value that merely looks like a model name is not an override.
    argv = build_argv(make_spec(server_flags=("--chat-template", "port.jinja")), 8000)
    assert argv[-2:] == ["--chat-template", "port.jinja"]


def test_max_logprobs_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="server.max_logprobs"):
        build_argv(make_spec(max_logprobs=0), 8000)


def test_spec_hash_ignores_timeouts_but_not_argv_or_env() -> None:
    a = make_spec()
    assert a.spec_hash() == make_spec(start_timeout=5, stop_grace=1).spec_hash()
    assert a.spec_hash() != make_spec(dtype="float32").spec_hash()
    assert a.spec_hash() != make_spec(server_env=(("VLLM_CPU_KVCACHE_SPACE", "2"),)).spec_hash()
    assert a.spec_hash() != make_spec(server_flags=("--enforce-eager",)).spec_hash()


def test_spec_from_the_workflows_json_keeps_argv_and_hash():
    import json

    from anyjev.serving.argv import build_argv
    from anyjev.serving.spec import ServerSpec

    spec = resolve_server(ServerSpec(name="m", model="models/m", served_name="m", python="py", dtype="bfloat16", block_size=128,
                                     server_flags=("--enforce-eager",), server_env=(("VLLM_CPU_KVCACHE_SPACE", "2"),)))
    data = json.loads(json.dumps({k: getattr(spec, k) for k in spec.__dataclass_fields__}))  # tuples become lists
    again = ServerSpec.from_dict(data)
    assert again == spec and again.spec_hash() == spec.spec_hash()
    assert build_argv(again, 8000) == build_argv(spec, 8000)
