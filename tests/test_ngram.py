"""The n-gram family (issue 9): llama.cpp's ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod and
ngram-cache. Weight-free: exact proposals on hand-made histories, the indexed drafters against
line-by-line transcriptions of the native code on random histories, rollback and begin. With the
native programs: our loop equals ``llama-speculative-simple --spec-type <kind>`` token for token,
with the same n_drafted / n_accept, on a tiny fixture and on SmolLM2."""
import shutil
import subprocess

import numpy as np
import pytest

import pyllama_spec as ps
from pyllama_spec.errors import InvalidArgumentError
from pyllama_spec.speculative.drafters import create_drafter, drafter_kinds
from pyllama_spec.speculative.drafters._history import NgramIndex
from pyllama_spec.speculative.drafters.ngram_cache import load_ngram_cache, stl_order
from pyllama_spec.speculative.sampling import SamplingParams
from pyllama_spec.speculative.timing import StageTimer

from . import ngram_reference as ref

KINDS = ["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"]
SP, TIMER = SamplingParams(), StageTimer(sync=False)


def propose(d, last, n_max=None):
    return d.propose(last, len(d.history), n_max or d.n_max_limit, SP, None, TIMER).tokens


def commit(d, last, draft, k):
    """What the loop does after a verify of [last] + draft that accepted k drafts."""
    n_past = len(d.history)
    batch = [last] + draft
    d.observe(batch, np.arange(n_past, n_past + len(batch)), k + 1, TIMER)
    d.on_accept(len(draft), k)
    d.rollback(n_past + k + 1)


def stream(rng, n, vocab, prefix=()):
    """Tokens of a small vocabulary that often copy an earlier span (so lookups hit)."""
    out = list(prefix)
    start = len(out)
    while len(out) < start + n:
        if len(out) > 8 and rng.random() < 0.5:
            span = int(rng.integers(2, 12))
            src = int(rng.integers(0, max(1, len(out) - span)))
            out.extend(out[src:src + span])
        else:
            out.append(int(rng.integers(0, vocab)))
    return out[start:start + n]


def simulate(d, prompt, future, steps, reference=None, n_max_of=None):
    """Drive ``d`` as our loop does (``future`` plays the target); with ``reference``, check every
    draft against it, driven as llama-speculative-simple drives the native code. Returns the drafts."""
    d.begin(prompt[:-1])
    if reference is not None:
        reference.begin(prompt[:-1])
    committed, last, i, drafts, any_draft = list(prompt[:-1]), prompt[-1], 0, [], False
    for step in range(steps):
        n_max = d.n_max_limit if n_max_of is None else n_max_of(step)
        draft = propose(d, last, n_max)
        if reference is not None:
            assert draft == reference.draft(committed, last)[:n_max], (step, committed, last)
        any_draft |= bool(draft)
        k = 0
        while k < len(draft) and draft[k] == future[i + k]:
            k += 1
        commit(d, last, draft, k)
        if reference is not None and any_draft:  # common_speculative_accept needs impl_last
            reference.accept(k)
        committed += [last] + draft[:k]
        assert d.history == committed  # exactly the committed tokens, rejected rows dropped
        last, i = future[i + k], i + k + 1
        drafts.append(draft)
    return drafts


class RefSimple:
    def __init__(self, n, m):
        self.n, self.m = n, m

    def begin(self, prompt):
        pass

    def draft(self, h, last):
        return ref.simple_draft(h, last, self.n, self.m)

    def accept(self, k):
        pass


REFERENCES = [
    *[("ngram-simple", dict(size_n=n, size_m=m), lambda n=n, m=m: RefSimple(n, m))
      for n, m in [(1, 1), (1, 3), (2, 2), (2, 6), (3, 8), (12, 48)]],
    *[("ngram-map-k", dict(size_n=n, size_m=m), lambda n=n, m=m: ref.RefMap(n, m, True, 1))
      for n, m in [(1, 2), (2, 4), (3, 3), (12, 48)]],
    *[("ngram-map-k4v", dict(size_n=n, size_m=m, min_hits=h), lambda n=n, m=m, h=h: ref.RefMap(n, m, False, h))
      for n, m, h in [(1, 2, 1), (2, 3, 1), (1, 1, 3), (3, 4, 2)]],
    *[("ngram-mod", dict(n_match=n, n_max=x, n_min=y), lambda n=n, x=x, y=y: ref.RefMod(n, x, y))
      for n, x, y in [(1, 8, 0), (2, 16, 1), (3, 12, 4), (24, 64, 48)]],
    *[("ngram-cache", dict(n_draft=x), lambda x=x: ref.RefCache(x)) for x in (8, 3)],
]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("kind,kw,make_ref", REFERENCES, ids=[f"{k}-{'-'.join(map(str, kw.values()))}"
                                                              for k, kw, _ in REFERENCES])
