# Scoring, one job per model (score_jobs: model, the default) or one job per cell (score_jobs: cell),
# then each cell evaluated offline. Both start each model's server once per run (docs/servers.md).
# Every rule's command is `exec python -m anyjev <step> ...`: the step is the job's process itself, not a shell's
# child, so that Snakemake waits for it and stops it, and a step ends with its job (anyjev.cli._end_with_job).


if SCORE_JOBS == "cell":

    # One job per cell; the cells of a model share one server start through the run's lease.
    rule score_cell:
        input:
            task=rules.prepare_task.output.task_file,
            model=lambda wc: model_marker(wc.model),
        output:
            scores=PATHS.cell_file(SCORES),
            provenance=PATHS.cell_file(PROVENANCE),
        log:
            PATHS.score_log,
        benchmark:
            PATHS.score_benchmark
        conda:
            "../envs/client.yaml"
        threads: score_threads
        resources:
            # memory and time per model (models.<name>.mem_mb / runtime); unset: the profile's
            **score_resources(),
            gpu=lambda wc: SETTINGS.models[wc.model].gpus,
        params:
            job=lambda wc: job_file(score_job(wc)),
        shell:
            # $PPID: the Snakemake process running this job owns the server (it stops when that process exits).
            "exec python -m anyjev score --job {params.job:q} --task-file {input.task:q} --out {output.scores:q} "
            "--provenance {output.provenance:q} --owner-pid $PPID > {log:q} 2>&1"

else:

    # Per model: the cells an earlier job finished under the same definition, and this run's job for the others.
    MODEL_JOBS = plan_model_jobs()

    # render_prompts: ahead. A model job's prompts rendered to token ids by a job of their own, before the job that
    # holds the server, in the main process as the other CPU steps (on a cluster, never in the GPU's allocation); the
    # scoring job reads them, loading no tokenizer, and the file goes once it has (anyjev/run/rendered.py). Under
    # render_prompts: job no job asks for it.
    rule render_prompts:
        input:
            tasks=lambda wc: expand(rules.prepare_task.output.task_file, task=model_job(wc).cells),
            model=lambda wc: model_marker(wc.model),
        output:
            prompts=temp(PATHS.rendered_prompts),
        log:
            PATHS.render_prompts_log,
        benchmark:
            PATHS.render_prompts_benchmark
        wildcard_constraints:
            job=model_job_digests(),
        localrule: True
        conda:
            "../envs/client.yaml"
        params:
            job=lambda wc: job_file(model_job(wc)),
        shell:
            "exec python -m anyjev render-prompts --job {params.job:q} --out {output.prompts:q} > {log:q} 2>&1"

    # One job (one allocation on a cluster) per model: one server start, every cell of the model that no earlier job
    # finished scored into its staging folder, each cell's outcome recorded in a record named by the job
    # (anyjev/run/allocation.py).
    rule score_model:
        input:
            tasks=lambda wc: expand(rules.prepare_task.output.task_file, task=model_job(wc).cells),
            model=lambda wc: model_marker(wc.model),
            prompts=rendered_prompts,
        output:
            allocation=PATHS.allocation,
        log:
            PATHS.score_model_log,
        benchmark:
            PATHS.score_model_benchmark
        wildcard_constraints:
            job=model_job_digests(),
        conda:
            "../envs/client.yaml"
        threads: score_threads
        resources:
            # memory and time of the model's whole allocation (models.<name>.mem_mb / runtime); unset: the profile's
            **score_resources(),
            gpu=lambda wc: SETTINGS.models[wc.model].gpus,
        params:
            job=lambda wc: job_file(model_job(wc)),
            prompts=rendered_prompts_flag,
        shell:
            # $PPID: the Snakemake process running this job owns the server (it stops when that process exits).
            "exec python -m anyjev score-model --job {params.job:q} {params.prompts} --out {output.allocation:q} "
            "--owner-pid $PPID > {log:q} 2>&1"

    # Per cell, in the main process: publish the staged scores, or fail with the cell's own error; from the record of
    # the job that scored the cell, made from the task file as it is.
    rule score_cell:
        input:
            allocation=cell_allocation,
            task=rules.prepare_task.output.task_file,
        output:
            scores=PATHS.cell_file(SCORES),
            provenance=PATHS.cell_file(PROVENANCE),
        log:
            PATHS.score_log,
        localrule: True
        conda:
            "../envs/client.yaml"
        params:
            job=lambda wc: job_file(publish_job(wc)),
        shell:
            "exec python -m anyjev publish-cell --job {params.job:q} "
            "--allocation {input.allocation:q} --task-file {input.task:q} --out {output.scores:q} "
            "--provenance {output.provenance:q} > {log:q} 2>&1"


# A cell's metrics and its reliability diagram (one level per panel), in one job and one process: the diagram is drawn
# from the evaluation the step holds; a second job per cell would cost the run's DAG, dry run and scheduler a third of
# its per-cell jobs, and a second process its interpreter and imports.
rule evaluate_cell:
    input:
        scores=rules.score_cell.output.scores,
        task=rules.prepare_task.output.task_file,
    output:
        metrics=PATHS.cell_file(METRICS),
        predictions=PATHS.cell_file(PREDICTIONS),
        replicates=PATHS.cell_file(REPLICATES),
        png=report(
            PATHS.reliability.png,
            caption="../report/reliability.rst",
            category="Plots",
            subcategory="Reliability",
            labels={"model": "{model}", "task": "{task}"},
        ),
        pdf=PATHS.reliability.pdf,
    log:
        PATHS.evaluate_log,
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        job=lambda wc: job_file(SETTINGS.evaluate_job(wc.model, wc.task)),
    shell:
        "exec python -m anyjev evaluate --job {params.job:q} --scores {input.scores:q} --task-file {input.task:q} "
        "--out {output.metrics:q} --predictions {output.predictions:q} --replicates {output.replicates:q} "
        "--png {output.png:q} --pdf {output.pdf:q} > {log:q} 2>&1"
