# Tables across cells, rebuilt from per-cell files (no server needed): the summary (CSV, Markdown,
# LaTeX), the differences with their intervals, the run's provenance for the report, and the comparison with
# published numbers.


rule summary_table:
    input:
        for_cells(rules.evaluate_cell.output.metrics),
    output:
        csv=report(PATHS.summary["csv"], caption="../report/summary.rst", category="Tables"),
        md=PATHS.summary["md"],
        tex=PATHS.summary["tex"],
    log:
        PATHS.summary_log,
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        job=lambda wc: job_file(summary_job()),
    shell:
        "exec python -m anyjev summary-table --job {params.job:q} --csv {output.csv:q} --md {output.md:q} --tex {output.tex:q} > {log:q} 2>&1"


# Each level minus raw, and each model minus another on the same task (from both cells' scores and the bootstrap
# replicates their evaluations kept), with the paired intervals of the differences.
rule differences_table:
    input:
        metrics=for_cells(rules.evaluate_cell.output.metrics),
        scores=for_cells(rules.score_cell.output.scores),
        replicates=for_cells(rules.evaluate_cell.output.replicates),
    output:
        csv=report(PATHS.differences["csv"], caption="../report/differences.rst", category="Tables"),
        md=PATHS.differences["md"],
    log:
        PATHS.differences_log,
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        job=lambda wc: job_file(differences_job()),
    shell:
        "exec python -m anyjev differences-table --job {params.job:q} --csv {output.csv:q} --md {output.md:q} > {log:q} 2>&1"


rule provenance_table:
    input:
        provenance=for_cells(rules.score_cell.output.provenance),
        metrics=for_cells(rules.evaluate_cell.output.metrics),
    output:
        md=PATHS.provenance_report["md"],
        html=report(PATHS.provenance_report["html"], caption="../report/provenance.rst", category="Provenance"),
    log:
        PATHS.provenance_log,
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        job=lambda wc: job_file(provenance_job()),
    shell:
        "exec python -m anyjev provenance-table --job {params.job:q} --md {output.md:q} --html {output.html:q} > {log:q} 2>&1"


rule vs_published:
    input:
        summary=rules.summary_table.output.csv,
        published=SETTINGS.published or [],
    output:
        csv=report(PATHS.vs_published["csv"], caption="../report/vs_published.rst", category="Tables"),
        md=PATHS.vs_published["md"],
    log:
        PATHS.vs_published_log,
    localrule: True
    conda:
        "../envs/client.yaml"
    params:
        job=lambda wc: job_file(vs_published_job()),
    shell:
        "exec python -m anyjev vs-published --job {params.job:q} --csv {output.csv:q} --md {output.md:q} > {log:q} 2>&1"
