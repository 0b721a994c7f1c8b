"""Serving: model weights prepared once, and vLLM servers started under pinned flags, leased per model and
stopped with the run (docs/servers.md)."""