def test_drafts_equal_the_native_code_transcribed(kind, kw, make_ref):
    """Random histories of 3..6 symbols (many matches, ties, hash reuse), 60 steps each, with
    the draft cut to a random room now and then, as near the end of a generation."""
    n_drafted = 0
    for seed in range(6):
        rng = np.random.default_rng(seed)
        vocab = 3 + seed % 4
        # a random prompt, or a repeated block (long matches: ngram-mod's default needs 48)
        prompt = stream(rng, int(rng.integers(3, 150)), vocab) if seed < 3 else stream(rng, 50, vocab) * 3
        future = stream(rng, 60 * 70, vocab, prefix=prompt)
        d = create_drafter(kind, None, **kw)
        lim = d.n_max_limit
        cut = (lambda s: lim) if seed % 2 else (lambda s: 1 + s % lim)  # noqa: B023 (used in this iteration)
        drafts = simulate(d, prompt, future, 60, make_ref(), n_max_of=cut)
        n_drafted += sum(map(len, drafts))
    assert n_drafted > 0


# -- exact proposals on hand-made histories -----------------------------------------------------

def begun(kind, history, **kw):
    d = create_drafter(kind, None, **kw)
    d.begin(history)
    return d


def test_simple_copies_after_the_latest_earlier_match():
    assert propose(begun("ngram-simple", [5, 1, 2, 3, 4, 6, 7, 8, 9, 1], size_n=2, size_m=3), 2) == [3, 4, 6]
    # the latest occurrence wins
    assert propose(begun("ngram-simple", [1, 2, 3, 9, 1, 2, 4, 7, 7, 7, 1], size_n=2, size_m=3), 2) == [4, 7, 7]
    # position 0 is never a match (llama.cpp reserves 0 for "none")
    assert propose(begun("ngram-simple", [7, 8, 1, 1, 1, 1, 1, 1, 1, 7], size_n=2, size_m=4), 8) == []
    # a continuation shorter than size_n is not drafted (copy_max < n_draft_min)
    assert propose(begun("ngram-simple", [0, 0, 0, 0, 0, 0, 0, 7, 8, 7], size_n=2, size_m=4), 8) == []
    # ... but one of size_n is
    assert propose(begun("ngram-simple", [0, 0, 0, 0, 0, 0, 7, 8, 5, 7], size_n=2, size_m=4), 8) == [5, 7]
    # nothing before N + M + 2 tokens
    assert propose(begun("ngram-simple", [1, 2, 3, 4, 1], size_n=1, size_m=3), 2) == []
    # the draft is cut to n_max
    assert propose(begun("ngram-simple", [5, 1, 2, 3, 4, 6, 7, 8, 9, 1], size_n=2, size_m=3), 2, n_max=2) == [3, 4]


def test_ngram_is_ngram_simple():
    d = create_drafter("ngram", None)
    assert d.kind == "ngram" and d.native_type == "ngram-simple"
    assert (d.size_n, d.size_m, d.n_max_default) == (12, 48, 48)
    assert propose(begun("ngram", [5, 1, 2, 3, 4, 6, 7, 8, 9, 1], size_n=2, size_m=3), 2) == [3, 4, 6]


def test_map_k_remembers_how_much_was_accepted():
    d = begun("ngram-map-k", [9, 1, 2, 3, 4, 5, 0, 0, 0, 0, 1], size_n=2, size_m=3)
    assert propose(d, 2) == [3, 4, 5]
    d.on_accept(3, 1)
    assert propose(d, 2) == [3]       # at most what was accepted last time from this key
    d.on_accept(1, 0)
    assert propose(d, 2) == []        # llama.cpp keeps n_accepted = 0: the key stays silent
    d.on_accept(0, 0)
    assert propose(d, 2) == []


