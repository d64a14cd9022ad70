"""Host cost of the n-gram drafters: µs per ``propose`` (and per step's bookkeeping) on a long
history, with llama.cpp's default parameters for each kind. No model: a simulated loop.

    python benchmarks/ngram_speed.py [--history 4000] [--steps 400] [--seed 0]

The history is synthetic "code-like" text: Zipf-distributed tokens of a 49 152-token vocabulary
with, 30 % of the time, a copy of an earlier span of 8-40 tokens (so lookups find matches). The
continuation is made the same way and plays the target: a draft is accepted up to its first
token that differs. Each step then runs ``observe`` / ``on_accept`` / ``rollback`` as our loop
does. Printed per kind: ``begin`` (indexing the prompt) and the first ``propose`` (ngram-map and
ngram-cache index the prompt there, as llama.cpp's first draft does) — one-off costs per
generation, like a prefill, measured once —, then percentiles (50, 90, 99) of the later
``propose`` calls and of a whole step's drafter calls. On a shared machine the mean is dominated
by rare preemptions of milliseconds, so it is not shown.
"""
from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from pyllama_spec.speculative.drafters import create_drafter
from pyllama_spec.speculative.sampling import SamplingParams
from pyllama_spec.speculative.timing import StageTimer

KINDS = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


def code_like(n: int, rng: np.random.Generator, n_vocab: int = 49152, prefix: list | None = None) -> list[int]:
    """``n`` tokens continuing ``prefix``: Zipf tokens, and copies of earlier spans."""
    out = list(prefix or [])
    start = len(out)
    ranks = rng.permutation(n_vocab)
    while len(out) < start + n:
        if len(out) > 64 and rng.random() < 0.3:
            span = int(rng.integers(8, 41))
            src = int(rng.integers(0, len(out) - span))
            out.extend(out[src:src + span])
        else:
            out.append(int(ranks[min(int(rng.zipf(1.3)) - 1, n_vocab - 1)]))
    return out[start:start + n]


def run(kind: str, history: list, future: list, steps: int) -> dict:
    d = create_drafter(kind, None)
    timer = StageTimer(sync=False)
    sp, rng = SamplingParams(), np.random.default_rng(0)
    t0 = time.perf_counter()
    d.begin(history[:-1])
    t_begin = time.perf_counter() - t0
    last, n_past, i = history[-1], len(history) - 1, 0
    t_propose, t_step, n_drafted, n_acc = [], [], 0, 0
    for _ in range(steps):
        t0 = time.perf_counter()
        draft = d.propose(last, n_past, d.n_max_default, sp, rng, timer).tokens
        t1 = time.perf_counter()
        k = 0
        while k < len(draft) and draft[k] == future[i + k]:
            k += 1
        batch = [last] + draft
        d.observe(batch, np.arange(n_past, n_past + len(batch)), k + 1, timer)
        d.on_accept(len(draft), k)
        n_past += k + 1
        d.rollback(n_past)
        t2 = time.perf_counter()
        last = future[i + k]
        i += k + 1
        t_propose.append(t1 - t0)
        t_step.append(t2 - t0)
        n_drafted += len(draft)
        n_acc += k
    def pct(xs: list) -> list:
        return np.percentile(1e6 * np.asarray(xs[1:]), [50, 90, 99]).tolist()

    return {"kind": kind, "begin_us": 1e6 * t_begin, "first_us": 1e6 * t_propose[0], "propose_us": pct(t_propose),
            "step_us": pct(t_step),
            "n_drafted": n_drafted, "n_accepted": n_acc, "history_end": n_past}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--history", type=int, default=4000, help="tokens before the first draft")
    ap.add_argument("--steps", type=int, default=400, help="simulated verify steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kinds", nargs="+", default=list(KINDS))
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    history = code_like(a.history, rng)
    future = code_like(a.steps * 80, rng, prefix=history)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor()) if platform.system() == "Linux" else platform.processor()
    print(f"{time.strftime('%Y-%m-%d')}  {cpu}  Python {platform.python_version()}  history {a.history} tokens, "
          f"{a.steps} steps")
    print(f"{'kind':14s} {'begin µs':>9s} {'first µs':>9s} {'propose µs p50 / p90 / p99':>28s} "
          f"{'step µs p50 / p90 / p99':>26s} "
          f"{'accepted/drafted':>17s}")
    for kind in a.kinds:
        r = run(kind, history, future, a.steps)
        p, s = r["propose_us"], r["step_us"]
        print(f"{kind:14s} {r['begin_us']:9.0f} {r['first_us']:9.0f} {p[0]:10.1f} / {p[1]:6.1f} / {p[2]:6.1f} "
              f"{s[0]:8.1f} / {s[1]:6.1f} / "
              f"{s[2]:6.1f} {r['n_accepted']:8d}/{r['n_drafted']:<8d}", flush=True)


if __name__ == "__main__":
    main()
