"""The run: scoring a (model, task) cell with per-item checkpoints, and the provenance recorded with it."""
