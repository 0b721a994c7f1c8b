# Tables across cells, rebuilt from per-cell metrics (no server needed).


rule summary_table:
    input:
        cell_files("metrics.json"),
    output:
        csv=report("results/tables/summary.csv", caption="../report/summary.rst", category="Tables"),
        md="results/tables/summary.md",
    log:
        "logs/tables/summary.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        levels=SETTINGS.levels,
    script:
        "../scripts/summary_table.py"


rule vs_published:
    input:
        summary="results/tables/summary.csv",
        published=SETTINGS.published or [],
    output:
        csv=report("results/tables/vs_published.csv", caption="../report/vs_published.rst", category="Tables"),
        md="results/tables/vs_published.md",
        plot=report("results/plots/vs_published.png", caption="../report/vs_published.rst", category="Plots"),
    log:
        "logs/tables/vs_published.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    script:
        "../scripts/vs_published.py"
