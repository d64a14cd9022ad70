"""pyllama-spec: generate with a drafter and print the stage report, compare drafters side by
side, or describe a model.

    pyllama-spec generate TARGET -d dflash=DRAFTER.gguf --drafter dflash -p "..." [--json]
    pyllama-spec bench TARGET -d dflash=DRAFTER.gguf -d ngram -p "..." --runs 3
    pyllama-spec bakeoff TARGET -d dflash=DRAFTER.gguf -d ngram --n-max 1,2,3,4,7,15,auto \
        --prompts builtin:coding-chat --turns 4 --thinking on,off --temperature 0,0.8 --runs 3 --native --out results/
    pyllama-spec info MODEL.gguf
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import traceback
from typing import Any

from .errors import InvalidArgumentError, PyllamaSpecError


def _drafter_specs(items: list[str] | None) -> dict[str, Any]:
    """``-d`` values → ``Generator`` drafter specs: ``NAME`` (a kind without a file, e.g. ``mtp``),
    ``NAME=PATH`` (the file's architecture picks the kind), ``NAME=KIND:PATH`` (that kind)."""
    from .speculative.drafters import drafter_kinds

    out: dict[str, Any] = {}
    for item in items or []:
        name, _, spec = item.partition("=")
        kind, sep, path = spec.partition(":")
        if sep and kind in drafter_kinds():
            out[name] = (kind, {"path": path})
        else:
            out[name] = spec or name
    return out


def _common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("target", help="target .gguf")
    ap.add_argument("-d", "--add-drafter", action="append", metavar="NAME[=[KIND:]PATH]",
                    help="a drafter: NAME=drafter.gguf (its architecture picks the kind: draft-simple, draft-eagle3, "
                         "draft-mtp, draft-dflash, draft-dspark), NAME=KIND:PATH to name the kind, or a kind without "
                         "a file such as 'mtp' (the target's own MTP layers) or 'ngram'")
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


def _generator(a: argparse.Namespace) -> Any:
    import pyllama_spec as ps

    if a.verbose:
        logging.basicConfig(level=logging.INFO)
        ps.set_llama_log_level(logging.INFO)
    return ps.Generator(a.target, drafters=_drafter_specs(a.add_drafter), n_ctx=a.n_ctx,
                        n_gpu_layers=a.n_gpu_layers)


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
    if a.drafter and a.drafter not in _drafter_specs(a.add_drafter):
        raise InvalidArgumentError(f"--drafter {a.drafter} was not added: pass -d {a.drafter}=PATH.gguf (or -d ngram)")
    configs = _configs(a, a.drafter)
    with _generator(a) as gen:
        res = gen.generate(**_prompt_kwargs(a), max_tokens=a.max_tokens, **configs)
        if a.json:
            print(json.dumps({**res.as_dict(), "memory": gen.memory_report()}, indent=2))
        else:
            print(res.text)
            print()
            print(res.report())
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    if a.runs < 1:
        raise InvalidArgumentError(f"--runs must be ≥ 1, got {a.runs}")
    with _generator(a) as gen:
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
    skipped = _all_kinds(gen) if a.all_kinds else {}
    names = [None, *gen.drafters]
    prompt = _prompt_kwargs(a)
    gen.generate(**prompt, max_tokens=8, **_configs(a, None))  # warm-up
    speeds: dict[str | None, list[float]] = {n: [] for n in names}
    results = {}
    for _ in range(a.runs):  # alternate so drift hits every configuration alike
        for n in names:
            r = gen.generate(**prompt, max_tokens=a.max_tokens, **_configs(a, n))
            speeds[n].append(r.tokens_per_s)
            results[n] = r
    base = statistics.median(speeds[None])
    print(f"{'drafter':<12}{'n_max':>6}{'tok/s':>10}{'× plain':>9}{'accept':>9}{'τ':>7}{'same tokens':>13}")
    for n in names:
        r = results[n]
        med = statistics.median(speeds[n])
        same = r.tokens == results[None].tokens
        print(f"{n or 'none':<12}{r.n_max:>6}{med:>10.1f}{med / base:>9.2f}{100 * r.stats.acceptance_rate:>8.1f}%"
              f"{r.stats.mean_accepted_length:>7.2f}{str(same):>13}")
    for kind, why in skipped.items():
        hint = " (add it with -d NAME=KIND:PATH)" if "path" in why else ""
        print(f"{kind:<12}  not run: {why}{hint}")
    return 0


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
                     n_gpu_layers=a.n_gpu_layers, progress=not a.no_progress, tree=a.tree)
    written = [a.out + "/" + p for p in ("results.json", "results.csv", "REPORT.md")] + (res["outputs"].get("plots")
                                                                                      or [])
    print(f"{len(res['runs'])} generations; wrote {', '.join(written)}")
    for note in res["notes"]:
        print(f"note: {note}")
    for cm in res["cost_models"]:
        think = {True: ", thinking on", False: ", thinking off", None: ""}[cm["thinking"]]
        print(f"{cm['drafter']} (T={cm['temperature']:g}{think}): best n_max measured "
              f"{cm['best_n_max_measured']}, predicted {cm['best_n_max']}")
    return 0


