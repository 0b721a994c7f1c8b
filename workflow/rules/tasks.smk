# Task data: built-in offline tasks, hub tasks (published or declared in the config: fetched once, at the declared
# revision; a declared local folder again whenever one of its files changes), or the user's JSONL files, each split
# (seeded) into test and calibration items and written as a JSONL task file.


rule fetch_hub_task:
    input:
        # A local dataset folder's files, so that an edit of one reruns the fetch (and what follows); none for a hub id.
        lambda wc: SETTINGS.fetch_inputs(wc.dataset),
    output:
        f"{HUB_CACHE}/{{dataset}}/meta.json",
    log:
        FETCH_LOG,
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        # The declared dataset, splits and revision, and the run's lock (LOCK_RECORD, or the config's `lock:`, which pins).
        job=lambda wc: SETTINGS.fetch_job(wc.dataset, lock_record=LOCK_RECORD).to_json(),
        out=lambda wc, output: os.path.dirname(output[0]),
    shell:
        "python -m anyjev fetch-task --job {params.job:q} --out {params.out:q} > {log:q} 2>&1"


rule prepare_task:
    input:
        task_inputs,
    output:
        TASK_FILE,
    log:
        PREPARE_TASK_LOG,
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        job=lambda wc: SETTINGS.prepare_job(wc.task, hub_cache=HUB_CACHE).to_json(),
    shell:
        "python -m anyjev prepare-task --job {params.job:q} --out {output:q} > {log:q} 2>&1"
