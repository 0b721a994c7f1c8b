# Task data: built-in offline tasks, published hub tasks (fetched once, at the configured revision), or the
# user's JSONL files, each split (seeded) into test and calibration items and written as a JSONL task file.


rule fetch_hub_task:
    output:
        "resources/hub/{dataset}/meta.json",
    log:
        "logs/fetch_hub_task/{dataset}.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        # The configured revision and the run's lock (resources/lock.yaml, or the config's `lock:`, which pins).
        settings=lambda wc: as_json(SETTINGS.fetch_job(wc.dataset)),
    shell:
        "python -m anyjev fetch-task --settings {params.settings:q} > {log:q} 2>&1"


rule prepare_task:
    input:
        task_inputs,
    output:
        "resources/tasks/{task}.jsonl",
    log:
        "logs/prepare_task/{task}.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        settings=lambda wc: as_json(SETTINGS.prepare_job(wc.task)),
    shell:
        "python -m anyjev prepare-task --settings {params.settings:q} --out {output:q} > {log:q} 2>&1"
