# The run's item-level viewer (docs/viewer.md): results/viewer/index.html opens from disk, offline. It is built
# from the cells that finished; a cell whose scoring or evaluation failed in an earlier run is not waited for but
# shown as failed, with the first line of its error and its log (anyjev/outputs/cells.py says which cells).
from anyjev.outputs.cells import cell_paths, cells_to_wait_for
from anyjev.outputs.viewer import viewer_job


rule viewer:
    input:
        cells=lambda wc: cell_paths(cells_to_wait_for(CELLS)),
        tasks=lambda wc: sorted({f"resources/tasks/{t}.jsonl" for _, t in cells_to_wait_for(CELLS)}),
        models=lambda wc: sorted({f for m, _ in cells_to_wait_for(CELLS) for f in model_marker(m)}),
    output:
        index=report("results/viewer/index.html", caption="../report/viewer.rst", category="Viewer"),
        cells=directory("results/viewer/cells"),
    log:
        "logs/viewer.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        settings=lambda wc: as_json(viewer_job(SETTINGS)),
    shell:
        "python -m anyjev viewer --settings {params.settings:q} --out results/viewer > {log:q} 2>&1"
