"""Our Python loop vs llama.cpp's native ``llama-speculative-simple`` on the same files, prompt
and n_max, in alternating runs; and plain decoding vs ``llama-completion``.

Prints, per configuration, the generation speed of each (tokens/s after prefill, median of
--runs), their ratio, and whether the tokens are identical. Needs the package built with
``-C cmake.define.PYLLAMA_SPEC_NATIVE_TOOLS=ON``.

    python benchmarks/compare_native.py [--target T.gguf --drafter D.gguf] [--kind KIND] [--n-max 1 4 7]
        [--max-tokens 128] [--runs 3] [-ngl 99] [--json out.json] [--prompts DATA.jsonl --n-prompts 20]
        [--ngram [KIND ...]] [--no-dflash]

Defaults: SmolLM2-135M-Instruct, a random DFlash drafter of its shape (block 8), and one chat
prompt. Any model drafter kind works: ``--kind`` is llama.cpp's ``--spec-type`` (default: the
kind the drafter file is for: ``draft-simple``, ``draft-eagle3``, ``draft-mtp`` for a Gemma-4
assistant, ``draft-dflash``, ``draft-dspark``); ``--kind draft-mtp`` without ``--drafter`` runs
the target's own MTP layers. ``--prompts`` takes the held-out prompts of a self-distillation file
(``pyllama_spec.train.data``) instead; tokens/s are then means over the prompts, τ and
acceptance pooled over all verify steps.

``--ngram`` adds llama.cpp's n-gram kinds (all five, or those named) with their default
parameters: ours runs under ``NativeLoopRules`` (the native program's end-of-generation rules),
so besides the tokens, its ``n_predict`` / ``n_drafted`` / ``n_accept`` must equal the program's.
``--no-dflash`` leaves out the DFlash rows (plain decoding stays, as the reference).
"""
from __future__ import annotations

import argparse
import gzip
import json
import platform
import statistics
import time

import pyllama_spec as ps
from pyllama_spec.assets import random_dflash_for_smollm2, smollm2_path
from pyllama_spec.native import NativeLoopRules, run_completion, run_speculative_simple
from pyllama_spec.speculative.drafters import create_drafter, drafter_kind_of_file
from pyllama_spec.speculative.stats import SpecStats

CHAT = [{"role": "user", "content": "Write a JavaScript debounce function."}]
NGRAM_KINDS = ["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"]


