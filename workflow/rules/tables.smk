# Tables across cells, rebuilt from per-cell files (no server needed): the summary (CSV, Markdown,
# LaTeX), the run's provenance for the report, and the comparison with published numbers.


rule summary_table:
    input:
        cell_files("metrics.json"),
    output:
        csv=report(
            f"{TABLES}/summary.csv",
            caption="../report/summary.rst",
            category="Tables",
        ),
        md=f"{TABLES}/summary.md",
        tex=f"{TABLES}/summary.tex",
    log:
        f"{LOGS}/tables/summary.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        levels=SETTINGS.levels,
    script:
        "../scripts/summary_table.py"


rule provenance_table:
    input:
        provenance=cell_files("provenance.json"),
        metrics=cell_files("metrics.json"),
    output:
        md=f"{TABLES}/provenance.md",
        html=report(
            f"{TABLES}/provenance.html",
            caption="../report/provenance.rst",
            category="Provenance",
        ),
    log:
        f"{LOGS}/tables/provenance.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        config=CONFIG_AS_RUN,
    script:
        "../scripts/provenance_table.py"


rule vs_published:
    input:
        summary=f"{TABLES}/summary.csv",
        published=SETTINGS.published or [],
    output:
        csv=report(
            f"{TABLES}/vs_published.csv",
            caption="../report/vs_published.rst",
            category="Tables",
        ),
        md=f"{TABLES}/vs_published.md",
    log:
        f"{LOGS}/tables/vs_published.log",
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        overlap=published_overlap_rows(),
    script:
        "../scripts/vs_published.py"