def test_a_trimmed_draft_taken_whole_does_not_cap_the_key():
    """n_max="auto" verified 1 of the 3 tokens a key proposed and the target took it: the native bookkeeping sees the
    whole draft taken (what the target would have said of the rest is unknown), so the key still drafts 3 — told
    only ``on_accept(1, 1)`` it would be capped at 1 for good. A rejection inside the kept prefix is booked as is."""
    d = begun("ngram-map-k", [9, 1, 2, 3, 4, 5, 0, 0, 0, 0, 1], size_n=2, size_m=3)
    assert propose(d, 2) == [3, 4, 5]
    d.on_trim(3, 1)
    d.on_accept(1, 1)
    assert propose(d, 2) == [3, 4, 5]
    d.on_trim(3, 2)
    d.on_accept(2, 1)  # the second kept token was rejected: the key now says 1
    assert propose(d, 2) == [3]
    d.on_accept(1, 1)  # (no trim this step: as llama.cpp)
    assert propose(d, 2) == [3]


def test_map_k4v_needs_a_clear_favourite_and_copies_the_match():
    h = [5, 1, 7, 8, 1, 7, 8, 1, 7, 8, 1, 9, 9, 3]
    # values after key (1,): (7, 8) three times, (9, 9) once; the match found is the last one:
    # llama.cpp copies what follows the match, not the favourite value
    assert propose(begun("ngram-map-k4v", h, size_n=1, size_m=2), 1) == [9, 9]
    # 1 vs 1: no favourite
    assert propose(begun("ngram-map-k4v", [5, 1, 7, 8, 1, 9, 9, 3, 3, 3, 3], size_n=1, size_m=2), 1) == []
    # min_hits: the first hit of a key does not draft, and at the same length the second lookup
    # reaches the key only through the hash table, which excludes the last start
    d = begun("ngram-map-k4v", h, size_n=1, size_m=2, min_hits=2)
    assert propose(d, 1) == [] and propose(d, 1) == []


def test_mod_follows_the_table_and_respects_n_min():
    h = [1, 2, 3, 4, 1, 2]
    assert propose(begun("ngram-mod", h, n_match=2, n_max=4, n_min=1), 3) == [4, 1, 2, 3]
    assert propose(begun("ngram-mod", h, n_match=2, n_max=6, n_min=1), 3) == [4, 1, 2, 3, 4, 1]
    assert propose(begun("ngram-mod", h, n_match=2, n_max=4, n_min=1), 9) == []
    # the chain (1, 2) -> 3 ... (7, 8) -> 1 breaks at (8, 1) (the last 2-gram is not added yet):
    # 7 tokens, kept only when n_min ≤ 7
    h = [1, 2, 3, 4, 5, 6, 7, 8, 1]
    assert propose(begun("ngram-mod", h, n_match=2, n_max=8, n_min=8), 2) == []
    assert propose(begun("ngram-mod", h, n_match=2, n_max=8, n_min=7), 2) == [3, 4, 5, 6, 7, 8, 1]


def test_mod_adds_new_ngrams_only_in_chunks_of_more_than_32():
    d = begun("ngram-mod", [1, 2, 3, 4], n_match=2, n_max=4, n_min=1)
    for t in [5, 6, 7, 5]:
        commit(d, t, [], 0)
    assert propose(d, 6) == []  # (5, 6) -> 7 is in the history, not yet in the table
    for t in [6, *range(10, 40), 5]:
        commit(d, t, [], 0)
    # more than 32 new tokens: added; the later (5, 6) -> 10 overwrote (5, 6) -> 7
    assert propose(d, 6) == [10, 11, 12, 13]


def test_cache_drafts_from_the_longest_ngram_and_breaks_ties_like_libstdcxx():
    h = [1, 2, 3, 1, 2, 3, 1, 2]
    assert propose(begun("ngram-cache", h), 3) == [1, 2, 3, 1, 2, 3, 1, 2]
    assert propose(begun("ngram-cache", h, n_draft=3), 3) == [1, 2, 3]
    # (1, 2) was followed by 5 and by 6 once each (2 samples, 50 %: enough for a 2-gram); the tie
    # goes to the first in std::unordered_map order: buckets 5 and 6 of 13, the newer bucket first
    assert propose(begun("ngram-cache", [1, 2, 5, 1, 2, 6, 7, 1]), 2)[0] == 6
    assert propose(begun("ngram-cache", [1, 2, 6, 1, 2, 5, 7, 1]), 2)[0] == 5
    # 1 and 14 share bucket 1: the later one is linked first
    assert propose(begun("ngram-cache", [1, 2, 1, 3, 3, 1, 2, 14, 7, 1]), 2)[0] == 14
    assert propose(begun("ngram-cache", [1, 2, 14, 3, 3, 1, 2, 1, 7, 1]), 2)[0] == 1
    # a 1-gram needs 66 %: two followers of 7 once each do not draft
    assert propose(begun("ngram-cache", [7, 1, 7, 2, 9]), 7) == []


