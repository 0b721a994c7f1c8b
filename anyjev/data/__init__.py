"""The data: tasks (items with gold labels, the JSONL format, the seeded split) and where they come from
(built-in offline datasets from PyPI packages, hub datasets declared as data: the published tasks and the
config's own)."""
