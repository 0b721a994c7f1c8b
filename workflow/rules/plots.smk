# Figures, each as PNG (shown in the report) and PDF (for a paper): reliability diagrams per cell (one
# level per panel), each metric by level, the flip rate of every level, and ours vs published (only
# when some cell has a published counterpart).


rule reliability_plot:
    input:
        predictions=f"{CELL_DIR}/predictions.csv",
        metrics=f"{CELL_DIR}/metrics.json",
    output:
        png=report(
            f"{RELIABILITY}.png",
            caption="../report/reliability.rst",
            category="Plots",
            subcategory="Reliability",
            labels={"model": "{model}", "task": "{task}"},
        ),
        pdf=f"{RELIABILITY}.pdf",
    log:
        f"{LOGS}/plots/reliability/{{model}}/{{task}}.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        levels=SETTINGS.levels,
    script:
        "../scripts/reliability_plot.py"


rule summary_plots:
    input:
        f"{TABLES}/summary.csv",
    output:
        by_level=report(
            f"{PLOTS}/metrics_by_level.png",
            caption="../report/metrics_by_level.rst",
            category="Plots",
        ),
        by_level_pdf=f"{PLOTS}/metrics_by_level.pdf",
        flip=report(
            f"{PLOTS}/flip_by_level.png",
            caption="../report/flip.rst",
            category="Plots",
        ),
        flip_pdf=f"{PLOTS}/flip_by_level.pdf",
    log:
        f"{LOGS}/plots/summary.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    script:
        "../scripts/summary_plots.py"


rule vs_published_plot:
    input:
        f"{TABLES}/vs_published.csv",
    output:
        png=report(
            f"{PLOTS}/vs_published.png",
            caption="../report/vs_published_plot.rst",
            category="Plots",
        ),
        pdf=f"{PLOTS}/vs_published.pdf",
    log:
        f"{LOGS}/plots/vs_published.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    script:
        "../scripts/vs_published_plot.py"