def test_cache_learns_only_inside_each_chunk():
    """llama.cpp updates the context cache with the tokens since the last draft only: n-grams
    across chunk edges are never counted."""
    h = [1, 2, 3, 4, 5, 6, 1, 2, 3, 4]
    assert propose(begun("ngram-cache", h), 5)[:2] == [6, 1]  # one chunk: (2, 3, 4, 5) -> 6
    d = begun("ngram-cache", h[:2])
    for t in h[2:]:  # the same history, one token per step
        commit(d, t, propose(d, t), 0)
    assert d.history == h
    assert propose(d, 5) == []


def test_stl_order_matches_libstdcxx():
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    import tempfile
    from pathlib import Path

    src = r"""#include <unordered_map>
#include <cstdio>
int main(){ int n; while (scanf("%d",&n)==1){ std::unordered_map<int,int> m;
  for(int i=0;i<n;i++){int t; scanf("%d",&t); auto it=m.find(t); if(it==m.end()) m.emplace(t,1); else it->second++;}
  const std::unordered_map<int,int> c = m; for (auto & kv : c) printf("%d ", kv.first); printf("\n"); } }"""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "o.cpp").write_text(src)
        subprocess.run([cxx, "-O1", "-o", str(Path(tmp) / "o"), str(Path(tmp) / "o.cpp")], check=True)
        rng = np.random.default_rng(0)
        cases = [rng.integers(0, hi, size=n).tolist() for n, hi in
                 [(1, 5), (2, 30), (13, 20), (14, 20), (30, 300), (60, 1000), (200, 50000), (3000, 100000)] * 5]
        text = "".join(f"{len(c)} {' '.join(map(str, c))}\n" for c in cases)
        out = subprocess.run([str(Path(tmp) / "o")], input=text.encode(), capture_output=True, check=True)
    for c, line in zip(cases, out.stdout.decode().splitlines()):
        assert stl_order(list(dict.fromkeys(c))) == [int(x) for x in line.split()]


def test_static_cache_file(tmp_path):
    """A cache in common_ngram_cache_save's format: the static cache alone drafts (2-gram, ≥ 2
    samples, ≥ 50 %); a malformed file is refused naming the argument."""
    recs = {(4, 5): [(6, 3), (7, 1)], (5, 6): [(8, 2)], (6, 8): [(1, 1)]}
    blob = []
    for ngram, toks in recs.items():
        blob += list(ngram) + [-1] * (4 - len(ngram)) + [len(toks)]
        for t, c in toks:
            blob += [t, c]
    path = tmp_path / "static.bin"
    np.asarray(blob, dtype=np.int32).tofile(path)
    cache = load_ngram_cache(path)
    assert cache[(4, 5)].counts == {6: 3, 7: 1} and cache[(5, 6)].total == 2
    d = begun("ngram-cache", [0, 0, 4], lookup_cache_static=path)
    assert propose(d, 5) == [6, 8]  # (6, 8) has 1 sample only
    assert d.native_args() == ["--lookup-cache-static", str(path)]
    assert d.memory_report()["kv_cache_mib"] == 0 and d.memory_report()["host_mib"] > 0
    (tmp_path / "bad.bin").write_bytes(b"\x01\x00\x00")
    with pytest.raises(InvalidArgumentError, match="lookup_cache_static"):
        create_drafter("ngram-cache", None, lookup_cache_static=tmp_path / "bad.bin")
    with pytest.raises(InvalidArgumentError, match="lookup_cache_dynamic"):
        create_drafter("ngram-cache", None, lookup_cache_dynamic=tmp_path / "missing.bin")


# -- begin, observe, rollback -------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("kind,kw", [("ngram-simple", dict(size_n=2, size_m=5)),
                                     ("ngram-map-k", dict(size_n=2, size_m=4)),
                                     ("ngram-map-k4v", dict(size_n=1, size_m=3)),
                                     ("ngram-mod", dict(n_match=2, n_max=8, n_min=1)), ("ngram-cache", {})])
