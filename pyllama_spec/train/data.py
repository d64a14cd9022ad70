"""Training prompts that need no download, answered by the target itself.

Prompts come from two sources:

* instructions built from templates of our own — coding tasks in several languages, how-to
  questions, explanations of code, explanations, rewrites, short writing tasks — as chat messages;
* plain-text continuation of source files found on this machine (the Python standard
  library, recursively), cut into chunks.

The target answers every prompt greedily (T = 0) through our bindings: the drafter learns what
the target says, which is exactly what acceptance measures. Many prompts are answered at once
(one KV-cache stream per prompt, one ``llama_decode`` per step for all of them); with
``n_parallel=1`` each prompt goes through :class:`pyllama_spec.Generator` instead. Batched and
single-prompt decoding give the same tokens up to near-ties (llama.cpp's logits depend on the
batch shape). A deterministic split by prompt hash keeps held-out prompts that training never sees.

    python -m pyllama_spec.train.data TARGET.gguf OUT.jsonl [--n-chat 600] [--n-code 200] [--parallel 64]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sysconfig
import time
from collections import deque
from collections.abc import Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..model import Model

#: a chat: ``[{"role": "user", "content": ...}]``
Messages = list[dict[str, str]]

LANGS = ["Python", "JavaScript", "TypeScript", "C", "C++", "Rust", "Go", "Java", "Bash", "SQL", "Ruby", "Kotlin"]
TASKS = [
    "a function that reverses a string", "a debounce function", "a throttle function",
    "binary search over a sorted array",
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


HOWTO = ["read a JSON file", "sort a dictionary by value", "reverse a list", "make an HTTP request",
         "handle exceptions", "write a unit test", "read environment variables", "parse command-line arguments",
         "format a date", "split a string by commas", "check if a file exists", "measure how long code takes",
         "generate a random number", "remove whitespace from a string", "convert a string to an integer",
         "iterate over a dictionary", "create a class with a constructor", "use a regular expression",
         "write to a file", "concatenate two arrays", "find the maximum of a list", "run code in parallel",
         "define an enum", "copy an object", "compare two strings ignoring case", "pad a number with zeros",
         "sleep for one second", "log messages", "connect to a SQLite database", "read input from the user"]
GENRES = ["a short poem", "a haiku", "a short story", "a limerick", "a product description", "a tweet",
          "a motivational quote", "a short dialogue", "a riddle", "a two-sentence horror story"]
SUBJECTS = ["the ocean", "a lost robot", "autumn leaves", "a cup of coffee", "a programmer at midnight", "the moon",
            "a friendly dragon", "city traffic", "a rainy Monday", "a cat that learns to code", "mountains",
            "the first day of school", "a broken umbrella", "time travel", "a small bakery", "the stars"]
EMAILS = ["your manager asking for a day off", "a customer apologizing for a late delivery",
          "a colleague asking for feedback on a document", "a landlord about a broken heater",
          "a teacher asking about homework", "the team announcing a new release", "a friend inviting them to dinner",
          "a client following up on an invoice"]
LISTS = ["tips for learning a new programming language", "healthy breakfast ideas", "ways to save money",
         "reasons to write tests", "books for beginners in programming", "ways to improve sleep",
         "common mistakes in Python", "ideas for a weekend project", "questions to ask in a job interview",
         "benefits of exercise", "ways to reduce stress", "features of a good API"]
QA = ["Why is the sky blue?", "How does a computer store numbers?", "What causes the seasons?",
      "How do vaccines work?", "Why do we need sleep?", "How does a car engine work?", "What is DNA?",
      "How do airplanes fly?", "What is the capital of France and why is it famous?", "How do rainbows form?",
      "What is machine learning?", "How does email work?", "What is a prime number?", "How do plants grow?",
      "Why is exercise important?", "What is the speed of light?", "How does the stock market work?",
      "What is climate change?", "How do magnets work?", "What is an algorithm?"]
CODE_ASK = ["Explain what this code does:", "Find a possible bug in this code:", "Add comments to this code:",
            "Rewrite this code to be more readable:", "Write a unit test for this code:"]


def chat_prompts(n: int, seed: int = 0, snippets: Sequence[str] | None = None) -> list[Messages]:
    """``n`` distinct chat prompts (``[{"role": "user", "content": ...}]``) from the templates;
    ``snippets`` (source code strings) feed the explain / review templates."""
    rng = random.Random(seed)
    out: list[Messages] = []
    seen: set[str] = set()
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 50 * n + 1000:
            raise ValueError(f"the templates give fewer than {n} distinct chat prompts ({len(out)})")
        kind = rng.random()
        if kind < 0.40:
            text = f"{rng.choice(VERBS)} {rng.choice(TASKS)} in {rng.choice(LANGS)}.{rng.choice(FOLLOWUPS)}"
        elif kind < 0.52:
            text = f"How do I {rng.choice(HOWTO)} in {rng.choice(LANGS)}?{rng.choice(FOLLOWUPS)}"
        elif kind < 0.64:
            x, y = rng.sample(TOPICS, 2)
            text = rng.choice(EXPLAIN).format(x=x, y=y)
        elif kind < 0.70:
            text = rng.choice(QA) + rng.choice(["", " Answer briefly.", " Explain it to a child.", " Give details."])
        elif kind < 0.77:
            text = f"Write {rng.choice(GENRES)} about {rng.choice(SUBJECTS)}."
        elif kind < 0.82:
            text = f"Write an email to {rng.choice(EMAILS)}.{rng.choice(['', ' Keep it polite.', ' Make it short.'])}"
        elif kind < 0.87:
            text = f"Give me {rng.randint(3, 10)} {rng.choice(LISTS)}."
        elif kind < 0.92:
            text = rng.choice(REWRITES).format(s=rng.choice(SENTENCES))
        elif snippets:
            text = f"{rng.choice(CODE_ASK)}\n\n```python\n{rng.choice(snippets)}\n```"
        else:
            continue
        if text not in seen:
            seen.add(text)
            out.append([{"role": "user", "content": text}])
    return out


def source_files(root: str | os.PathLike | None = None) -> list[Path]:
    """The ``.py`` files under ``root`` (default: this Python's standard library), sorted."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    return sorted(f for f in base.rglob("*.py") if "site-packages" not in f.parts)


def code_prompts(n: int, seed: int = 0, chunk_chars: int = 600, root: str | os.PathLike | None = None) -> list[str]:
    """``n`` plain-text prompts: chunks of source files (several per file, starting at a line)."""
    rng = random.Random(seed)
    files = source_files(root)
    rng.shuffle(files)
    texts: list[str] = []
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if len(text) >= 3 * chunk_chars:
            texts.append(text)
        if len(texts) >= n:
            break
    out: list[str] = []
    seen: set[str] = set()
    for _ in range(20 * n):
        if len(out) >= n or not texts:
            break
        text = texts[len(out) % len(texts)]
        start = rng.randrange(0, len(text) - chunk_chars)
        start = text.rfind("\n", 0, start) + 1
        chunk = text[start:start + chunk_chars]
        if chunk.strip() and chunk not in seen:
            seen.add(chunk)
            out.append(chunk)
    return out


def code_snippets(n: int, seed: int = 1, max_lines: int = 14, root: str | os.PathLike | None = None) -> list[str]:
    """``n`` short function bodies from source files, for the explain / review chat templates."""
    rng = random.Random(seed)
    out: list[str] = []
    for f in source_files(root):
        try:
            lines = f.read_text(encoding="utf-8").splitlines()
        except (UnicodeDecodeError, OSError):
            continue
        starts = [i for i, ln in enumerate(lines) if ln.startswith("def ")]
        if starts:
            i = rng.choice(starts)
            body = [lines[i]] + [ln for ln in lines[i + 1:i + max_lines] if ln.startswith((" ", "\t")) or not ln]
            out.append("\n".join(body).rstrip())
    rng.shuffle(out)
    return out[:n]


def split_of(key: str, held_out: float = 0.1) -> str:
    """Deterministic train/held-out assignment of a prompt (by hash)."""
    h = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "heldout" if h < held_out else "train"


def prompt_items(n_chat: int, n_code: int, seed: int = 0) -> list[tuple[str, Messages | str]]:
    """The prompts of a data set: ``[(kind, chat messages | text)]`` in a fixed, shuffled order
    (so that a run cut short still has both kinds)."""
    chats = chat_prompts(n_chat, seed, snippets=code_snippets(400, seed + 1))
    items: list[tuple[str, Messages | str]] = [("chat", m) for m in chats]
    items += [("code", t) for t in code_prompts(n_code, seed)]
    random.Random(seed).shuffle(items)
    return items


@dataclass
class _Stream:
    """One KV-cache stream of :func:`answer_batched`: whose answer it computes and how far it is."""
    index: int  # of the prompt
    pos: int  # next position
    answer: list[int]
    rng: np.random.Generator | None = None  # of a sampled (T > 0) answer


def sample_rows(logits: np.ndarray, temperatures: Sequence[float], rngs: Sequence[np.random.Generator | None], *,
                min_p: float = 0.0) -> np.ndarray:
    """One token per row of ``logits`` ``(n_rows, n_vocab)``: argmax where the row's temperature is
    0 (or its generator None), else a draw from the softmax at that temperature, cut to the
    tokens whose probability is at least ``min_p`` times the best one's (min-p sampling, Nguyen et
    al. 2024, arXiv 2407.01082). Returns ``(n_rows,)`` int64.

    Each sampled row takes one uniform from its own generator and is searched by inverse CDF in
    two levels (:func:`pyllama_spec.speculative.sampling.sample_rows`), so a prompt's draw does not
    depend on which other prompts share its batch. Why not the Gumbel-max trick this used before:
    it draws ``n_vocab`` Gumbel variates per row and step — 182 ms a step for 192 rows of 49 152 on
    one core, which held the H200's answer regeneration to ≈ 1 k tok/s (RESULTS.md 15.2)."""
    out = logits.argmax(axis=1).astype(np.int64)
    rows = [r for r, (t, g) in enumerate(zip(temperatures, rngs)) if t > 0 and g is not None]
    if not rows:
        return out
    inv_t = np.array([1.0 / temperatures[r] for r in rows], dtype=np.float32)
    u = np.array([rngs[r].random() for r in rows])  # type: ignore[union-attr]
    # row chunks on threads (numpy's ufuncs release the GIL): a GPU host's cores share the
    # exp over (rows, n_vocab); each row's draw is the same whatever the chunking
    chunks = [slice(a, a + _SAMPLE_CHUNK) for a in range(0, len(rows), _SAMPLE_CHUNK)]
    idx = np.asarray(rows)

    def run(c: slice) -> np.ndarray:
        return _draw_tempered(logits[idx[c]], inv_t[c], u[c], min_p)

    if len(chunks) == 1 or (os.cpu_count() or 1) == 1:
        got = [run(c) for c in chunks]
    else:
        with ThreadPoolExecutor(min(len(chunks), os.cpu_count() or 1)) as ex:
            got = list(ex.map(run, chunks))
    out[rows] = np.concatenate(got)
    return out


_SAMPLE_CHUNK = 16  # rows per thread task of sample_rows


def _draw_tempered(z: np.ndarray, inv_t: np.ndarray, u: np.ndarray, min_p: float) -> np.ndarray:
    """Rows of logits ``z`` ``(n, V)`` drawn at temperatures ``1 / inv_t`` with uniforms ``u``."""
    from ..speculative.sampling import sample_rows as draw

    p = np.asarray(z, dtype=np.float32)
    p = p - p.max(axis=1, keepdims=True)
    p *= inv_t[:, None]
    np.exp(p, out=p)  # the best token's weight is 1, so min-p compares against min_p itself
    if min_p > 0:
        p[p < np.float32(min_p)] = 0.0
    return draw(None, p, None, uniforms=u)


def answer_batched(model: Model, prompts: Sequence[Sequence[int]], *, max_tokens: int, n_parallel: int = 64,
                   n_batch: int = 2048, progress: bool = True, temperatures: Sequence[float] | None = None,
                   seed: int = 0, seeds: Sequence[int] | None = None, min_p: float = 0.0,
                   n_threads: int | None = None, backend_sampling: bool | None = None,
                   timing: dict[str, float] | None = None,
                   fill_gaps: bool | None = None) -> Generator[tuple[int, list[int], bool], None, None]:
    """Answers to many prompts at once: one KV-cache stream per prompt, every step one
    ``llama_decode`` that feeds the last token of each running answer and the prompts of newly
    started ones. Yields ``(index, answer_tokens, ended_by_eog)`` in completion order;
    ``answer_tokens`` include the end-of-generation token when one ended the answer.

    Args:
        temperatures: per prompt (default all 0: greedy); a prompt with T > 0 is sampled by
            :func:`sample_rows` (``min_p``) with ``numpy.random.default_rng([seed, index])``, or
            ``default_rng(seeds[index])``, so a prompt's draws are fixed whatever the batch.
        n_threads: CPU threads of llama.cpp (default: its own; 1 is often faster on a busy CPU).
        backend_sampling: draw greedy answers inside the decode graph (a greedy backend sampler on
            every stream, :meth:`Context.set_sampler`): only one token per row crosses to the host
            instead of the ``(rows, n_vocab)`` logits, and no host argmax runs. Default (None): on
            when every temperature is 0. It needs all temperatures 0 (sampled rows keep the host
            draw, whose per-prompt generator the backend's per-stream seed cannot reproduce).
        fill_gaps: give every idle stream (no prompt left for it, or not started yet) a dummy row a
            step, so that each decode's rows name every stream 0..n_parallel-1 in order. Why: with
            per-stream KV cells llama.cpp splits a batch into ubatches of *consecutive* sequence ids
            (``llama_batch_allocr::split_equal``, sequential), so every idle stream between two running
            ones starts another ubatch, i.e. another pass over the whole model: on the H200 45 rows of
            scattered streams took 53.5 ms a step (RESULTS.md 15.2). A dummy row is the BOS token at
            cell 0 of the idle stream (a finished stream is emptied), without an output row, removed
            after the decode: it costs compute but not another pass. Default (None): on when the
            model runs on a GPU (``model.devices``), where rows are nearly free; off on the CPU,
            where they cost as much as real ones.
        timing: a dict that this adds to as it runs (seconds, counts): ``steps``, ``rows`` (output
            rows), ``dummy_rows`` (fill_gaps), ``prompt_tokens``, ``decode_s`` (``llama_decode``),
            ``draw_s`` (the tokens from the graph, or the logits copied and argmax / draw on the
            host) and ``host_s`` (the rest: building batches, bookkeeping, and the caller's work
            between answers).

    Raises:
        InvalidArgumentError: a prompt longer than ``n_batch`` tokens; ``temperatures`` of another length;
            ``backend_sampling=True`` with a temperature above 0.
    """
    import pyllama_spec as ps

    from ..errors import InvalidArgumentError

    if not prompts:
        return
    if temperatures is not None and len(temperatures) != len(prompts):
        raise InvalidArgumentError(f"temperatures has {len(temperatures)} values for {len(prompts)} prompts")
    temps = [0.0] * len(prompts) if temperatures is None else [float(t) for t in temperatures]
    longest = max(len(p) for p in prompts)
    if longest > n_batch:
        raise InvalidArgumentError(f"a prompt of {longest} tokens exceeds n_batch={n_batch}; shorten it")
    greedy_only = all(t <= 0 for t in temps)
    if backend_sampling is None:
        backend_sampling = greedy_only
    elif backend_sampling and not greedy_only:
        raise InvalidArgumentError("backend_sampling needs every temperature 0: answer sampled prompts in a "
                                   "separate call with backend_sampling=False")
    n_parallel = max(1, min(n_parallel, len(prompts)))
    if fill_gaps is None:
        fill_gaps = bool(model.devices)
    per_seq = -(-(longest + max_tokens + 1) // 256) * 256  # llama.cpp pads n_ctx to 256: keep it divisible
    # room for the longest prompt beside one row of every other stream, so that any prompt can start
    n_batch_ctx = max(n_batch, longest + n_parallel)
    ctx = ps.Context(model, n_ctx=n_parallel * per_seq, n_batch=n_batch_ctx, n_ubatch=min(n_batch, 512),
                     n_seq_max=n_parallel, n_threads=n_threads, n_threads_batch=n_threads)
    if backend_sampling:
        # why: with 256 streams of a 49 152-token vocabulary the host's copy and argmax of the logits
        # (50 MB a step) cost more than the decode itself on a GPU (RESULTS.md 15.1)
        from ..sampler import SamplerChain

        for k in range(n_parallel):
            ctx.set_sampler(SamplerChain(), k)
    vocab = model.vocab
    queue = deque(range(len(prompts)))
    slots: list[_Stream | None] = [None] * n_parallel  # per KV-cache stream
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(prompts), desc="self-distillation", unit="prompt")
    pad = vocab.bos if vocab.bos is not None else 0
    dummy: list[int] = []  # streams given a dummy row this step
    tm = timing if timing is not None else {}
    for part in ("steps", "rows", "dummy_rows", "prompt_tokens", "decode_s", "draw_s", "host_s"):
        tm.setdefault(part, 0.0)
    clock = time.perf_counter
    t_last = clock()
    try:
        while queue or any(s is not None for s in slots):
            toks: list[int] = []
            pos: list[int] = []
            seq: list[int] = []
            flags: list[int] = []
            owners: list[tuple[int, _Stream]] = []  # (stream id, stream) of each output row
            # rows the streams after k will add (one each: running, or a dummy with fill_gaps): a prompt is
            # admitted only if they still fit in the batch after it
            after = [0] * n_parallel
            for k in range(n_parallel - 2, -1, -1):
                after[k] = after[k + 1] + (slots[k + 1] is not None or fill_gaps)
            admit = True
            # streams in id order, each with its running answer's token, a new prompt, or (fill_gaps) a
            # dummy row: the order llama.cpp needs to keep all streams in one ubatch (docstring)
            for k in range(n_parallel):
                st = slots[k]
                if st is not None:
                    toks.append(st.answer[-1])
                    pos.append(st.pos)
                    seq.append(k)
                    flags.append(1)
                    owners.append((k, st))
                    st.pos += 1
                    continue
                if admit and queue:
                    p = prompts[queue[0]]
                    if len(toks) + len(p) + after[k] <= n_batch_ctx:
                        i = queue.popleft()
                        toks.extend(p)
                        pos.extend(range(len(p)))
                        seq.extend([k] * len(p))
                        flags.extend([0] * (len(p) - 1) + [1])
                        slots[k] = new = _Stream(i, len(p), [],
                                                 None if temps[i] <= 0 else
                                                 np.random.default_rng([seed, i] if seeds is None else seeds[i]))
                        owners.append((k, new))
                        continue
                    admit = False  # prompts start in order: this one waits for the next step, and so do the rest
                if fill_gaps:  # an empty stream's cell 0, removed after the decode
                    dummy.append(k)
                    toks.append(pad)
                    pos.append(0)
                    seq.append(k)
                    flags.append(0)
            t0 = clock()
            ctx.decode(toks, np.asarray(pos), seq_id=np.asarray(seq), logits=np.asarray(flags))
            for k in dummy:
                ctx.memory.seq_rm(k)
            t1 = clock()
            nxt: Sequence[int] | np.ndarray
            if backend_sampling:
                nxt = ctx.sampled_tokens()
            elif any(temps[st.index] > 0 for _, st in owners):
                nxt = sample_rows(ctx.logits(), [temps[st.index] for _, st in owners], [st.rng for _, st in owners],
                                  min_p=min_p)
            else:
                nxt = ctx.logits().argmax(axis=1)
            t2 = clock()
            n_running = sum(1 for _, st in owners if st.answer)
            tm["steps"] += 1
            tm["rows"] += len(owners)
            tm["dummy_rows"] += len(dummy)
            tm["prompt_tokens"] += len(toks) - n_running - len(dummy)
            tm["host_s"] += t0 - t_last
            tm["decode_s"] += t1 - t0
            tm["draw_s"] += t2 - t1
            dummy.clear()
            t_last = t2
            for row, (k, st) in enumerate(owners):
                t = int(nxt[row])
                st.answer.append(t)
                eog = vocab.is_eog(t)
                if eog or len(st.answer) >= max_tokens:
                    yield st.index, st.answer, eog
                    slots[k] = None
                    ctx.memory.seq_rm(k)  # an empty stream: its next prompt or dummy row starts at cell 0
                    if bar is not None:
                        bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        ctx.close()


def generate(target: str | os.PathLike, out_path: str | os.PathLike, *, n_chat: int = 600, n_code: int = 200,
             max_tokens: int = 256, n_parallel: int = 64, n_ctx: int = 2048, max_prompt_tokens: int = 512,
             n_gpu_layers: int = -1, seed: int = 0, progress: bool = True) -> int:
    """Answer every prompt with the target at T = 0 and write one JSON line per sequence:
    ``{"split", "kind", "key", "prompt_tokens", "answer_tokens"}`` (``answer_tokens`` end with the
    end-of-generation token when the target stopped by itself). Resumes an interrupted file
    (prompts whose key is already there are skipped). ``n_parallel=1``: one prompt at a time
    through :class:`pyllama_spec.Generator`. Returns the number of lines in the file."""
    import pyllama_spec as ps

    items = prompt_items(n_chat, n_code, seed)
    done: set[str | None] = set()
    if Path(out_path).exists():
        kept = []
        with open(out_path) as f:
            for line in f:
                try:
                    done.add(json.loads(line).get("key"))
                    kept.append(line if line.endswith("\n") else line + "\n")
                except json.JSONDecodeError:  # a line cut by a killed run: drop it, answer it again
                    pass
        Path(out_path).write_text("".join(kept))
    gen = ps.Generator(target, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers)
    todo: list[tuple[str, Messages | str, str, list[int]]] = []
    for kind, p in items:
        key = hashlib.sha256(json.dumps(p).encode()).hexdigest()[:16]
        if key in done:
            continue
        toks = gen.tokenize_prompt(prompt=p) if isinstance(p, str) else gen.tokenize_prompt(messages=p)  # code | chat
        todo.append((kind, p, key, toks[:max_prompt_tokens]))
    n = len(done)
    with open(out_path, "a") as f:
        def write(item: tuple[str, Messages | str, str, list[int]], answer: list[int]) -> None:
            kind, p, key, toks = item
            f.write(json.dumps({"split": split_of(json.dumps(p)), "kind": kind, "key": key,
                                "prompt_tokens": toks, "answer_tokens": answer}) + "\n")
            f.flush()  # a run stopped by a time limit leaves whole lines

        if n_parallel <= 1:
            it = todo
            if progress:
                from tqdm import tqdm
                it = tqdm(todo, desc="self-distillation", unit="prompt")
            for item in it:
                r = gen.generate(prompt_tokens=item[3], max_tokens=max_tokens)
                eos = gen.model.vocab.eos
                write(item, r.tokens + ([eos] if r.finish_reason == "eos" and eos is not None else []))
                n += 1
        else:
            for i, answer, _ in answer_batched(gen.model, [t[3] for t in todo], max_tokens=max_tokens,
                                               n_parallel=n_parallel, progress=progress):
                write(todo[i], answer)
                n += 1
    gen.close()
    return n


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("target", help="the target's GGUF")
    ap.add_argument("out", help="JSON lines to write (an existing file is resumed)")
    ap.add_argument("--n-chat", type=int, default=600, help="templated chat instructions")
    ap.add_argument("--n-code", type=int, default=200, help="chunks of standard-library source to continue")
    ap.add_argument("--max-tokens", type=int, default=256, help="longest answer, in tokens")
    ap.add_argument("--parallel", type=int, default=64,
                    help="prompts answered at once (1: one by one through Generator; answers may differ at "
                         "near-ties between settings, llama.cpp not being batch-invariant)")
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=-1, help="target layers on the GPU (-1: all)")
    a = ap.parse_args(argv)
    print(generate(a.target, a.out, n_chat=a.n_chat, n_code=a.n_code, max_tokens=a.max_tokens,
                   n_parallel=a.parallel, n_gpu_layers=a.n_gpu_layers), "sequences written to", a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
