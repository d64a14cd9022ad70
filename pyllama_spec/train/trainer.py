"""The DFlash training objective and loop (arXiv 2602.06036; z-lab ``dflash``).

Per sequence, random anchor positions ``a`` in the answer; each anchor makes a block
``[t_a, mask × (B−1)]`` at positions ``a .. a+B−1`` that sees the target features of positions
``< a`` and (non-causally) its own block, and is trained to predict ``t_{a+1} .. t_{a+B−1}``
with cross-entropy weighted ``exp(−(k−1)/γ)`` over block position k (early positions decide
acceptance). Many blocks of one sequence share one forward pass through a block-diagonal mask.

Validation τ: greedy block predictions at every answer position of held-out sequences, then a
replay of the loop over them (:func:`loop_tau`) = tokens per verify step at n_max = B − 1 (the
data are the target's own greedy answers, so this is what T = 0 speculative decoding would get).
"""
from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F

from .model import DFlashConfig, DFlashModel

GAMMA = {16: 7.0, 10: 5.0, 8: 4.0}


def make_batch(seqs, feats, idx, c: DFlashConfig, n_blocks: int, rng: np.random.Generator, device, *,
               all_anchors: bool = False):
    """Tensors for sequences ``idx``: features, positions, packed blocks, mask and targets."""
    B = c.block_size
    lens = [len(seqs[i]["tokens"]) for i in idx]
    Lc = max(lens)
    n_in = feats[idx[0]].shape[1]
    anchors = []
    for i in idx:
        s = seqs[i]
        lo, hi = max(1, s["n_prompt"] - 1), len(s["tokens"]) - 2
        cand = np.arange(lo, hi + 1)
        if all_anchors:
            a = cand[:n_blocks] if len(cand) > n_blocks else cand
        else:
            a = rng.choice(cand, size=min(n_blocks, len(cand)), replace=False)
        anchors.append(np.sort(a))
    K = max(len(a) for a in anchors)
    Lq = K * B
    f = np.zeros((len(idx), Lc, n_in), dtype=np.float16)
    tok = np.full((len(idx), Lq), c.mask_token_id, dtype=np.int64)
    pos = np.zeros((len(idx), Lq), dtype=np.int64)
    tgt = np.full((len(idx), Lq), -100, dtype=np.int64)
    mask = np.zeros((len(idx), 1, Lq, Lc + Lq), dtype=bool)
    for r, (i, a_list) in enumerate(zip(idx, anchors)):
        t = seqs[i]["tokens"]
        f[r, :len(t)] = feats[i]
        for k, a in enumerate(a_list):
            q0 = k * B
            tok[r, q0] = t[a]
            pos[r, q0:q0 + B] = np.arange(a, a + B)
            for j in range(1, B):
                if a + j < len(t):
                    tgt[r, q0 + j] = t[a + j]
            mask[r, 0, q0:q0 + B, :a] = True
            mask[r, 0, q0:q0 + B, Lc + q0:Lc + q0 + B] = True
        for k in range(len(a_list), K):  # padding blocks: let them see themselves (no NaN rows)
            q0 = k * B
            mask[r, 0, q0:q0 + B, Lc + q0:Lc + q0 + B] = True
    ctx_pos = np.broadcast_to(np.arange(Lc), (len(idx), Lc))
    as_t = lambda x, dt=None: torch.as_tensor(np.ascontiguousarray(x), device=device, dtype=dt)  # noqa: E731
    return (as_t(f), as_t(ctx_pos), as_t(tok), as_t(pos), as_t(mask), as_t(tgt))


def position_weights(c: DFlashConfig, device):
    B = c.block_size
    gamma = GAMMA.get(B, B / 2)
    w = torch.tensor([0.0] + [math.exp(-(k - 1) / gamma) for k in range(1, B)], device=device)
    return w


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


