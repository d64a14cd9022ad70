"""Plug your own drafter into the loop: a bigram drafter that proposes, token by token, what most
often followed each token so far in this context (prompt + output). No model, ~30 lines.

    python examples/custom_drafter.py
"""
from __future__ import annotations

from collections import Counter, defaultdict

import pyllama_spec as ps
from pyllama_spec.assets import smollm2_path


@ps.register_drafter
class BigramDrafter(ps.Drafter):
    kind = "bigram"
    n_max_default = 4

    def __init__(self, target=None):
        super().__init__(target)
        self.history: list = []

    def begin(self, prompt, n_keep=0):
        self.history = list(prompt)

    def cached_prefix(self, prompt):
        return len(prompt)  # the state is rebuilt from the prompt: the target may keep any prefix

    def observe(self, tokens, positions, n_commit, timer):
        del self.history[int(positions[0]):]
        self.history.extend(int(t) for t in tokens[:n_commit])

    def rollback(self, n_past):
        del self.history[n_past:]

    def propose(self, last_token, n_past, n_max, sp, rng, timer):
        with timer("draft"):
            follow = defaultdict(Counter)
            seq = self.history[:n_past] + [last_token]
            for a, b in zip(seq, seq[1:]):
                follow[a][b] += 1
            out, t = [], last_token
            while len(out) < n_max and follow[t]:
                t = follow[t].most_common(1)[0][0]
                out.append(t)
        return ps.Draft(tokens=out)


if __name__ == "__main__":
    gen = ps.Generator(smollm2_path(), drafters={"bigram": "bigram", "ngram": "ngram"}, n_ctx=2048)
    chat = [{"role": "user", "content": "List the numbers from 1 to 30, one per line."}]
    for name in (None, "bigram", "ngram"):
        r = gen.generate(messages=chat, drafter=name, max_tokens=96)
        print(f"--- drafter={name}: {r.tokens_per_s:.1f} tok/s, acceptance {100 * r.stats.acceptance_rate:.1f}%, "
              f"τ {r.stats.mean_accepted_length:.2f}")
    print(r.text[:200])
