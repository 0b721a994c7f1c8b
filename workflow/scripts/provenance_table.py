"""Snakemake script: the config as run and every cell's provenance -> results/tables/provenance.{md,html}."""

import logging

from anyjev.outputs.provenance import write_provenance

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
sections = write_provenance(snakemake.params.config, snakemake.input.provenance, snakemake.input.metrics,  # noqa: F821
                            snakemake.output.md, snakemake.output.html)  # noqa: F821
logging.info("provenance: %d sections", len(sections))
