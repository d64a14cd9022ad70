"""Training prompts that need no download, answered by the target itself.

Prompts come from two sources:

* instructions built from templates of our own — coding tasks in several languages,
  explanations, rewrites — as chat messages;
* plain-text continuation of source files found on this machine (the Python standard
  library), cut into chunks.

The target answers every prompt greedily (T = 0) through :class:`pyllama_spec.Generator`:
the drafter learns what the target says, which is exactly what acceptance measures.
A deterministic split keeps held-out prompts that training never sees.

    python -m pyllama_spec.train.data TARGET.gguf OUT.jsonl [--n-chat 600] [--n-code 200]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import sysconfig
from pathlib import Path

LANGS = ["Python", "JavaScript", "TypeScript", "C", "C++", "Rust", "Go", "Java", "Bash", "SQL", "Ruby", "Kotlin"]
TASKS = [
    "a function that reverses a string", "a debounce function", "a throttle function", "binary search over a sorted array",
    "a function that checks whether a number is prime", "FizzBuzz", "a linked list with push and pop",
    "a function that merges two sorted lists", "quicksort", "a function that counts word frequencies in a text",
    "a stack class", "a queue implemented with two stacks", "a function that flattens a nested list",
    "a function that parses a CSV line", "a simple HTTP GET request", "a function that computes Fibonacci numbers",
    "a memoize helper", "a function that validates an email address", "a deep clone function",
    "a function that finds the longest common prefix", "an LRU cache", "a function that removes duplicates from a list",
    "a retry helper with exponential backoff", "a function that converts Celsius to Fahrenheit",
    "a function that reads a file line by line", "matrix multiplication", "a function that checks balanced parentheses",
    "a binary tree with insert and in-order traversal", "a function that groups items by a key",
    "a command-line argument parser", "a function that computes the factorial of n", "a palindrome check",
    "a rate limiter", "an event emitter", "a function that chunks an array into groups of n",
]
VERBS = ["Write", "Implement", "Show me", "Create", "Give me"]
FOLLOWUPS = ["", " Add comments.", " Include a short usage example.", " Keep it short.", " Explain how it works.",
             " Add type annotations.", " Handle edge cases."]
EXPLAIN = ["What is {x}?", "Explain {x} in simple terms.", "What is the difference between {x} and {y}?",
           "When should I use {x}?", "Give three tips about {x}."]
TOPICS = ["a hash map", "recursion", "a closure", "an API", "Big-O notation", "a race condition", "garbage collection",
          "a REST API", "unit testing", "version control", "a database index", "caching", "asynchronous code",
          "a pointer", "an interface", "dependency injection", "a mutex", "a promise", "a generator", "a lambda",
          "photosynthesis", "gravity", "the water cycle", "inflation", "a neural network", "the internet",
          "a compiler", "an operating system", "encryption", "a black hole"]
REWRITES = ["Rewrite this sentence to be more formal: {s}", "Summarize in one sentence: {s}",
            "Translate to simple English: {s}", "Fix the grammar: {s}", "Make this more concise: {s}"]
SENTENCES = ["the meeting got moved to thursday because half the team was out sick",
             "our app crashes sometimes when users upload big images and nobody knows why",
             "I think we should refactor the payment module before adding new features",
             "the weather was nice so we decided to walk to the park instead of taking the bus",
             "please remember to update the documentation whenever you change the API",
             "the new release fixes several bugs and makes the startup time faster"]


def chat_prompts(n: int, seed: int = 0) -> list:
    """``n`` distinct chat prompts (``[{"role": "user", "content": ...}]``) from the templates."""
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        kind = rng.random()
        if kind < 0.6:
            text = f"{rng.choice(VERBS)} {rng.choice(TASKS)} in {rng.choice(LANGS)}.{rng.choice(FOLLOWUPS)}"
        elif kind < 0.85:
            x, y = rng.sample(TOPICS, 2)
            text = rng.choice(EXPLAIN).format(x=x, y=y)
        else:
            text = rng.choice(REWRITES).format(s=rng.choice(SENTENCES))
        if text not in seen:
            seen.add(text)
            out.append([{"role": "user", "content": text}])
    return out


def code_prompts(n: int, seed: int = 0, chunk_chars: int = 600) -> list:
    """``n`` plain-text prompts: chunks of the Python standard library's source files."""
    rng = random.Random(seed)
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    rng.shuffle(files)
    out = []
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if len(text) < 3 * chunk_chars:
            continue
        start = rng.randrange(0, len(text) - chunk_chars)
        start = text.rfind("\n", 0, start) + 1
        out.append(text[start:start + chunk_chars])
        if len(out) >= n:
            break
    return out


def split_of(key: str, held_out: float = 0.1) -> str:
    """Deterministic train/held-out assignment of a prompt (by hash)."""
    h = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "heldout" if h < held_out else "train"


def generate(target, out_path, *, n_chat: int = 600, n_code: int = 200, max_tokens: int = 256, n_ctx: int = 2048,
             n_gpu_layers: int = -1, progress: bool = True) -> int:
    """Answer every prompt with the target at T = 0 and write one JSON line per sequence:
    ``{"split", "prompt_tokens", "answer_tokens", "kind"}``. Resumes an interrupted file.
    Returns the number of lines."""
    import pyllama_spec as ps

    gen = ps.Generator(target, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers)
    items = [("chat", m) for m in chat_prompts(n_chat)] + [("code", t) for t in code_prompts(n_code)]
    # resumable: the item order is deterministic, so skip what an earlier run already wrote
    done = sum(1 for _ in open(out_path)) if Path(out_path).exists() else 0
    items = items[done:]
    it = items
    if progress:
        from tqdm import tqdm
        it = tqdm(items, desc="self-distillation", unit="prompt")
    n = done
    with open(out_path, "a") as f:
        for kind, p in it:
            kw = {"messages": p} if kind == "chat" else {"prompt": p}
            r = gen.generate(**kw, max_tokens=max_tokens)
            key = json.dumps(p)
            f.write(json.dumps({"split": split_of(key), "kind": kind, "prompt_tokens": r.prompt_tokens,
                                "answer_tokens": r.tokens + ([gen.model.vocab.eos] if r.finish_reason == "eos" else [])})
                    + "\n")
            f.flush()
            n += 1
    gen.close()
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target")
    ap.add_argument("out")
    ap.add_argument("--n-chat", type=int, default=600)
    ap.add_argument("--n-code", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=-1)
    a = ap.parse_args(argv)
    print(generate(a.target, a.out, n_chat=a.n_chat, n_code=a.n_code, max_tokens=a.max_tokens,
                   n_gpu_layers=a.n_gpu_layers), "sequences written to", a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
