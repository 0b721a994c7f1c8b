"""What is written from a run read by :mod:`anyjev.rundata`: the tables, figures, provenance report and differences
across cells, the viewer, run against run."""
