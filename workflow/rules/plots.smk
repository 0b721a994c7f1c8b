# The run's figures, each as PNG (shown in the report) and PDF (for a paper): each metric by level, the flip rate of
# every level, and ours vs published (only when some cell has a published counterpart). A cell's reliability diagram
# is drawn by the job that evaluates it (evaluate_cell, scoring.smk).


rule summary_plots:
    input:
        summary=rules.summary_table.output.csv,
    output:
        by_level=report(PATHS.metrics_by_level.png, caption="../report/metrics_by_level.rst", category="Plots"),
        by_level_pdf=PATHS.metrics_by_level.pdf,
        flip=report(PATHS.flip_by_level.png, caption="../report/flip.rst", category="Plots"),
        flip_pdf=PATHS.flip_by_level.pdf,
    log:
        PATHS.summary_plots_log,
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        job=lambda wc: job_file(summary_plots_job()),
    shell:
        "exec python -m anyjev summary-plots --job {params.job:q} --by-level-png {output.by_level:q} "
        "--by-level-pdf {output.by_level_pdf:q} --flip-png {output.flip:q} --flip-pdf {output.flip_pdf:q} > {log:q} 2>&1"


rule vs_published_plot:
    input:
        table=rules.vs_published.output.csv,
    output:
        png=report(PATHS.vs_published_plot.png, caption="../report/vs_published_plot.rst", category="Plots"),
        pdf=PATHS.vs_published_plot.pdf,
    log:
        PATHS.vs_published_plot_log,
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        job=lambda wc: job_file(vs_published_plot_job()),
    shell:
        "exec python -m anyjev vs-published-plot --job {params.job:q} --png {output.png:q} --pdf {output.pdf:q} > {log:q} 2>&1"