def test_begin_and_rollback_leave_exactly_the_committed_tokens(kind, kw):
    rng = np.random.default_rng(3)
    prompt = stream(rng, 60, 4)
    future = stream(rng, 4000, 4, prefix=prompt)
    d = create_drafter(kind, None, **kw)
    first = simulate(d, prompt, future, 40)
    # a second generation on the same drafter equals a fresh drafter's
    assert simulate(d, prompt, future, 40) == first
    assert sum(map(len, first)) > 0
    # rollback deep into the history (below what the drafter has read): the drafter then acts as
    # a fresh one begun on the tokens that stay
    cut = len(d.history) // 2
    kept = d.history[:cut]
    d.rollback(cut)
    assert d.history == kept
    fresh = create_drafter(kind, None, **kw)
    fresh.begin(kept)
    for last in [future[0], future[1], future[2]]:
        a, b = propose(d, last), propose(fresh, last)
        assert a == b
        commit(d, last, a, len(a) // 2)
        commit(fresh, last, b, len(b) // 2)
        assert d.history == fresh.history
    # the rejected rows of a verify never reach the history; rollback past the end is a no-op
    n = len(d.history)
    d.observe([7, 7, 7], np.arange(n, n + 3), 1, TIMER)
    d.rollback(n + 5)
    assert d.history[n:] == [7]


def test_index_follows_appends_and_cuts():
    rng = np.random.default_rng(0)
    toks, idx = [], NgramIndex(3)
    for _ in range(300):
        if rng.random() < 0.3 and toks:
            cut = int(rng.integers(0, len(toks)))
            idx.truncate(toks, cut)
            del toks[cut:]
        else:
            toks += rng.integers(0, 4, size=int(rng.integers(1, 6))).tolist()
            idx.extend(toks)
        fresh = NgramIndex(3)
        fresh.extend(toks)
        assert idx.pos == fresh.pos and idx.count == fresh.count


def test_observe_refuses_a_gap():
    d = begun("ngram-simple", [1, 2, 3])
    with pytest.raises(ps.PyllamaSpecError, match="not observed"):
        d.observe([4], np.array([5]), 1, TIMER)


@pytest.mark.parametrize("kind,kw,name", [
    ("ngram-simple", dict(size_n=0), "size_n"), ("ngram-simple", dict(size_m=1025), "size_m"),
    ("ngram-simple", dict(min_hits=0), "min_hits"), ("ngram-map-k", dict(size_n=2.5), "size_n"),
    ("ngram-map-k4v", dict(min_hits=-1), "min_hits"), ("ngram-mod", dict(n_match=0), "n_match"),
    ("ngram-mod", dict(n_max=-1), "n_max"), ("ngram-mod", dict(n_min=2000), "n_min"),
    ("ngram-cache", dict(n_draft=0), "n_draft"), ("ngram", dict(size_n=True), "size_n")])
def test_bad_parameters_name_the_argument(kind, kw, name):
    with pytest.raises(InvalidArgumentError, match=name):
        create_drafter(kind, None, **kw)


def test_every_kind_is_registered_with_llama_cpp_defaults():
    assert set(KINDS) | {"ngram"} <= set(drafter_kinds())
    d = {k: create_drafter(k, None) for k in KINDS}
    assert [d[k].n_max_default for k in KINDS] == [48, 48, 48, 64, 8]
    assert d["ngram-mod"].native_args() == ["--spec-ngram-mod-n-match", "24", "--spec-ngram-mod-n-max", "64",
                                            "--spec-ngram-mod-n-min", "48"]
    assert d["ngram-map-k4v"].native_args()[-2:] == ["--spec-ngram-map-k4v-min-hits", "1"]


# -- in the loop, and against llama-speculative-simple -------------------------------------------

TINY_CONFIGS = [("ngram-simple", dict(size_n=2, size_m=6)), ("ngram-map-k", dict(size_n=2, size_m=4)),
                ("ngram-map-k4v", dict(size_n=1, size_m=3, min_hits=2)),
                ("ngram-mod", dict(n_match=2, n_max=16, n_min=1)),
                ("ngram-cache", {})]
TINY_PROMPTS = ["the cat sat on the mat and looked at the dog; " * 3, "abcabcabcabd abcabcabcabd xyz " * 4]


@pytest.fixture(scope="module")
def tiny_ngram_gen(tiny):
    gen = ps.Generator(tiny["target"], n_ctx=1024, n_batch=128, n_threads=1, n_gpu_layers=0)
    yield gen
    gen.close()


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("kind,kw", TINY_CONFIGS)
def test_greedy_is_lossless(tiny_ngram_gen, kind, kw):
    gen = tiny_ngram_gen
    gen.add_drafter(kind, (kind, kw))
    n_drafted = 0
    try:
        for prompt in TINY_PROMPTS:
            r = gen.generate(prompt, drafter=kind, max_tokens=60)
            assert r.tokens == gen.generate(prompt, max_tokens=60).tokens
            n_drafted += r.stats.n_drafted
    finally:
        del gen.drafters[kind]
    assert n_drafted > 0


def compare_with_native(gen, drafter, text, n_predict, n_ctx=1024, extra=("-t", "1")):
    """Our loop under llama-speculative-simple's end-of-generation rules vs the program."""
    from pyllama_spec.native import NativeLoopRules, run_speculative_simple

    vocab = gen.model.vocab
    toks = vocab.tokenize(text, add_special=True, parse_special=True)
    rules = NativeLoopRules(drafter, n_prompt=len(toks), n_predict=n_predict, n_ctx=n_ctx)
    gen.drafters["_native_rules"] = rules
    try:
        r = gen.generate(prompt_tokens=toks, drafter="_native_rules", n_max=rules.n_max_limit,
                         max_tokens=n_predict + 1 + rules.n_max_limit)
    finally:
        del gen.drafters["_native_rules"]
    ours = rules.counters(r.n_committed, r.finish_reason == "eos")
    nat = run_speculative_simple(gen.model.path, None, text, n_predict=n_predict, n_ctx=n_ctx, n_gpu_layers=0,
                                 spec_type=drafter.native_type, extra=[*drafter.native_args(), *extra])
    # the program prints what it generated up to its stop, the EOS excepted (as r.tokens)
    pieces = b"".join(vocab.token_to_piece(t, special=True) for t in list(toks) + r.tokens[:ours["n_predict"]])
    out = nat.stdout.lstrip(b"\n")
    assert out.startswith(pieces) and not out[len(pieces):].strip(b"\n"), (out[:200], pieces[:200])
    assert {"n_predict": nat.n_predict, "n_drafted": nat.n_drafted, "n_accept": nat.n_accept} == ours
    return ours


@pytest.mark.native
@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("kind,kw", TINY_CONFIGS)
def test_tiny_matches_speculative_simple(tiny_ngram_gen, kind, kw):
    from .conftest import native_or_skip

    native_or_skip("llama-speculative-simple")
    n_drafted = 0
    for text in TINY_PROMPTS:
        n_drafted += compare_with_native(tiny_ngram_gen, create_drafter(kind, None, **kw), text, 100)["n_drafted"]
    assert n_drafted > 0


PASSAGE = ("The old lighthouse stood on a rocky point at the edge of the bay. Every evening the keeper climbed "
           "the narrow stairs, trimmed the wick, polished the great lens and lit the lamp, so that the fishing "
           "boats coming home in the dark could find the harbour. In winter the storms shook the windows and "
           "the waves broke over the rocks, but the light never went out. When the keeper grew old, his "
           "daughter took his place, and she kept the lamp burning for another forty years.")
#: a long passage to copy: the map kinds need the key 61 tokens back by default (n + m + 1)
REPEAT = [{"role": "user", "content": "Repeat this text exactly:\n\n" + PASSAGE}]


@pytest.mark.native
@pytest.mark.smollm2
@pytest.mark.parametrize("kind", KINDS)
def test_smollm2_matches_speculative_simple_with_default_parameters(smol_gen, kind):
    from .conftest import EXACT, native_or_skip

    native_or_skip("llama-speculative-simple")
    if not EXACT:
        pytest.skip("token-for-token equality with another batch shape holds on the CPU backend")
    text = smol_gen.model.vocab.detokenize(smol_gen.tokenize_prompt(messages=REPEAT), unparse_special=True)
    c = compare_with_native(smol_gen, create_drafter(kind, None), text, 48, n_ctx=2048, extra=())
    assert c["n_accept"] > 0
