# Plots: reliability diagrams per cell (levels overlaid), each metric by level, flip raw vs L0.


rule reliability_plot:
    input:
        "results/cells/{model}/{task}/predictions.csv",
    output:
        report(
            "results/plots/reliability/{model}/{task}.png",
            caption="../report/reliability.rst",
            category="Plots",
            subcategory="Reliability",
            labels={"model": "{model}", "task": "{task}"},
        ),
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
        by_level=report("results/plots/metrics_by_level.png", caption="../report/metrics_by_level.rst", category="Plots"),
        flip=report("results/plots/flip_raw_vs_L0.png", caption="../report/flip.rst", category="Plots"),
    log:
        "logs/plots/summary.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    script:
        "../scripts/summary_plots.py"
