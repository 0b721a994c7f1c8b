# One job per (model, task) cell: score it against the model's server, then evaluate it offline.
# The server is started once per model and run, and leased by each cell (docs/servers.md).


rule score_cell:
    input:
        task="resources/tasks/{task}.jsonl",
        model=lambda wc: model_marker(wc.model),
    output:
        scores="results/cells/{model}/{task}/scores.jsonl",
        provenance="results/cells/{model}/{task}/provenance.json",
    log:
        "logs/score/{model}/{task}.log",
    benchmark:
        "benchmarks/score/{model}/{task}.tsv"
    conda:
        "../envs/client.yaml"
    resources:
        # memory and time per model (models.<name>.mem_mb / runtime); unset: the profile's
        **SETTINGS.score_resources(workflow.resource_settings.default_resources),
        gpu=lambda wc: SETTINGS.models[wc.model].gpus,
    params:
        settings=lambda wc: as_json(SETTINGS.score_job(wc.model, wc.task)),
    shell:
        # $PPID: the Snakemake process running this job owns the server (it stops when that process exits).
        "python -m anyjev score --settings {params.settings:q} --task {input.task:q} --out {output.scores:q} "
        "--provenance {output.provenance:q} --owner-pid $PPID > {log:q} 2>&1"


rule evaluate_cell:
    input:
        "results/cells/{model}/{task}/scores.jsonl",
    output:
        metrics="results/cells/{model}/{task}/metrics.json",
        predictions="results/cells/{model}/{task}/predictions.csv",
    log:
        "logs/evaluate/{model}/{task}.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        settings=as_json(SETTINGS.evaluation),
    shell:
        "python -m anyjev evaluate --settings {params.settings:q} --scores {input:q} --out {output.metrics:q} "
        "--predictions {output.predictions:q} > {log:q} 2>&1"
