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
        revision=hub_revision_args,
    shell:
        "python -m anyjev fetch-task {wildcards.dataset:q} --cache resources/hub {params.revision:q} > {log:q} 2>&1"


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
