# Scoring, one job per model (score_jobs: model, the default) or one job per cell (score_jobs: cell),
# then each cell evaluated offline. Both start each model's server once per run (docs/servers.md).


if SCORE_JOBS == "cell":

    # One job per cell; the cells of a model share one server start through the run's lease.
    rule score_cell:
        input:
            task=TASK_FILE,
            model=lambda wc: model_marker(wc.model),
        output:
            scores=f"{CELL_DIR}/scores.jsonl",
            provenance=f"{CELL_DIR}/provenance.json",
        log:
            SCORE_LOG,
        benchmark:
            f"{BENCHMARKS}/score/{{model}}/{{task}}.tsv"
        conda:
            "../envs/client.yaml"
        resources:
            # memory and time per model (models.<name>.mem_mb / runtime); unset: the profile's
            **score_resources(),
            gpu=lambda wc: SETTINGS.models[wc.model].gpus,
        params:
            job=score_job,
        shell:
            # $PPID: the Snakemake process running this job owns the server (it stops when that process exits).
            "python -m anyjev score --job {params.job:q} --task-file {input.task:q} --out {output.scores:q} "
            "--provenance {output.provenance:q} --owner-pid $PPID > {log:q} 2>&1"

else:

    # One job (one allocation on a cluster) per model: one server start, every cell of the model scored into
    # its staging folder, each cell's outcome recorded (anyjev/run/allocation.py).
    rule score_model:
        input:
            tasks=lambda wc: [TASK_FILE.format(task=t) for t in SETTINGS.model_tasks(wc.model)],
            model=lambda wc: model_marker(wc.model),
        output:
            ALLOCATION,
        log:
            SCORE_MODEL_LOG,
        benchmark:
            f"{BENCHMARKS}/score_model/{{model}}.tsv"
        conda:
            "../envs/client.yaml"
        resources:
            # memory and time of the model's whole allocation (models.<name>.mem_mb / runtime); unset: the profile's
            **score_resources(),
            gpu=lambda wc: SETTINGS.models[wc.model].gpus,
        params:
            job=score_model_job,
        shell:
            "python -m anyjev score-model --job {params.job:q} --out {output:q} " "--owner-pid $PPID > {log:q} 2>&1"

    # Per cell, in the main process: publish the staged scores, or fail with the cell's own error.
    rule score_cell:
        input:
            ALLOCATION,
        output:
            scores=f"{CELL_DIR}/scores.jsonl",
            provenance=f"{CELL_DIR}/provenance.json",
        log:
            SCORE_LOG,
        localrule: True
        conda:
            "../envs/client.yaml"
        params:
            model_log=lambda wc: SCORE_MODEL_LOG.format(model=wc.model),
        shell:
            "python -m anyjev publish-cell --allocation {input:q} --task {wildcards.task:q} --out {output.scores:q} "
            "--provenance {output.provenance:q} --model-log {params.model_log:q} > {log:q} 2>&1"


rule evaluate_cell:
    input:
        f"{CELL_DIR}/scores.jsonl",
    output:
        metrics=f"{CELL_DIR}/metrics.json",
        predictions=f"{CELL_DIR}/predictions.csv",
    log:
        EVALUATE_LOG,
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        job=SETTINGS.evaluate_job().to_json(),
    shell:
        "python -m anyjev evaluate --job {params.job:q} --scores {input:q} --out {output.metrics:q} "
        "--predictions {output.predictions:q} > {log:q} 2>&1"
