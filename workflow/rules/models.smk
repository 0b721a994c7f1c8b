# Model weights, prepared once into resources/models/{model}/ (a Hugging Face folder).


rule prepare_model:
    output:
        "resources/models/{model}/anyjev-model.json",
    params:
        args=lambda wc: (
            "--source smollm2"
            if model_conf(wc.model)["source"] == "smollm2"
            else f"--source hub --repo {model_conf(wc.model)['repo']} --revision {model_conf(wc.model)['revision']}"
        ),
    log:
        "logs/prepare_model/{model}.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    shell:
        "{PY} -m anyjev prepare-model {params.args} --out resources/models/{wildcards.model} > {log} 2>&1"