def compare_ngram(gen, target, prompts, kind, a, pieces) -> dict:
    """One n-gram kind, ours (under the native loop's rules) against llama-speculative-simple."""
    nat_rates, our_rates, n_same, n_counts = [], [], 0, 0
    stats = SpecStats(n_max=create_drafter(kind, None).n_max_limit)
    for text, toks in prompts:
        native, ours, same, counts = [], [], True, True
        for _ in range(a.runs):
            d = create_drafter(kind, gen.ctx)
            nat = run_speculative_simple(target, None, text, n_predict=a.max_tokens, n_ctx=a.n_ctx,
                                         n_gpu_layers=a.n_gpu_layers, spec_type=d.native_type, extra=d.native_args())
            rules = NativeLoopRules(d, n_prompt=len(toks), n_predict=a.max_tokens, n_ctx=a.n_ctx)
            gen.drafters["_rules"] = rules
            r = gen.generate(prompt_tokens=toks, drafter="_rules", n_max=rules.n_max_limit,
                             max_tokens=a.max_tokens + 1 + rules.n_max_limit, sync_stages=False)
            del gen.drafters["_rules"]
            c = rules.counters(r.n_committed, r.finish_reason == "eos")
            native.append(nat.decode_tokens_per_s)
            ours.append(r.tokens_per_s)
            expected = pieces(toks) + pieces(r.tokens[:c["n_predict"]])
            out = nat.stdout.lstrip(b"\n")
            same &= out.startswith(expected) and not out[len(expected):].strip(b"\n")
            counts &= c == {"n_predict": nat.n_predict, "n_drafted": nat.n_drafted, "n_accept": nat.n_accept}
        n_same += same
        n_counts += counts
        stats.merge(r.stats)
        nat_rates.append(statistics.median(native))
        our_rates.append(statistics.median(ours))
    row = {"kind": kind, "native_tok_s": statistics.mean(nat_rates), "ours_tok_s": statistics.mean(our_rates),
           "acceptance": stats.acceptance_rate, "tau": stats.mean_accepted_length, "n_prompts": len(prompts),
           "identical_prompts": n_same, "same_counters_prompts": n_counts,
           "identical": n_same == len(prompts) and n_counts == len(prompts)}
    row["ratio"] = row["ours_tok_s"] / row["native_tok_s"]
    print(f"{kind:<14} native {row['native_tok_s']:8.1f} tok/s   ours {row['ours_tok_s']:8.1f} tok/s   "
          f"ours/native {row['ratio']:.3f}   τ {row['tau']:.2f}  acc {100 * row['acceptance']:.1f}%   "
          f"identical tokens: {n_same}/{len(prompts)}, counters: {n_counts}/{len(prompts)} prompts", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target")
    ap.add_argument("--drafter")
    ap.add_argument("--kind", help="drafter kind, llama.cpp's --spec-type (default: from the drafter file)")
    ap.add_argument("--n-max", type=int, nargs="+", default=[1, 4, 7])
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=99)
    ap.add_argument("-c", "--n-ctx", type=int, default=2048)
    ap.add_argument("--json", help="also write the numbers here")
    ap.add_argument("--prompts", help="self-distillation JSON lines: use their held-out prompts")
    ap.add_argument("--n-prompts", type=int, default=20)
    ap.add_argument("--ngram", nargs="*", metavar="KIND", help="also compare these n-gram kinds (none named: all five)")
    ap.add_argument("--no-dflash", action="store_true",
                    help="leave out the model-drafter rows (plain decoding and --ngram stay)")
    a = ap.parse_args()
    target = a.target or str(smollm2_path())
    own_mtp = a.kind == "draft-mtp" and not a.drafter  # the target's own MTP layers: no file
    drafter = None if own_mtp or a.no_dflash else (a.drafter or str(random_dflash_for_smollm2()))
    kind = a.kind or (drafter_kind_of_file(drafter) if drafter else "draft-dflash")
    spec = (kind, {} if own_mtp else {"path": drafter, "n_gpu_layers": a.n_gpu_layers})
    gen = ps.Generator(target, drafters={} if a.no_dflash else {kind: spec}, n_ctx=a.n_ctx,
                       n_gpu_layers=a.n_gpu_layers)
    vocab = gen.model.vocab
    if a.prompts:
        with (gzip.open(a.prompts, "rt") if a.prompts.endswith(".gz") else open(a.prompts)) as f:
            held = [json.loads(x) for x in f]
        texts = [vocab.detokenize(d["prompt_tokens"], unparse_special=True) for d in held
                 if d["split"] == "heldout"][:a.n_prompts]
    else:
        texts = [vocab.detokenize(gen.tokenize_prompt(messages=CHAT), unparse_special=True)]
    # the native programs tokenize the text with special tokens parsed: so do we
    prompts = [(t, vocab.tokenize(t, add_special=True, parse_special=True)) for t in texts]
    gen.generate(prompt_tokens=prompts[0][1], max_tokens=16)  # warm-up

    def pieces(tokens):
        return b"".join(vocab.token_to_piece(t, special=True) for t in tokens)

    rows = []
    configs = [0] if a.no_dflash else [0, *a.n_max]
    for n_max in configs:
        nat_rates, free_rates, sync_rates, eval_rates = [], [], [], []
        stats = SpecStats(n_max=max(n_max, 1))
        n_same = 0
        for text, toks in prompts:
            native, ours_free, ours_sync, native_eval = [], [], [], []
            same = True
            for _ in range(a.runs):
                if n_max == 0:
                    nat = run_completion(target, text, n_predict=a.max_tokens, n_ctx=a.n_ctx,
                                         n_gpu_layers=a.n_gpu_layers)
                else:
                    nat = run_speculative_simple(target, drafter, text, n_max=n_max, n_predict=a.max_tokens,
                                                 n_ctx=a.n_ctx, n_gpu_layers=a.n_gpu_layers, spec_type=kind)
                native.append(nat.decode_tokens_per_s)  # wall clock after the prompt, as ours
                native_eval.append(nat.eval_tokens_per_s or nat.decode_tokens_per_s)
                name = None if n_max == 0 else kind
                r = gen.generate(prompt_tokens=toks, drafter=name, n_max=n_max or None, max_tokens=a.max_tokens,
                                 sync_stages=False)
                ours_free.append(r.tokens_per_s)
                rs = gen.generate(prompt_tokens=toks, drafter=name, n_max=n_max or None, max_tokens=a.max_tokens,
                                  sync_stages=True)
                ours_sync.append(rs.tokens_per_s)
                ours_bytes = pieces(r.tokens) if n_max == 0 else pieces(r.prompt_tokens) + pieces(r.tokens)
                out = nat.stdout if n_max == 0 else nat.stdout.lstrip(b"\n")
                same &= out.startswith(ours_bytes) and r.tokens == rs.tokens
            n_same += same
            if n_max:
                stats.merge(r.stats)
            nat_rates.append(statistics.median(native))
            free_rates.append(statistics.median(ours_free))
            sync_rates.append(statistics.median(ours_sync))
            eval_rates.append(statistics.median(native_eval))
        # llama-completion's own "eval time" rate leaves out sampling and the host's work between decodes
        # (NativeRun.eval_tokens_per_s): kept beside the wall-clock rate that the ratio uses
        row = {"n_max": n_max, "native_tok_s": statistics.mean(nat_rates),
               "native_eval_only_tok_s": statistics.mean(eval_rates), "ours_tok_s": statistics.mean(free_rates),
               "ours_sync_tok_s": statistics.mean(sync_rates), "n_prompts": len(prompts),
               "acceptance": stats.acceptance_rate if n_max else None,
               "tau": stats.mean_accepted_length if n_max else None,
               "accepted_per_position": stats.accepted_per_position if n_max else None,
               "identical": n_same == len(prompts), "identical_prompts": n_same}
        row["ratio"] = row["ours_tok_s"] / row["native_tok_s"]
        rows.append(row)
        # (plain: llama-completion prefills the prompt in one batch, we split off its last token: the tokens are
        # equal up to near-ties, run_completion's docstring)
        tau = (f"τ {row['tau']:.2f}  acc {100 * row['acceptance']:.1f}%" if n_max else
               f"plain (llama-completion's eval-only rate {row['native_eval_only_tok_s']:.1f} tok/s: "
               f"ours/that {row['ours_tok_s'] / row['native_eval_only_tok_s']:.3f}; tokens equal up to near-ties)")
        print(f"n_max={n_max:<3} native {row['native_tok_s']:8.1f} tok/s   ours {row['ours_tok_s']:8.1f} tok/s "
              f"(sync {row['ours_sync_tok_s']:8.1f})   ours/native {row['ratio']:.3f}   "
              f"{tau}   identical tokens: {n_same}/{len(prompts)} prompts", flush=True)
    plain = rows[0]
    for row in rows[1:]:
        print(f"n_max={row['n_max']}: {kind} / plain = {row['ours_tok_s'] / plain['ours_tok_s']:.2f} (ours), "
              f"{row['native_tok_s'] / plain['native_tok_s']:.2f} (native)")
    ngram_rows = [compare_ngram(gen, target, prompts, k, a, pieces) for k in
                  ([] if a.ngram is None else a.ngram or NGRAM_KINDS)]
    for row in ngram_rows:
        print(f"{row['kind']}: n-gram / plain = {row['ours_tok_s'] / plain['ours_tok_s']:.2f} (ours), "
              f"{row['native_tok_s'] / plain['native_tok_s']:.2f} (native)")
    info = {"date": time.strftime("%Y-%m-%d"), "host": platform.node(), "system": ps.system_info(),
            "devices": ps.devices(), "target": target, "drafter": drafter, "kind": kind, "max_tokens": a.max_tokens,
            "runs": a.runs, "prompts": a.prompts or "chat", "n_gpu_layers": a.n_gpu_layers, "rows": rows,
            "ngram_rows": ngram_rows}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(info, f, indent=2)
    gen.close()


if __name__ == "__main__":
    main()