@torch.no_grad()
def evaluate(model: DFlashModel, seqs, feats, idx, c: DFlashConfig, device, *, max_anchors: int = 256,
             batch: int = 4, dtype=torch.bfloat16):
    """Greedy acceptance on held-out sequences with every answer position as an anchor.

    Returns ``{"tau", "tau_per_anchor", "per_position", "n_blocks"}``: ``tau`` replays the loop
    (:func:`loop_tau`, what speculative decoding at n_max = B − 1 would get on these answers),
    ``tau_per_anchor`` is the plain mean over anchors.
    """
    model.eval()
    B = c.block_size
    acc_all, per_pos, n = [], np.zeros(B - 1), 0
    tok_total = step_total = 0
    rng = np.random.default_rng(0)
    for s in range(0, len(idx), batch):
        part = idx[s:s + batch]
        f, cp, tok, pos, mask, tgt = make_batch(seqs, feats, part, c, max_anchors, rng, device, all_anchors=True)
        with torch.autocast(device.type, dtype=dtype, enabled=device.type == "cuda"):
            logits = model.logits(model(f.to(dtype if device.type == "cuda" else torch.float32), cp, tok, pos, mask))
        pred = logits.argmax(-1).view(len(part), -1, B)[:, :, 1:]
        t = tgt.view(len(part), -1, B)[:, :, 1:]
        valid = t[:, :, 0] >= 0
        ok = (pred == t) | (t < 0)  # positions past the end count as right: the replay caps them
        lead = torch.cumprod(ok.int(), dim=-1)
        acc = lead.sum(-1).cpu().numpy()
        v = valid.cpu().numpy()
        for r, i in enumerate(part):
            sq = seqs[i]
            lo = max(1, sq["n_prompt"] - 1)
            n_anchor = int(v[r].sum())
            per_anchor = np.zeros(len(sq["tokens"]), dtype=np.int64)
            per_anchor[lo:lo + n_anchor] = acc[r, :n_anchor]
            tk, st = loop_tau(per_anchor, lo, lo + n_anchor)  # commits positions lo+1 .. lo+n_anchor
            tok_total += tk
            step_total += st
            acc_all.extend(acc[r, :n_anchor].tolist())
        per_pos += (lead * (t >= 0))[valid].sum(0).cpu().numpy()
        n += int(valid.sum())
    model.train()
    return {"tau": tok_total / step_total if step_total else 0.0,
            "tau_per_anchor": 1.0 + float(np.mean(acc_all)) if acc_all else 0.0,
            "per_position": (per_pos / max(n, 1)).tolist(), "n_blocks": n}


def train(seqs, feats, tok_embd: np.ndarray, head: np.ndarray, c: DFlashConfig, *, steps: int = 2000,
          batch: int = 16, n_blocks: int = 32, lr: float = 1e-3, warmup: int = 100, eval_every: int = 250,
          seed: int = 0, device: str | None = None, progress: bool = True, log=print,
          max_seconds: float | None = None, max_eval_seqs: int | None = None):
    """Train a drafter; returns ``(model, history)`` where history lists the validation results.

    Args:
        seqs: ``[{"split", "tokens", "n_prompt"}]`` (:func:`.features.load_sequences`).
        feats: ``feats[i]`` = ``(len(tokens_i), n_ids·n_embd)`` target features of sequence i.
        tok_embd, head: the target's ``(n_vocab, n_embd)`` token embedding and output head.
        batch: sequences per step; ``n_blocks``: anchor blocks per sequence.
        max_seconds: cap on the training time (evaluations included): the step time is measured
            over steps 20–50 (after the first steps' CUDA warm-up) and the step count is cut to fit,
            then re-fitted at every periodic evaluation (the cosine learning-rate schedule follows).
        max_eval_seqs: held-out sequences used by the periodic validation (default: all).

    The model returned is the one with the best held-out loop τ seen at an evaluation (small
    self-distilled data sets overfit: see benchmarks/RESULTS.md)."""
    torch.manual_seed(seed)
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = DFlashModel(c, torch.tensor(np.asarray(tok_embd, np.float32), device=dev),
                          torch.tensor(np.asarray(head, np.float32), device=dev)).to(dev)
    train_idx = [i for i, s in enumerate(seqs) if s["split"] == "train"]
    held_idx = [i for i, s in enumerate(seqs) if s["split"] == "heldout"][:max_eval_seqs]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    total = {"steps": steps}
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / total["steps"]))))
    w = position_weights(c, dev)
    rng = np.random.default_rng(seed)
    history = []
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=steps, desc="train", unit="step")
    cpu = torch.device("cpu")

    def next_batch():  # on a worker thread: the next batch is assembled while the GPU computes
        idx = rng.choice(train_idx, size=min(batch, len(train_idx)), replace=False).tolist()
        return make_batch(seqs, feats, idx, c, n_blocks, rng, cpu)

    pool = ThreadPoolExecutor(1)
    pending = pool.submit(next_batch)
    t0 = time.time()
    step = -1
    best = None
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
            f, cp, tok, pos, mask, tgt = (t.to(dev) for t in pending.result())
            pending = pool.submit(next_batch)
            with torch.autocast(dev.type, dtype=dtype, enabled=dev.type == "cuda"):
                logits = model.logits(model(f.to(dtype), cp, tok, pos, mask)).float()
            B = c.block_size
            ce = F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1), ignore_index=-100, reduction="none")
            wt = w.repeat(tgt.shape[1] // B)[None, :].expand_as(tgt).reshape(-1) * (tgt.view(-1) >= 0)
            loss = (ce * wt).sum() / wt.sum().clamp_min(1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if (step + 1) % eval_every == 0 or step + 1 == total["steps"]:
                ev = evaluate(model, seqs, feats, held_idx, c, dev, dtype=dtype) if held_idx else {"tau": float("nan")}
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


__all__ = ["train", "evaluate", "make_batch"]