def cmd_info(a: argparse.Namespace) -> int:
    import pyllama_spec as ps

    m = ps.Model(a.model, vocab_only=True)
    print(f"{m.path.name}: arch={m.arch} layers={m.n_layer} n_embd={m.n_embd} heads={m.n_head}/{m.n_head_kv} "
          f"vocab={m.n_vocab} ctx_train={m.n_ctx_train}")
    print(f"layer taps (DFlash/EAGLE-3 target): {m.supports_layer_taps}")
    if m.arch == "dflash":
        print(f"DFlash drafter: target layers {m.info.get('dflash.target_layers')}, block size "
              f"{m.info.get('dflash.block_size', 16)}, mask token {m.info.get('tokenizer.ggml.mask_token_id')}")
    print(f"system: {ps.system_info()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status: 0, 2 for any error of the library or of the
    input (one line on stderr, no traceback), 1 for an unexpected error (a bug: the traceback is
    shown with -v), 130 when interrupted."""
    ap = argparse.ArgumentParser(prog="pyllama-spec", description=(__doc__ or "").split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="generate once and print the stage report")
    _common(g)
    g.add_argument("--drafter", default=None, help="drafter name to use (default: none, plain decoding)")
    g.add_argument("--json", action="store_true", help="print the result as JSON")
    g.set_defaults(fn=cmd_generate)
    b = sub.add_parser("bench", help="every drafter and plain decoding, alternating runs")
    _common(b)
    b.add_argument("--runs", type=int, default=3)
    b.add_argument("--all-kinds", action="store_true",
                   help="also run every registered kind that needs no file, and list the kinds that do")
    b.set_defaults(fn=cmd_bench)
    k = sub.add_parser("bakeoff", help="sweep drafters × n_max × settings; results.json/csv, REPORT.md, plots")
    k.add_argument("target", nargs="?", help="target .gguf")
    k.add_argument("-d", "--add-drafter", action="append", metavar="NAME[=PATH]",
                   help="a drafter: dflash=path/to/drafter.gguf, or a kind without file such as 'ngram' "
                        "(repeatable; any kind the Generator accepts)")
    k.add_argument("--n-max", default="1,2,3,4,7,15", help="draft lengths, comma-separated; 'auto' = chosen per step")
    k.add_argument("--tree", default="", metavar="BUDGETS",
                   help="token-tree node budgets, comma-separated (e.g. 8,16,32): a point per budget at each n_max "
                        "(the depth) for drafters that draft trees (draft-dflash)")
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
    k.add_argument("--no-progress", action="store_true")
    k.add_argument("--seed", type=int, default=0)
    k.add_argument("-c", "--n-ctx", type=int, default=4096)
    k.add_argument("-ngl", "--n-gpu-layers", type=int, default=-1)
    k.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's log")
    k.set_defaults(fn=cmd_bakeoff)
    i = sub.add_parser("info", help="describe a GGUF model")
    i.add_argument("model")
    i.set_defaults(fn=cmd_info)
    a = ap.parse_args(argv)
    try:
        return int(a.fn(a))
    except (PyllamaSpecError, OSError) as exc:
        print(f"pyllama-spec: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pyllama-spec: interrupted", file=sys.stderr)
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
