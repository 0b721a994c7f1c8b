# Figures, each as PNG (shown in the report) and PDF (for a paper): reliability diagrams per cell (one
# level per panel), each metric by level, the flip rate of every level, and ours vs published (only
# when some cell has a published counterpart).


rule reliability_plot:
    input:
        predictions="results/cells/{model}/{task}/predictions.csv",
        metrics="results/cells/{model}/{task}/metrics.json",
    output:
        png=report(
            "results/plots/reliability/{model}/{task}.png",
            caption="../report/reliability.rst",
            category="Plots",
            subcategory="Reliability",
            labels={"model": "{model}", "task": "{task}"},
        ),
        pdf="results/plots/reliability/{model}/{task}.pdf",
    log:
        "logs/plots/reliability/{model}/{task}.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        levels=SETTINGS.levels,
    script:
        "../scripts/reliability_plot.py"


rule summary_plots:
    input:
        "results/tables/summary.csv",
    output:
        by_level=report(
            "results/plots/metrics_by_level.png",
            caption="../report/metrics_by_level.rst",
            category="Plots",
        ),
        by_level_pdf="results/plots/metrics_by_level.pdf",
        flip=report(
            "results/plots/flip_by_level.png",
            caption="../report/flip.rst",
            category="Plots",
        ),
        flip_pdf="results/plots/flip_by_level.pdf",
    log:
        "logs/plots/summary.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    script:
        "../scripts/summary_plots.py"


rule vs_published_plot:
    input:
        "results/tables/vs_published.csv",
    output:
        png=report(
            "results/plots/vs_published.png",
            caption="../report/vs_published_plot.rst",
            category="Plots",
        ),
        pdf="results/plots/vs_published.pdf",
    log:
        "logs/plots/vs_published.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    script:
        "../scripts/vs_published_plot.py"
