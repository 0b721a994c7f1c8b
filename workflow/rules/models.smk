# Model weights, prepared once into MODELS_DIR/{model}/ (a Hugging Face folder).


rule prepare_model:
    output:
        f"{MODELS_DIR}/{{model}}/anyjev-model.json",
    log:
        PREPARE_MODEL_LOG,
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        job=lambda wc: SETTINGS.model_job(wc.model, lock_record=LOCK_RECORD).to_json(),
        out=lambda wc: f"{MODELS_DIR}/{wc.model}",
    shell:
        "python -m anyjev prepare-model --job {params.job:q} --out {params.out:q} > {log:q} 2>&1"
