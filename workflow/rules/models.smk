# Model weights, prepared once into a model folder under PATHS.models_dir (a Hugging Face folder), which the step
# marks with its record (MODEL_RECORD, anyjev/serving/models.py).


rule prepare_model:
    output:
        marker=f"{PATHS.models_dir}/{{model}}/{MODEL_RECORD}",
    log:
        PATHS.prepare_model_log,
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        job=lambda wc: job_file(SETTINGS.model_job(wc.model, lock_record=PATHS.lock_record)),
        folder=lambda wc, output: os.path.dirname(output.marker),
    shell:
        "exec python -m anyjev prepare-model --job {params.job:q} --out {params.folder:q} > {log:q} 2>&1"
