"""The training loop shared by every drafter kind, and the loop-replay validation.

What a kind learns is its :class:`.objectives.Objective`; this module runs AdamW with a cosine
schedule over it, with a time cap, a prefetch thread and periodic held-out validation, and keeps
the checkpoint with the best held-out τ.

Validation τ: the objective gives the accepted draft count at every answer position (anchor) of
held-out sequences; :func:`loop_tau` replays the greedy loop over them = tokens committed per
verify step at the objective's n_max (the data are the target's own greedy answers, so this is
what T = 0 speculative decoding would get).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, SupportsInt

import numpy as np
import torch

from .config import TrainConfig
from .objectives import Batch, ModelT, Objective


def loop_tau(accepted_at_anchor: np.ndarray, start: int, end: int) -> tuple[int, int]:
    """Replay the greedy loop over one sequence: from anchor ``start``, each step commits the
    accepted drafts plus the bonus token and jumps there. Returns ``(tokens, steps)``.

    ``accepted_at_anchor[a]`` is the number of leading correct drafts with anchor ``a``; the data
    are the target's own greedy answers, so this is exactly what T = 0 decoding would do.
    Averaging per step (not per anchor) matters: hard positions get one step per token while
    easy stretches are crossed in one, so the per-anchor mean overestimates τ.
    """
    a, tokens, steps = start, 0, 0
    while a < end:
        k = int(min(accepted_at_anchor[a], end - a - 1))
        tokens += k + 1
        steps += 1
        a += k + 1
    return tokens, steps


def replay_native(lead: Callable[[int, int], SupportsInt], n_prompt: int, n_predict: int, n_max: int,
                  eog_at: int | None = None) -> dict[str, Any]:
    """The counters ``llama-speculative-simple`` prints for a greedy run, replayed from accepted
    draft counts (``examples/speculative-simple``: the draft is cut to ``n_predict − predicted − 1``,
    the run stops once more than ``n_predict`` tokens are predicted or at an end-of-generation token).

    Args:
        lead: ``lead(a, n)`` → leading correct drafts (≤ n) when drafting n tokens at anchor a.
        n_prompt: prompt tokens (the first anchor is ``n_prompt − 1``).
        eog_at: position of the first end-of-generation token in the sequence, if any.

    Returns:
        ``{"n_drafted", "n_accept", "n_predict", "anchors"}`` (``anchors``: the anchor of each step).
    """
    a, n_pred, n_drafted, n_accept, anchors = n_prompt - 1, 0, 0, 0, []
    while True:
        room = n_predict - n_pred - 1
        n = min(n_max, room) if room > 0 else n_max
        k = int(lead(a, n))
        anchors.append(a)
        n_drafted += n
        n_accept += k
        n_pred += k + 1
        a += k + 1
        if n_pred > n_predict or (eog_at is not None and a >= eog_at):
            break
    return {"n_drafted": n_drafted, "n_accept": n_accept, "n_predict": n_pred, "anchors": anchors}


@torch.no_grad()
def evaluate(model: ModelT, objective: Objective[ModelT], seqs: Sequence[dict[str, Any]],
             feats: Sequence[np.ndarray] | None, idx: Sequence[int], device: torch.device, *,
             dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """Greedy acceptance on held-out sequences ``idx`` with every answer position as an anchor.

    Returns ``{"tau", "tau_per_anchor", "per_position", "n_blocks"}``: ``tau`` replays the loop
    (:func:`loop_tau`, what speculative decoding at n_max = ``objective.n_max`` would get on these
    answers); ``tau_per_anchor`` is the plain mean over anchors; ``per_position[k]`` the share of
    anchors whose draft k+1 is accepted.
    """
    model.eval()
    n_max = objective.n_max
    acc_all, per_pos, n = [], np.zeros(n_max), 0
    tok_total = step_total = 0
    rng = np.random.default_rng(0)
    for s in range(0, len(idx), objective.eval_batch):
        part = idx[s:s + objective.eval_batch]
        b = objective.batch(seqs, feats, part, rng, device, evaluate=True)
        with torch.autocast(device.type, dtype=dtype, enabled=device.type == "cuda"):
            leads = objective.leads(model, b, seqs, part, dtype)
        for i, (lo, acc) in zip(part, leads):
            L = len(seqs[i]["tokens"])
            per_anchor = np.zeros(L, dtype=np.int64)
            per_anchor[lo:lo + len(acc)] = acc
            tk, st = loop_tau(per_anchor, lo, lo + len(acc))  # commits positions lo+1 .. lo+len(acc)
            tok_total += tk
            step_total += st
            acc_all.extend(np.asarray(acc).tolist())
            room = L - 1 - (lo + np.arange(len(acc)))  # drafts that have a real token to match
            per_pos += ((np.asarray(acc)[:, None] > np.arange(n_max)) & (np.arange(n_max) < room[:, None])).sum(0)
            n += len(acc)
    model.train()
    return {"tau": tok_total / step_total if step_total else 0.0,
            "tau_per_anchor": 1.0 + float(np.mean(acc_all)) if acc_all else 0.0,
            "per_position": (per_pos / max(n, 1)).tolist(), "n_blocks": n}


def train(seqs: Sequence[dict[str, Any]], feats: Sequence[np.ndarray] | None, objective: Objective[ModelT],
          tc: TrainConfig, *, progress: bool = True, init_state: Mapping[str, Any] | None = None,
          log: Callable[[str], object] = print) -> tuple[ModelT, list[dict[str, Any]]]:
    """Train ``objective``'s model; returns ``(model, history)`` (history: the validation results).

    Args:
        seqs: ``[{"split", "tokens", "n_prompt"}]`` (:func:`.features.load_sequences`).
        feats: ``feats[i]`` = ``(len(tokens_i), n_ids·n_embd)`` target features of sequence i
            (unused by kinds without features: may be None).
        tc: steps, batch, lr, warmup, eval_every, max_seconds, max_eval_seqs, seed, device.
        init_state: a ``state_dict`` of the same model to start from (a warm restart, as SGDR:
            Loshchilov & Hutter 2017 — the optimizer and the cosine schedule start afresh).

    With ``tc.max_seconds`` the step time is measured over steps 20–50 (after the first steps' CUDA
    warm-up), the step count is cut to fit and re-fitted at every periodic evaluation (the cosine
    learning-rate schedule follows). The model returned is the one with the best held-out loop τ
    seen at an evaluation (small self-distilled data sets overfit: see benchmarks/RESULTS.md).
    """
    torch.manual_seed(tc.seed)
    dev = torch.device(tc.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = objective.build().to(dev)
    if init_state is not None:  # a warm start: the weights of an earlier run, a fresh optimizer and schedule
        model.load_state_dict(init_state)
    train_idx = [i for i, s in enumerate(seqs) if s["split"] == "train"]
    held_idx = [i for i, s in enumerate(seqs) if s["split"] == "heldout"][:tc.max_eval_seqs]
    if not train_idx:
        raise ValueError("no training sequences (every sequence is held out): add data")
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=tc.lr, betas=(0.9, 0.95),
                            weight_decay=0.01)
    steps, eval_every, warmup = tc.steps, tc.eval_every, tc.warmup
    total = {"steps": steps}
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / total["steps"]))))
    rng = np.random.default_rng(tc.seed)
    history = []
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=steps, desc=f"train {objective.kind}", unit="step")
    cpu = torch.device("cpu")

    def next_batch() -> Batch:  # on a worker thread: the next batch is assembled while the GPU computes
        idx = rng.choice(train_idx, size=min(tc.batch, len(train_idx)), replace=False).tolist()
        return objective.batch(seqs, feats, idx, rng, cpu)

    pool = ThreadPoolExecutor(1)
    pending = pool.submit(next_batch)
    t0 = time.time()
    step = -1
    best = None
    max_seconds = tc.max_seconds
    try:
        while step + 1 < total["steps"]:
            step += 1
            if bar is not None:
                bar.update(1)
            if max_seconds and step == 20:
                t20 = time.time()
            if max_seconds and step == 50:
                per_step = (time.time() - t20) / 30
                total["steps"] = max(51, min(steps, int((max_seconds - (time.time() - t0)) / per_step) + 50))
                eval_every = max(1, min(eval_every, total["steps"] // 4))
                if bar is not None:
                    bar.total = total["steps"]
                    bar.refresh()
            b = tuple(t.to(dev) for t in pending.result())
            pending = pool.submit(next_batch)
            with torch.autocast(dev.type, dtype=dtype, enabled=dev.type == "cuda"):
                loss = objective.loss(model, b, dtype)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if (step + 1) % eval_every == 0 or step + 1 == total["steps"]:
                ev = evaluate(model, objective, seqs, feats, held_idx, dev, dtype=dtype) if held_idx \
                    else {"tau": float("nan")}
                ev.update(step=step + 1, loss=float(loss.detach()), seconds=time.time() - t0)
                history.append(ev)
                if max_seconds and step >= 50 and step + 1 < total["steps"]:  # evaluations take time too: refit
                    left = max_seconds - (time.time() - t0)
                    total["steps"] = max(step + 1, min(steps, step + 1 + int(left / per_step)))
                    if bar is not None:
                        bar.total = total["steps"]
                if held_idx and (best is None or ev["tau"] > best[0]):
                    best = (ev["tau"], {k: v.detach().clone() for k, v in model.state_dict().items()})
                msg = f"step {step + 1}: loss {ev['loss']:.3f}  held-out τ {ev['tau']:.3f}"
                if bar is not None:
                    bar.set_postfix(loss=f"{ev['loss']:.3f}", tau=f"{ev['tau']:.2f}")
                    bar.write(msg)
                else:
                    log(msg)
    finally:  # also when a step raises: no worker thread left behind
        pool.shutdown(cancel_futures=True)
    if bar is not None:
        bar.close()
    if best is not None and best[0] > history[-1]["tau"]:
        model.load_state_dict(best[1])
        log(f"kept the checkpoint with the best held-out τ ({best[0]:.3f})")
    return model, history


__all__ = ["train", "evaluate", "loop_tau", "replay_native"]
