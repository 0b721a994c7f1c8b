# Task data: built-in offline tasks, published hub tasks (fetched once), or the user's JSONL files,
# each split (seeded) into test and calibration items and written as a JSONL task file.


def task_conf(task):
    return CONFIG["tasks"][task]


def task_inputs(wildcards):
    t = task_conf(wildcards.task)
    if t["source"] == "file":
        return [t["path"]]
    if t["source"] == "hub":
        return [f"resources/hub/{t.get('builtin', wildcards.task)}/meta.json"]
    return []


def task_args(wildcards):
    t = task_conf(wildcards.task)
    name = t.get("builtin", wildcards.task)
    args = f"{name} --n-test {t['n_test']} --n-calib {t['n_calib']} --seed {CONFIG['split_seed']}"
    if t["source"] == "file":
        args = f"{wildcards.task} --file {t['path']} --n-test {t['n_test']} --n-calib {t['n_calib']} --seed {CONFIG['split_seed']}"
    if t["allow_fewer"]:
        args += " --allow-fewer"
    return args


rule fetch_hub_task:
    output:
        "resources/hub/{dataset}/meta.json",
    params:
        revision=lambda wc: next(
            (f"--revision {t['revision']}" for t in CONFIG["tasks"].values() if t.get("builtin") == wc.dataset and "revision" in t),
            "",
        ),
    log:
        "logs/fetch_hub_task/{dataset}.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    shell:
        "{PY} -m anyjev fetch-task {wildcards.dataset} --cache resources/hub {params.revision} > {log} 2>&1"


rule prepare_task:
    input:
        task_inputs,
    output:
        "resources/tasks/{task}.jsonl",
    params:
        args=task_args,
    log:
        "logs/prepare_task/{task}.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    shell:
        "{PY} -m anyjev prepare-task {params.args} --hub-cache resources/hub --out {output} > {log} 2>&1"
