# Task data: built-in offline tasks, hub tasks (published or declared in the config: fetched once, at the declared
# revision; a declared local folder again whenever its content changes), or the user's JSONL files, each split
# (seeded) into test and calibration items and written as a JSONL task file.


rule fetch_hub_task:
    input:
        local_dataset_files,
    output:
        # the fetched dataset's record (anyjev/data/hub.py), beside its splits
        meta=f"{PATHS.hub_cache}/{{dataset}}/{HUB_META}",
    log:
        PATHS.fetch_log,
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        # The declared dataset, splits and revision, and the run's lock (the lock record, or the config's `lock:`, which pins).
        job=lambda wc: job_file(SETTINGS.fetch_job(wc.dataset, lock_record=PATHS.lock_record)),
        out=lambda wc, output: os.path.dirname(output.meta),
        # a local folder's content hash: what its files hold decides a rerun, not their times
        content=local_dataset_content,
    shell:
        "exec python -m anyjev fetch-task --job {params.job:q} --out {params.out:q} > {log:q} 2>&1"


rule prepare_task:
    input:
        lambda wc: task_sources(wc.task),
    output:
        task_file=PATHS.task_file,
    log:
        PATHS.prepare_task_log,
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        job=lambda wc: job_file(SETTINGS.prepare_job(wc.task, hub_cache=PATHS.hub_cache)),
    shell:
        "exec python -m anyjev prepare-task --job {params.job:q} --out {output.task_file:q} > {log:q} 2>&1"
