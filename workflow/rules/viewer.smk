# The run's item-level viewer (docs/viewer.md): its index.html opens from disk, offline. A run whose cells all
# finished builds it here; a run with failed cells builds it at its end from the cells that finished and shows the
# failed ones, with the first line of their error and their log (onerror: anyjev/rundata/layout.py says which).


rule viewer:
    input:
        scores=for_cells(rules.score_cell.output.scores),
        provenance=for_cells(rules.score_cell.output.provenance),
        metrics=for_cells(rules.evaluate_cell.output.metrics),
        predictions=for_cells(rules.evaluate_cell.output.predictions),
        tasks=expand(rules.prepare_task.output.task_file, task=TASKS),
        models=[f for m in MODELS for f in model_marker(m)],
    output:
        # the viewer's files in its folder (anyjev/reports/viewer): the page, and the cells' data
        index=report(f"{PATHS.viewer}/{VIEWER_INDEX}", caption="../report/viewer.rst", category="Viewer"),
        cells=directory(f"{PATHS.viewer}/{VIEWER_CELLS}"),
    log:
        PATHS.viewer_log,
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        job=lambda wc: job_file(viewer_job()),
        folder=lambda wc, output: os.path.dirname(output.index),
    shell:
        "exec python -m anyjev viewer --job {params.job:q} --out {params.folder:q} > {log:q} 2>&1"
