# Model weights, prepared once into resources/models/{model}/ (a Hugging Face folder).


rule prepare_model:
    output:
        "resources/models/{model}/anyjev-model.json",
    log:
        "logs/prepare_model/{model}.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        settings=lambda wc: as_json(SETTINGS.model_job(wc.model)),
        out=lambda wc: f"resources/models/{wc.model}",
    shell:
        "python -m anyjev prepare-model --settings {params.settings:q} --out {params.out:q} > {log:q} 2>&1"
