# The run's item-level viewer (docs/viewer.md): VIEWER/index.html opens from disk, offline. A run whose cells all
# finished builds it here; a run with failed cells builds it at its end from the cells that finished and shows the
# failed ones, with the first line of their error and their log (onerror: anyjev/results/layout.py says which).


rule viewer:
    input:
        cells=CELL_LAYOUT.paths(CELLS),
        tasks=sorted({TASK_FILE.format(task=t) for t in TASKS}),
        models=sorted({f for m in MODELS for f in model_marker(m)}),
    output:
        index=report(f"{VIEWER}/index.html", caption="../report/viewer.rst", category="Viewer"),
        cells=directory(f"{VIEWER}/cells"),
    log:
        f"{LOGS}/viewer.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        job=lambda wc: viewer_job().to_json(),
        out=lambda wc, output: os.path.dirname(output.index),
    shell:
        "python -m anyjev viewer --job {params.job:q} --out {params.out:q} > {log:q} 2>&1"
