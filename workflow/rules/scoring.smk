# One job per (model, task) cell: score it against the model's server, then evaluate it offline.


def score_inputs(wildcards):
    inputs = {"task": f"resources/tasks/{wildcards.task}.jsonl", "model": model_inputs(wildcards)}
    if model_conf(wildcards.model)["source"] != "url":
        inputs["spec"] = f"resources/servers/{wildcards.model}.json"
    return inputs


rule score_cell:
    input:
        unpack(score_inputs),
    output:
        scores="results/cells/{model}/{task}/scores.jsonl",
        provenance="results/cells/{model}/{task}/provenance.json",
    params:
        server=server_args,
        client=client_args(),
    log:
        "logs/score/{model}/{task}.log",
    benchmark:
        "benchmarks/score/{model}/{task}.tsv"
    resources:
        gpu=lambda wc: model_conf(wc.model)["gpus"],
    conda:
        "../envs/client.yaml"
    shell:
        "{PY} -m anyjev score --task {input.task} --out {output.scores} --provenance {output.provenance} "
        "--model-name {wildcards.model} {params.server} {params.client} > {log} 2>&1"


rule evaluate_cell:
    input:
        "results/cells/{model}/{task}/scores.jsonl",
    output:
        metrics="results/cells/{model}/{task}/metrics.json",
        predictions="results/cells/{model}/{task}/predictions.csv",
    params:
        args=evaluation_args(),
    log:
        "logs/evaluate/{model}/{task}.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    shell:
        "{PY} -m anyjev evaluate --scores {input} --out {output.metrics} --predictions {output.predictions} "
        "{params.args} > {log} 2>&1"
