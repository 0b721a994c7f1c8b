"""A run as data: the one reader of a run's files, returning tidy pandas frames (docs/results.md).

    from anyjev.rundata import read_run
    run = read_run("results", "logs")      # or read_cells([...cell folders...])
    run.cells, run.metrics, run.predictions, run.items, run.probabilities, run.failed

Every file is checked as it is read (:mod:`anyjev.rundata.files`): a missing, empty or malformed one is one
:class:`~anyjev.errors.FileFormatError` naming it. The tables and the viewer read runs through this package.
"""

from anyjev.rundata.cell import Cell
from anyjev.rundata.layout import CellLayout
from anyjev.rundata.run import Run, read_cells, read_layout, read_run

__all__ = ["Cell", "CellLayout", "Run", "read_cells", "read_layout", "read_run"]
