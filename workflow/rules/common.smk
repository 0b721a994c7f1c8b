# Helpers shared by every rule file: validated config, cell list, paths and command lines.
import hashlib
import json
import os
import re
import sys

from anyjev.config import cells, load_strict, validate_config
from anyjev.errors import ConfigError


def _load_validated_config():
    # Re-read the config files strictly (duplicate keys are an error PyYAML would hide), then validate.
    for path in workflow.configfiles:
        try:
            load_strict(path)
        except ConfigError as exc:
            raise WorkflowError(f"invalid config {path}: {exc}")
    try:
        return validate_config(config, workflow.source_path("../schemas/config.schema.yaml"))
    except ConfigError as exc:
        files = ", ".join(map(str, workflow.configfiles))
        raise WorkflowError(f"invalid config ({files}): {exc}")


CONFIG = _load_validated_config()
CELLS = cells(CONFIG)
MODELS = sorted({m for m, _ in CELLS})
TASKS = sorted({t for _, t in CELLS})
STATE_DIR = ".anyjev/servers"
# The run's owner: a managed vLLM server lives as long as this Snakemake process (see docs/servers.md).
# Each Snakemake process that parses this file (the main one, or a cluster job's) owns its servers.
OWNER_PID = os.getpid()
os.environ["ANYJEV_OWNER_PID"] = str(OWNER_PID)
# Recorded in every cell's provenance without being a rule parameter (a param would rerun every cell
# whenever any unrelated part of the config changes).
os.environ["ANYJEV_CONFIG_SHA256"] = hashlib.sha256(json.dumps(CONFIG, sort_keys=True).encode()).hexdigest()
PY = sys.executable


wildcard_constraints:
    model="|".join(map(re.escape, CONFIG["models"])) or "__none__",
    task="|".join(map(re.escape, CONFIG["tasks"])) or "__none__",


def model_conf(model):
    return CONFIG["models"][model]


def model_dir(model):
    m = model_conf(model)
    if m["source"] == "local":
        return m["path"]
    if m["source"] == "url":
        return m["tokenizer"]
    return f"resources/models/{model}"


def model_inputs(wildcards):
    """A prepared model folder's marker file, when the workflow prepares it."""
    if model_conf(wildcards.model)["source"] in ("smollm2", "hub"):
        return [f"resources/models/{wildcards.model}/anyjev-model.json"]
    return []


def server_args(wildcards, input):
    """How the scoring job reaches its model: a managed server from a spec, or the user's URL."""
    m = model_conf(wildcards.model)
    if m["source"] == "url":
        served = m.get("served_name", wildcards.model)
        return f"--server-url {m['url']} --served-name {served} --tokenizer {m['tokenizer']}"
    return (
        f"--server-spec {input.spec} --state-dir {STATE_DIR} "
        f"--server-log logs/servers/{wildcards.model}.log --tokenizer {model_dir(wildcards.model)}"
    )


def client_args():
    c = CONFIG["client"]
    return (
        f"--prompts-per-request {c['prompts_per_request']} --max-concurrency {c['max_concurrency']} "
        f"--timeout {c['timeout']} --retries {c['retries']} --chunk-items {c['chunk_items']}"
    )


def evaluation_args():
    e = CONFIG["evaluation"]
    batch = f" --batch-size {e['prior_batch_size']}" if e["prior_batch_size"] else ""
    return (
        f"--strength {e['prior_strength']} --min-items {e['prior_min_items']} --n-boot {e['n_boot']} "
        f"--seed {e['bootstrap_seed']}{batch}"
    )


def cell_files(name):
    return [f"results/cells/{m}/{t}/{name}" for m, t in CELLS]


def final_targets():
    targets = [
        "results/tables/summary.csv",
        "results/tables/summary.md",
        "results/plots/metrics_by_level.png",
        "results/plots/flip_raw_vs_L0.png",
        *[f"results/plots/reliability/{m}/{t}.png" for m, t in CELLS],
    ]
    if CONFIG.get("published"):
        targets += ["results/tables/vs_published.csv", "results/tables/vs_published.md", "results/plots/vs_published.png"]
    return targets


def stop_run_servers(why):
    from anyjev.serving.stop import stop_servers

    stopped = stop_servers(STATE_DIR, owner_pid=OWNER_PID)
    if stopped:
        print(f"anyjev: stopped {len(stopped)} vLLM server(s) at the end of the run ({why}): {', '.join(stopped)}")
