"""The data: tasks (items with gold labels, the JSONL format, the seeded split) and where they come from
(built-in offline datasets from PyPI packages, published hub datasets)."""
