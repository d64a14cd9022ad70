"""A target placed over several devices (GPUs, or RPC servers), its drafter on one of them:
speed per placement, and the tokens compared with a reference placement.

Each ``--config`` is one placement, ``NAME:key=value,key=value`` with the keys of
:class:`~pyllama_spec.placement.Placement` and the Generator (``split_mode``, ``tensor_split``
as ``1/1``, ``main_gpu``, ``devices`` as ``CUDA0/CUDA1``, ``drafter_device``, ``n_gpu_layers``)
plus ``rpc=loopback`` (the target's devices served by a ``ggml-rpc-server`` this script starts on
127.0.0.1, lending ``rpc_devices`` — e.g. ``CUDA0`` — or the CPU: the cost of the RPC transport
against the same device used directly). Per config: load seconds, prompt tok/s, plain and
speculative tok/s, τ, verify and draft ms per step, the memory per device buffer, and whether the
tokens equal those of the first config (greedy; on GPUs different splits may flip near-ties).

    python benchmarks/multi_device.py --target T.gguf --drafter D.gguf \\
        --config one:split_mode=none,main_gpu=0 --config layer-d0:tensor_split=1/1,drafter_device=CUDA0 \\
        --config layer-d1:tensor_split=1/1,drafter_device=CUDA1 --config row:split_mode=row \\
        [--prompts DATA.jsonl.gz] [--n-prompts 4] [--max-tokens 128] [--n-max 7] [--json out.json]

Defaults: SmolLM2-135M-Instruct and the shipped drafter. Runs free (``sync_stages=False``) for
the speeds, then once with ``sync_stages=True`` for the per-stage split.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import platform
import time
from pathlib import Path

import pyllama_spec as ps

HERE = Path(__file__).resolve().parent


def parse_config(text: str) -> tuple[str, dict]:
    name, _, rest = text.partition(":")
    cfg: dict = {}
    for item in filter(None, rest.split(",")):
        k, _, v = item.partition("=")
        if k in ("tensor_split",):
            cfg[k] = [float(x) for x in v.split("/")]
        elif k in ("devices", "rpc_devices"):
            cfg[k] = v.split("/")
        elif k in ("main_gpu", "n_gpu_layers"):
            cfg[k] = int(v)
        else:
            cfg[k] = v
    return name, cfg


def load_prompts(path, n: int) -> list[list[int]]:
    from pyllama_spec.train.features import load_sequences

    seqs = [s for s in load_sequences(path) if s["split"] == "heldout"]
    return [s["tokens"][:s["n_prompt"]] for s in seqs[:n]]


def run_config(name: str, cfg: dict, a, prompts, drafter_path) -> dict:
    cfg = dict(cfg)
    rpc_mode = cfg.pop("rpc", None)
    rpc_devices = cfg.pop("rpc_devices", None)
    stack = contextlib.ExitStack()
    if rpc_mode == "loopback":
        from pyllama_spec import rpc

        ep = stack.enter_context(rpc.local_server(threads=a.rpc_threads, devices=rpc_devices, lifetime=1800))
        cfg["rpc_servers"] = [ep]
        cfg.setdefault("devices", [])  # the target only on the server (rpc_servers adds its devices)
    with stack:
        t0 = time.perf_counter()
        gen = ps.Generator(a.target, drafters={"dflash": drafter_path}, n_ctx=a.n_ctx, n_batch=512, **cfg)
        load_s = time.perf_counter() - t0
        row = {"name": name, "config": {k: v for k, v in cfg.items() if k != "rpc_servers"}, "rpc": rpc_mode,
               "load_s": load_s, "target_devices": gen.model.devices, "head": gen.model.output_device,
               "drafter_devices": gen.drafters["dflash"].model.devices}
        gen.generate(prompt_tokens=prompts[0], max_tokens=16)  # warm-up
        gen.generate(prompt_tokens=prompts[0], drafter="dflash", n_max=a.n_max, max_tokens=16)
        plain, spec, tokens = [], [], []
        pp = []
        for p in prompts:
            r = gen.generate(prompt_tokens=p, max_tokens=a.max_tokens, sync_stages=False, reuse_prefix=False)
            plain.append(r)
            pp.append(r.prompt_tokens_per_s)
            s = gen.generate(prompt_tokens=p, drafter="dflash", n_max=a.n_max, max_tokens=a.max_tokens,
                             sync_stages=False, reuse_prefix=False)
            spec.append(s)
            tokens.append(r.tokens)
        staged = gen.generate(prompt_tokens=prompts[0], drafter="dflash", n_max=a.n_max, max_tokens=a.max_tokens,
                              sync_stages=True, reuse_prefix=False)
        staged_plain = gen.generate(prompt_tokens=prompts[0], max_tokens=a.max_tokens, sync_stages=True,
                                    reuse_prefix=False)

        def tok_s(rs):
            return sum(r.n_generated for r in rs) / sum(r.generation_seconds for r in rs)
        steps = max(1, staged.stats.n_steps)
        row.update(
            prompt_tok_s=sum(pp) / len(pp), plain_tok_s=tok_s(plain), dflash_tok_s=tok_s(spec),
            tau=sum(s.stats.n_accepted + s.stats.n_steps for s in spec) / sum(s.stats.n_steps for s in spec),
            speedup=tok_s(spec) / tok_s(plain),
            plain_ms_per_token=1e3 * staged_plain.timings["verify"]["seconds"] / max(1, staged_plain.stats.n_steps),
            ms_per_step={k: 1e3 * v["seconds"] / steps for k, v in staged.timings.items()
                         if v["count"] and k in ("verify", "draft", "draft_sample", "inject", "extract", "accept")},
            memory=gen.memory_report(), buffers=gen.ctx.memory_breakdown(), tokens=tokens,
            same_as_spec=[s.tokens == r.tokens for s, r in zip(spec, plain)])
        gen.close()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target")
    ap.add_argument("--drafter")
    ap.add_argument("--config", action="append", required=True, help="NAME:key=value,... (see the docstring)")
    ap.add_argument("--prompts", default=str(HERE / "data" / "smollm2-selfdistill-9170.jsonl.gz"))
    ap.add_argument("--random-prompts", type=int, default=0, help="N random-id prompts of 128 tokens instead "
                    "(for targets without a tokenizer of their own, e.g. fixtures' big pairs)")
    ap.add_argument("--n-prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--n-max", type=int, default=7)
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--rpc-threads", type=int, default=4)
    ap.add_argument("--json")
    a = ap.parse_args()
    from pyllama_spec.assets import smollm2_dflash_path, smollm2_path

    a.target = a.target or str(smollm2_path())
    drafter_path = a.drafter or str(smollm2_dflash_path())
    if a.random_prompts:
        import numpy as np

        rng = np.random.default_rng(0)
        prompts = [[int(t) for t in rng.integers(300, 20000, 128)] for _ in range(a.random_prompts)]
    else:
        prompts = load_prompts(a.prompts, a.n_prompts)
    print(f"{Path(a.target).name} + {Path(drafter_path).name}; devices: "
          + ", ".join(f"{d['name']} ({d['description']}, {d['free_mib']:.0f} MiB free)" for d in ps.devices()))
    rows = []
    for text in a.config:
        name, cfg = parse_config(text)
        row = run_config(name, cfg, a, prompts, drafter_path)
        row["same_tokens_as_first"] = rows[0]["tokens"] == row["tokens"] if rows else True
        rows.append(row)
        print(f"{name:<12} target {'+'.join(row['target_devices']) or 'CPU'} (head {row['head']}), drafter "
              f"{'+'.join(row['drafter_devices']) or 'CPU'}: load {row['load_s']:.1f} s, prompt "
              f"{row['prompt_tok_s']:,.0f} tok/s, plain {row['plain_tok_s']:.1f} tok/s "
              f"({row['plain_ms_per_token']:.2f} ms/token), dflash {row['dflash_tok_s']:.1f} tok/s "
              f"(×{row['speedup']:.2f}, τ {row['tau']:.2f}); ms/step "
              + " ".join(f"{k} {v:.2f}" for k, v in row["ms_per_step"].items())
              + f"; same tokens as {rows[0]['name']}: {row['same_tokens_as_first']}", flush=True)
    for r in rows:
        del r["tokens"]
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M"), "host": platform.node(), "system": ps.system_info(),
                       "devices": ps.devices(), "target": a.target, "drafter": drafter_path, "n_max": a.n_max,
                       "max_tokens": a.max_tokens, "rows": rows}, f, indent=2, default=str)


if __name__ == "__main__":
    main()
