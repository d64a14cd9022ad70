"""How a token-tree policy would do on recorded DFlash steps, offline (issue 22): τ of node-selection rules on the
same drafter calls, at T = 0, without re-running the target for each rule.

One pass records, for every tree step of a real generation (SmolLM2 + the shipped DFlash drafter, tree ``--budget``,
depth ``--n-max``), the drafter's per-depth candidates (ids and log-probabilities, what ``build_tree`` gets) and,
from the generation's committed tokens, the target's greedy continuation at those positions (at T = 0 a step
commits the target's argmax of every accepted row and the row after it). A rule's accepted length at a step is
then the longest prefix of that continuation that is a path of its tree, so ``τ = 1 + mean accepted``. The rule
the drafter ran reproduces the measured τ exactly (checked and printed): the step boundaries are that rule's, so
other rules' τ are per-step estimates on the same calls (their own runs would start later steps elsewhere).

Rules: ``raw`` (today: best-first by the drafter's path log-probability, EAGLE-2 / DDTree), ``spine`` (the chain's
draft first), ``calibrated`` (path probability from per-(depth, rank) acceptance rates fitted on the other half of
the steps — two-fold, so no step is scored by a fit that saw it), ``calibrated-p`` (the same from a reliability
table per depth: how often a candidate of that probability bin was the target's token), ``depth λ`` (each
node's log-probability + λ: a path's score + λ × its depth; a uniform temperature would not change any tree).

    python benchmarks/tree_policy_sim.py [DATA] [--n-prompts 40] [--max-tokens 128] [--budget 16] [-ngl 0] [-t 2]
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import pyllama_spec as ps
from pyllama_spec.assets import smollm2_dflash_path, smollm2_path
from pyllama_spec.speculative import tree as tree_mod
from pyllama_spec.speculative.drafters import dflash as dflash_mod
from pyllama_spec.train.features import load_sequences

DATA = os.path.join(os.path.dirname(__file__), "data", "issue20-h200", "answers-s0of8-00.jsonl.gz")


def accepted(tree: tree_mod.TreeDraft, cont: list[int]) -> int:
    """The longest prefix of ``cont`` that is a root path of ``tree`` (its nodes' tokens, parent links)."""
    kids = tree.children()  # [0]: the root's children, [i + 1]: node i's
    here, m = kids[0], 0
    for t in cont:
        nxt = next((i for i in here if tree.tokens[i] == t), None)
        if nxt is None:
            break
        m += 1
        here = kids[nxt + 1]
    return m


def rank_hits(ids: np.ndarray, cont: list[int]) -> list[tuple[int, int, bool]]:
    """(depth, rank, hit) for each depth the greedy path reaches with every earlier depth's token among the
    candidates: at depth d the target's token is candidate ``rank`` (hit) or none of them (rank -1, miss)."""
    out = []
    for d, t in enumerate(cont[:ids.shape[0]]):
        r = np.flatnonzero(ids[d] == t)
        if not r.size:
            out.append((d, -1, False))
            break
        out.append((d, int(r[0]), True))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", nargs="?", default=DATA)
    ap.add_argument("--n-prompts", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--n-max", type=int, default=7)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=0)
    ap.add_argument("-t", "--threads", type=int, default=None)
    ap.add_argument("--depth-bonus", default="-0.5,0.5",
                    help="rules 'depth λ': each node's log-probability + λ (λ > 0 favours deep paths, < 0 broad trees)")
    ap.add_argument("--json")
    a = ap.parse_args()
    seqs = load_sequences(a.data)[:a.n_prompts]
    gen = ps.Generator(str(smollm2_path()), drafters={"dflash": str(smollm2_dflash_path())}, n_ctx=4096,
                       n_gpu_layers=a.n_gpu_layers, tree=a.budget, n_threads=a.threads)
    calls: list[tuple[int, np.ndarray, np.ndarray]] = []  # (position of the root, ids (D, k), logp (D, k))
    orig = dflash_mod.build_tree
    pos = {"n_past": 0}
    orig_propose = dflash_mod.DFlashDrafter.propose_tree

    def propose_tree(self, last_token, n_past, *args, **kw):  # (records where each tree is rooted)
        pos["n_past"] = n_past
        return orig_propose(self, last_token, n_past, *args, **kw)

    def build_tree(ids, lg, budget, spine=False):
        calls.append((pos["n_past"], np.asarray(ids).copy(), np.asarray(lg, dtype=np.float64).copy()))
        return orig(ids, lg, budget, spine)

    dflash_mod.build_tree = build_tree
    tree_mod.build_tree = build_tree  # tree_from_logits calls it by its module global
    dflash_mod.DFlashDrafter.propose_tree = propose_tree
    steps: list[tuple[np.ndarray, np.ndarray, list[int]]] = []
    measured = ps.SpecStats(n_max=a.n_max)
    t0 = time.time()
    for i, s in enumerate(seqs):
        prompt = s["tokens"][:s["n_prompt"]]
        calls.clear()
        spec = ps.SpecConfig(drafter="dflash", n_max=a.n_max, tree=a.budget)
        r = gen.generate(prompt_tokens=prompt, max_tokens=a.max_tokens, spec=spec)
        measured.merge(r.stats)
        full = list(r.prompt_tokens) + list(r.tokens)  # (as decoded: the prompt the generator ran)
        for n_past, ids, lg in calls:
            cont = full[n_past + 1:n_past + 1 + ids.shape[0]]
            if len(cont) == ids.shape[0]:  # (a step at the end, cut by max_tokens, is left out)
                steps.append((ids, lg, cont))
        print(f"[{i + 1}/{len(seqs)}] {len(steps)} steps recorded, measured τ {measured.mean_accepted_length:.3f}",
              flush=True)
    gen.close()
    dflash_mod.build_tree, tree_mod.build_tree = orig, orig
    dflash_mod.DFlashDrafter.propose_tree = orig_propose

    def tau(make) -> float:
        return 1.0 + float(np.mean([accepted(make(j, ids, lg), cont) for j, (ids, lg, cont) in enumerate(steps)]))

    D = max(ids.shape[0] for ids, _, _ in steps)  # (near the end of a generation a block is shorter)
    k = steps[0][0].shape[1]
    folds = [np.arange(len(steps)) % 2 == f for f in (0, 1)]

    def fit(mask: np.ndarray) -> np.ndarray:
        """log P(the target's token is candidate r at depth d | the path reached depth d), shrunk to the raw mean."""
        hit = np.zeros((D, k))
        tried = np.zeros(D)
        for j in np.flatnonzero(mask):
            ids, _, cont = steps[j]
            for d, rank, ok in rank_hits(ids, cont):
                tried[d] += 1
                if ok:
                    hit[d, rank] += 1
        return np.log((hit + 0.5) / (tried[:, None] + 0.5 * k + 1.0))

    cal = [fit(~folds[f]) for f in (0, 1)]  # fold f is scored by the fit on the other fold
    n_bins = 10

    def fit_p(mask: np.ndarray) -> np.ndarray:
        """log P(a candidate is the target's token | depth d, its probability's bin): every candidate of every
        depth the greedy path reached counts (a reliability table per depth), shrunk to the bin's middle."""
        hit = np.zeros((D, n_bins))
        tried = np.zeros((D, n_bins))
        for j in np.flatnonzero(mask):
            ids, lg, cont = steps[j]
            for d, rank, _ in rank_hits(ids, cont):
                b = np.minimum((np.exp(lg[d]) * n_bins).astype(int), n_bins - 1)
                np.add.at(tried[d], b, 1.0)
                if rank >= 0:
                    hit[d, b[rank]] += 1.0
        mid = (np.arange(n_bins) + 0.5) / n_bins
        return np.log((hit + 2.0 * mid) / (tried + 2.0))

    cal_p = [fit_p(~folds[f]) for f in (0, 1)]

    def calibrated_p(j, ids, lg):
        b = np.minimum((np.exp(lg) * n_bins).astype(int), n_bins - 1)
        c = np.take_along_axis(cal_p[j % 2][:ids.shape[0]], b, axis=1)
        return tree_mod.build_tree(ids, c + 1e-9 * lg, a.budget)  # (ties within a bin: by the drafter's order)

    def calibrated(j, ids, lg):
        order = np.argsort(-lg, axis=1, kind="stable")
        rank = np.argsort(order, axis=1)  # each candidate's rank in its row
        c = np.take_along_axis(cal[j % 2][:ids.shape[0]], rank, axis=1)  # that rank's acceptance rate
        return tree_mod.build_tree(ids, c, a.budget)

    rules = {
        "raw": lambda j, ids, lg: tree_mod.build_tree(ids, lg, a.budget),
        "spine": lambda j, ids, lg: tree_mod.build_tree(ids, lg, a.budget, spine=True),
        "chain": lambda j, ids, lg: tree_mod.TreeDraft(  # (the chain of the same block: its τ beside the trees)
            tokens=[int(ids[d][np.argmax(lg[d])]) for d in range(ids.shape[0])],
            parents=np.arange(-1, ids.shape[0] - 1, dtype=np.int64)),
        "calibrated": calibrated,
        "calibrated-p": calibrated_p,
    }
    for lam in (float(x) for x in a.depth_bonus.split(",") if x):
        rules[f"depth {lam:+g}"] = lambda j, ids, lg, lam=lam: tree_mod.build_tree(ids, lg + lam, a.budget)
    out = {"steps": len(steps), "measured_tau": measured.mean_accepted_length, "budget": a.budget,
           "n_max": a.n_max, "n_prompts": len(seqs), "data": os.path.relpath(a.data), "rules": {},
           "date": time.strftime("%Y-%m-%d"), "system": ps.system_info(), "seconds": time.time() - t0}
    for name, make in rules.items():
        out["rules"][name] = tau(make)
        print(f"{name:12s} τ {out['rules'][name]:.3f}")
    print(f"(measured in the run: τ {measured.mean_accepted_length:.3f} over {measured.n_steps} steps; {len(steps)} "
          "scored: the last step of a generation is left out)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
