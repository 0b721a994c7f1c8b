"""A static, offline item-level viewer of a run: ``results/viewer/index.html`` opens from disk (``file://``),
fetches nothing from a network and needs no server (docs/viewer.md).

Three pages (hash routes of one HTML file) and two data files per cell, each made by a module of its own from the
run as the run reader (:mod:`anyjev.rundata`) gives it:

* ``index.html`` (:mod:`.page`, :mod:`.run_page`): the page, its CSS and JavaScript (``assets/``, this project's
  own) and the run-level data inline: every cell with its summary-table numbers per level, or why it has none;
* ``cells/<model>/<task>.js`` (:mod:`.cell_page`): every test item's decision at each level, correct / flipped /
  tied, answer mass, the reliability diagram's bins; loaded with a ``<script>`` tag when the cell is opened
  (browsers refuse ``fetch()`` of ``file://``);
* ``cells/<model>/<task>.items.js`` (:mod:`.items_page`): state, question, options; label probabilities by layout;
  each level's distribution, the priors divided out and L1's temperature; every layout's exact prompt text and token
  count (rebuilt and checked against the stored prompt hash by :mod:`anyjev.run.rebuild`); loaded when an item of
  the cell is opened.

The level code is the library's (:mod:`.levels`): the generator refuses a cell whose ``predictions.csv`` does not
follow from its ``scores.jsonl`` under its ``metrics.json`` settings. :mod:`.write` puts it together.
"""

from anyjev.reports.viewer.write import CELLS, INDEX, ViewerJob, write_viewer

__all__ = ["CELLS", "INDEX", "ViewerJob", "write_viewer"]
