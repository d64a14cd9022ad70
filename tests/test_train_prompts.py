"""Prompt sets beyond the templates (pyllama_spec.train.prompts) and answer regeneration
(pyllama_spec.train.regen): filters, dedupe, the evaluation-overlap check, the held-out split,
Magpie's template prefix, the batched sampler, and sharded, resumable, chunked answers."""
from __future__ import annotations

import gzip
import itertools
import json
import random
import time
from collections import Counter

import numpy as np
import pytest

from pyllama_spec.errors import InvalidArgumentError
from pyllama_spec.fixtures import CHATML, write_tiny_target
from pyllama_spec.study.prompts import load_prompts
from pyllama_spec.train import prompts as P
from pyllama_spec.train.data import answer_batched, sample_rows

CODE = '''def clamp(x, lo, hi):
    """Clamp x to [lo, hi]."""
    if x < lo:
        return lo
    if x > hi and hi is not None:
        return hi
    return x + 1 - 1


def mean(xs):
    return sum(xs) / len(xs)
'''


def test_normalise_hash_and_near_duplicates():
    assert P.text_hash("How do I sort a list?") == P.text_hash("  how do i SORT a list  ")
    idx = P.NearDupIndex(threshold=0.6)
    long = "Write a Python function that reads a CSV file and returns the rows as a list of dictionaries."
    assert idx.add(long)
    assert idx.find(long.upper()) == "exact"
    assert idx.find(long.replace("Python", "python 3")) == "near"  # one word changed
    assert not idx.add(long.replace("returns", "gives back"))
    assert idx.add("Explain the difference between TCP and UDP to a beginner.")
    assert len(idx) == 2
    assert idx.offer(long + "!") == "exact" and idx.offer("How do magnets work, in simple words?") is None


def _slow_dedupe(texts, threshold=0.6):
    """The definition: every text against every one kept before it."""
    hashes, kept, out = set(), [], []
    for t in texts:
        s = P.shingles(t)
        if P.text_hash(t) in hashes:
            out.append("exact")
        elif any(P.jaccard(s, k) >= threshold for k in kept):
            out.append("near")
        else:
            out.append(None)
            hashes.add(P.text_hash(t))
            kept.append(s)
    return out


def _code_request(rng):
    def word():
        return "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 8)))

    name, a, b, c = (word() for _ in range(4))
    lines = (f"    {word()} = {a} * {rng.randrange(1000)} + {b}.{word()}({c})" for _ in range(rng.randint(3, 8)))
    body = "\n".join(lines)
    return f"Explain what this code does:\n\n```python\ndef {name}({a}, {b}, {c}):\n{body}\n    return {c}\n```"


def test_near_dup_index_decides_as_all_pairs():
    rng = random.Random(0)
    texts = [P.seed_request(rng)[1] for _ in range(400)] + [_code_request(rng) for _ in range(150)]
    for t in rng.sample(texts, 150):  # one word changed, dropped or added: near, or not, by the numbers
        words = t.split(" ")
        i = rng.randrange(len(words))
        words[i:i + 1] = rng.choice([[], ["really"], [words[i], "now"], ["something"]])
        texts.append(" ".join(words))
    texts += [t.upper() for t in texts[:20]]
    rng.shuffle(texts)
    idx = P.NearDupIndex()
    got = [idx.offer(t) for t in texts]
    assert got == _slow_dedupe(texts)
    assert 200 < got.count(None) < 600 and got.count("near") > 100 and got.count("exact") > 20


def test_near_dup_index_is_not_quadratic():
    # code requests share their ask and fence: a bucket per shingle value held all of them
    rng = random.Random(1)
    texts = [_code_request(rng) for _ in range(1500)]
    idx = P.NearDupIndex()
    assert all(idx.offer(t) is None for t in texts)
    pairs = len(texts) * (len(texts) - 1) // 2
    assert idx.n_candidates < 0.1 * pairs and idx.n_compared < len(texts)
    assert idx.offer(texts[7].replace("Explain what", "Explain to me what")) == "near"


def test_contamination_refuses_the_evaluation_sets():
    refs = P.evaluation_texts(humaneval=False)
    c = P.Contamination(refs)
    turns = [t for b in ("mixed", "coding-chat") for conv in load_prompts(f"builtin:{b}") for t in conv.turns]
    assert len(refs) == len(turns) > 8
    for t in turns:
        assert c.check(t), t  # the turn itself
        assert c.check("Hi! " + t + " Thanks."), t  # wrapped in a request
    long = max(turns, key=len)
    words = long.split()
    words[len(words) // 2] = "banana"
    assert c.check(" ".join(words))  # one word changed
    assert c.check("How do I write a haiku about my cat?") is None
    assert c.check("Explain what a closure is in JavaScript, with an example.") is None


def _slow_contamination(refs, jaccard=0.5, containment=0.6):
    """The first version's check, a loop over every reference: the definition."""
    norms, sets = [P.normalise(r) for r in refs], [P.shingles(r) for r in refs]
    index = {}
    for j, s in enumerate(sets):
        for v in s:
            index.setdefault(v, []).append(j)

    def check(text):
        t, s = P.normalise(text), P.shingles(text)
        for r in norms:
            if r and (t == r or r in t or (len(t) >= 40 and t in r)):
                return f"contains or equals evaluation text {r[:40]!r}"
        shared = Counter()
        for v in s:
            for j in index.get(v, ()):
                shared[j] += 1
        for j, n in shared.most_common(3):
            ref = sets[j]
            if n / (len(s) + len(ref) - n) >= jaccard:
                return f"near-duplicate of evaluation text {norms[j][:40]!r}"
            if (len(ref) >= 40 and n / len(ref) >= containment) or (len(s) >= 40 and n / len(s) >= containment):
                return f"overlaps evaluation text {norms[j][:40]!r}"
        return None
    return check


def test_contamination_matches_the_loop_over_references():
    refs = P.evaluation_texts(humaneval=False) + ["abc", "Hi", "hello", CODE]
    rng = random.Random(0)
    texts = ["", "ab", "x abc y", "hi there", "say hello", CODE.replace("lo", "low"), CODE[:200]]
    for r in refs:
        a = rng.randrange(len(r))
        b = rng.randrange(a, len(r) + 1)
        words = r.split()
        words[rng.randrange(len(words))] = "banana"
        texts += [r, f"Hi! {r} Thanks.", r[a:b], " ".join(words), r[: len(r) // 2], r.upper()[:60]]
    texts += [P.seed_request(rng)[1] for _ in range(200)]
    fast, slow = P.Contamination(refs), _slow_contamination(refs)
    got = [fast.check(t) for t in texts]
    assert got == [slow(t) for t in texts]
    assert sum(g is not None for g in got) > len(refs) * 3
    assert P.Contamination([]).check("anything at all") is None


def test_contamination_refuses_humaneval():
    try:
        refs = P.evaluation_texts(humaneval=True)
    except Exception as exc:  # no registry and no cached wheel
        pytest.skip(f"HumanEval not available: {exc}")
    from pyllama_spec.assets import humaneval_problems

    c = P.Contamination(refs)
    p0 = humaneval_problems(1)[0]["prompt"]
    assert c.check(f"Complete the following Python function:\n\n```python\n{p0}\n```")
    assert c.check(p0.strip().splitlines()[-2] + "\n" + p0)  # a line more still overlaps
    assert c.check("Write a Rust program to parse a URL into scheme, host, path and query.") is None


@pytest.mark.parametrize("text,reason", [
    ("hi", "short"), ("I'm sorry, but I cannot help with that request.", "refusal"),
    ("Sure! Here is a function that sorts a list for you.", "answer-like"),
    ("What is this <|im_start|>assistant thing", "leak"), ("Wie schreibe ich eine Funktion in Python für Listen?",
                                                          "non-english"),
    ("Что такое рекурсия и как она работает?", "non-english"),
    (" ".join(["the cat is on the mat"] * 10), "repetitive"), ("how do i " + "ha" * 40, "repetitive"),
    ("x" * 3001 + " the a", "long"),
])
def test_filter_reasons(text, reason):
    assert P.filter_reason(text) == reason


def test_filter_keeps_requests_and_quoted_code():
    assert P.filter_reason("How do I reverse a linked list in C? Show the code.") is None
    code = "\n".join(["    x = x + 1"] * 12)
    assert P.filter_reason(f"Explain what this code does:\n\n```python\n{code}\n```") is None


def test_split_by_hash():
    texts = [f"Question number {i}: how does thing {i} work?" for i in range(4000)]
    splits = [P.split_of(t) for t in texts]
    assert splits == [P.split_of(t) for t in texts]
    assert P.split_of("How DOES thing 7 work") == P.split_of("how does thing 7 work?")
    assert 0.035 < splits.count("heldout") / len(texts) < 0.065


def test_user_turn_prefix_chatml():
    assert P.user_turn_prefix(CHATML) == "<|im_start|>user\n"
    assert P.user_turn_prefix(CHATML, "Be brief.") == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
    with pytest.raises(InvalidArgumentError, match="verbatim"):
        P.user_turn_prefix("{% for m in messages %}{{ m['content'] | lower }}{% endfor %}")


def test_local_requests_and_bug_mutation(tmp_path):
    (tmp_path / "m.py").write_text(CODE)
    (tmp_path / "empty.py").write_text("X = 1\n")
    assert list(P.local_requests(random.Random(0), [tmp_path / "empty.py"])) == []  # ends, not loops
    bug = P._mutated(CODE.split("\n\n\n")[0])
    assert bug is not None and "x <= lo" in bug and '"""' not in bug
    recs = list(itertools.islice(P.local_requests(random.Random(0), [tmp_path / "m.py", tmp_path / "empty.py"]), 40))
    assert {"explain-code", "raw-code", "find-bug"} <= {t for t, _ in recs}
    for _task, r in recs:
        assert ("turns" in r) != ("prompt" in r)
        text = r.get("turns", [r.get("prompt")])[0]
        assert "clamp" in text or "mean" in text


def test_build_is_deterministic_clean_and_mixed(tmp_path):
    (tmp_path / "m.py").write_text(CODE * 3)
    kw = dict(mix={"local": 0.3, "seed": 0.4, "followup": 0.3}, humaneval=False, roots=[tmp_path], progress=False)
    recs, st = P.build(None, 60, seed=3, **kw)
    again, _ = P.build(None, 60, seed=3, **kw)
    assert recs == again
    # two distinct functions cannot give 18 + 6 local requests: it stops there, and follow-ups
    # take their share (6 of 24) of what it gave
    dry = st["dry"]["local"]
    assert list(st["dry"]) == ["local"] and dry["got"] < dry["quota"] == 24 and dry["offered"] == 20 * 24 + 100
    assert st["per_source"]["seed"] == 24 and st["per_source"]["followup"] == 12 + round(6 * dry["got"] / 24)
    assert all(len(r["turns"]) == 2 for r in recs if r["source"] == "followup")
    ids = [r["id"] for r in recs]
    assert len(set(ids)) == len(ids)
    c = P.Contamination(P.evaluation_texts(humaneval=False))
    assert all(c.check(t) is None for r in recs for t in r.get("turns", [r.get("prompt", "")]))
    other, _ = P.build(None, 60, seed=4, **kw)
    assert other != recs
    path = tmp_path / "p.jsonl.gz"
    assert P.write_prompts(path, recs) == len(recs)
    assert P.read_prompts(path) == recs


def test_sources_run_dry_and_stop(tmp_path):
    (tmp_path / "m.py").write_text(CODE)
    t0 = time.perf_counter()
    recs, st = P.build(None, 3000, mix={"seed": 0.5, "local": 0.5}, humaneval=False, roots=[tmp_path], patience=200,
                       progress=False)
    assert time.perf_counter() - t0 < 20  # not 50 candidates per prompt wanted through the filters (minutes)
    assert set(st["dry"]) == {"seed", "local"} and len(recs) == st["n"] < 1500
    for src, d in st["dry"].items():
        assert d["why"] == "200 refused in a row" and d["got"] == st["per_source"][src] < d["quota"] == 1500
    assert 500 < st["dry"]["seed"]["got"] and st["dry"]["local"]["got"] < 20


def test_build_extends_an_earlier_set_unchanged(tmp_path):
    """A top-up keeps the earlier records first and bit for bit (their answers stay valid) and adds
    ``n`` new ones that duplicate none of them, whatever the new seed draws."""
    kw = dict(humaneval=False, progress=False, patience=400)
    old, _ = P.build(None, 40, seed=5, mix={"seed": 0.7, "followup": 0.3}, **kw)
    path = tmp_path / "old.jsonl.gz"
    P.write_prompts(path, old)
    recs, st = P.build(None, 30, seed=6, mix={"seed": 1}, extend=P.read_prompts(path), **kw)
    assert recs[:len(old)] == old and st["extended"] == len(old) and st["n_new"] == 30 == len(recs) - len(old)
    assert st["n"] == len(recs) and st["per_source"]["seed"] == 30
    ids = [r["id"] for r in recs]
    assert len(set(ids)) == len(ids)
    index = P.NearDupIndex()
    firsts = [r.get("turns", [r.get("prompt")])[0] for r in recs]
    assert all(index.add(t) for t in firsts)  # no new first turn repeats an old one, even nearly
    # the same seed draws the old requests again: all are refused as duplicates of the set extended
    _, st2 = P.build(None, 5, seed=5, mix={"seed": 1}, extend=old, **kw)
    assert st2["rejected"].get("duplicate-exact", 0) > 0 and st2["n"] == len(old) + st2["n_new"]
    with pytest.raises(InvalidArgumentError, match="not a prompt-set record"):
        P.PromptSet(None).adopt([{"turns": ["hello there, how are you"]}])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"\n')
    assert P.main(["-", str(tmp_path / "o.jsonl"), "--n", "3", "--mix", "seed=1", "--no-humaneval",
                   "--extend", str(bad)]) == 2


def test_prompt_set_refuses_a_repeat_as_before():
    ps = P.PromptSet(None)
    rec = {"turns": ["How do I make a sourdough starter at home?"]}
    assert ps.offer("seed", "howto", dict(rec)) and not ps.offer("seed", "howto", dict(rec))
    assert not ps.offer("seed", "howto", {"turns": ["hi"]}) and not ps.offer("seed", "howto", {"turns": ["hi"]})
    assert not ps.offer("seed", "howto", {"turns": ["How do I make a sourdough starter at home, please?"]})
    assert ps.rejected == {"duplicate-exact": 1, "short": 2, "duplicate-near": 1} and len(ps.records) == 1
    # the same text as a plain prompt is another record, with its own test (≥ 40 characters)
    assert ps.offer("seed", "explain", {"turns": ["Explain how a bloom filter works."]})
    assert not ps.offer("local", "raw-code", {"prompt": "Explain how a bloom filter works."})
    assert ps.rejected["short"] == 3


def test_parse_mix():
    assert P.parse_mix("magpie=1,seed=3") == {"magpie": 0.25, "seed": 0.75}
    with pytest.raises(InvalidArgumentError, match="unknown prompt source"):
        P.parse_mix("sharegpt=1")
    with pytest.raises(InvalidArgumentError, match="number"):
        P.parse_mix("seed=lots")


def test_sample_rows():
    L = np.random.default_rng(0).standard_normal((6, 300)).astype(np.float32) * 3
    rngs = [np.random.default_rng(i) for i in range(6)]
    out = sample_rows(L, [0, 1, 0, 1, 1, 0], rngs)
    assert (out[[0, 2, 5]] == L[[0, 2, 5]].argmax(1)).all()
    # a row's draw does not depend on its batch: the same generator state gives the same token alone
    alone = sample_rows(L[3:4], [1.0], [np.random.default_rng(3)])
    assert alone[0] == sample_rows(L, [1] * 6, [np.random.default_rng(i) for i in range(6)])[3]
    x = np.array([[0.0, np.log(3.0), -12.0]], dtype=np.float32)
    g = np.random.default_rng(0)
    draws = np.bincount([int(sample_rows(x, [1.0], [g], min_p=0.01)[0]) for _ in range(3000)], minlength=3)
    assert draws[2] == 0  # below min_p
    assert abs(draws[1] / 3000 - 0.75) < 0.03


@pytest.mark.parametrize("min_p", [0.0, 0.02])
def test_sample_rows_chi2_full_vocabulary(min_p):
    """The regen sampler on rows wide enough for the two-level search (> 1024 tokens), at T = 0.7,
    split over threads (40 rows: three chunks): every row's counts fit its tempered softmax."""
    from scipy import stats

    V, n_rows, n = 3000, 40, 1500
    rng = np.random.default_rng(11)
    L = (rng.standard_normal((n_rows, V)) * 2).astype(np.float32)
    L[:, :5] += 6.0  # a few likely tokens, many unlikely ones
    rngs = [np.random.default_rng([4, r]) for r in range(n_rows)]
    counts = np.zeros((n_rows, V))
    for _ in range(n):
        counts[np.arange(n_rows), sample_rows(L, [0.7] * n_rows, rngs, min_p=min_p)] += 1
    p = np.exp((L.astype(np.float64) - L.max(axis=1, keepdims=True)) / 0.7)
    p[p < min_p] = 0.0
    p /= p.sum(axis=1, keepdims=True)
    for r in range(n_rows):
        keep = p[r] > 0
        assert counts[r, ~keep].sum() == 0
        head = np.flatnonzero(p[r] * n >= 10)  # bins of at least 10 expected draws, the rest pooled
        obs = np.append(counts[r, head], n - counts[r, head].sum())
        exp = np.append(p[r, head] * n, n * (1 - p[r, head].sum()))
        exp *= n / exp.sum()  # float rounding of the pooled tail
        if exp[-1] < 1e-9:  # min-p left nothing outside the head
            obs, exp = obs[:-1], exp[:-1]
        if len(obs) == 1:  # one token kept: every draw is it
            assert obs[0] == n
            continue
        assert stats.chisquare(obs, exp).pvalue > 1e-3


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("regen") / "tiny.gguf"
    write_tiny_target(path, n_layer=2, n_embd=32, n_head=2, n_head_kv=1, n_ff=64, seed=5)
    return path


def test_regen_llama_shards_resumes_and_chunks(tiny, tmp_path):
    import pyllama_spec as ps
    from pyllama_spec.generator import tokenize_chat
    from pyllama_spec.train.regen import regenerate, temperature_of

    recs = [{"id": f"p{i}", "source": "seed", "task": "t", "split": "train",
             "turns": [f"question {i} about cats"] + (["and a follow-up"] if i % 3 == 0 else [])} for i in range(8)]
    recs.append({"id": "raw", "source": "local", "task": "raw-code", "split": "heldout", "prompt": "def f(x):\n"})
    P.write_prompts(tmp_path / "p.jsonl", recs)
    out = tmp_path / "ans"
    man = regenerate(tiny, tmp_path / "p.jsonl", out, shard=(1, 2), engine="llama", max_tokens=6, sampled=0.5,
                     seed=1, batch=4, chunk_mib=1.02, progress=False, command="test")
    mine = [r for k, r in enumerate(recs) if k % 2 == 1]
    n_seq = sum(len(r.get("turns", [0])) for r in mine)
    assert man["n_answers"] == n_seq and man["complete"] and man["files"] == ["answers-s1of2-00.jsonl.gz"]
    lines = [json.loads(x) for x in gzip.open(out / "answers-s1of2-00.jsonl.gz", "rt")]
    assert sorted(d["key"] for d in lines) == sorted(f"{r['id']}/{t}" for r in mine for t in range(len(r["turns"])))
    m = ps.Model(tiny, vocab_only=True)
    greedy = [d for d in lines if d["turn"] == 0 and d["temperature"] == 0]
    assert greedy
    for d in lines:
        assert d["temperature"] == temperature_of(d["key"], 1, 0.5, 0.7)
        r = next(r for r in mine if r["id"] == d["id"])
        if d["turn"] == 0:
            assert d["prompt_tokens"] == tokenize_chat(m, [{"role": "user", "content": r["turns"][0]}])
    # the greedy answers are our batched path's (the same engine at T = 0)
    lm = ps.Model(tiny)
    ref = {i: a for i, a, _ in answer_batched(lm, [d["prompt_tokens"] for d in greedy], max_tokens=6, n_parallel=4,
                                              progress=False)}
    assert [d["answer_tokens"] for d in greedy] == [ref[i] for i in range(len(greedy))]
    lm.close()
    # a second call resumes: nothing new, a manifest entry more
    again = regenerate(tiny, tmp_path / "p.jsonl", out, shard=(1, 2), engine="llama", max_tokens=6, sampled=0.5,
                       seed=1, batch=4, progress=False, command="test")
    assert again["n_answers"] == 0
    assert len(json.loads((out / "manifest-s1of2.json").read_text())) == 2
    # where the time went, per turn and group: every step counted once, its rows the answers' tokens
    t = man["timing"]
    assert sum(tm["answers"] for tm in t.values()) == man["n_answers"]
    for name, tm in t.items():
        assert tm["steps"] >= 1 and tm["decode_s"] > 0 and tm["rows"] == tm["answer_tokens"]
        assert tm["answers"] == sum(1 for d in lines if f"turn{d['turn'] + 1}_" + (
            "greedy" if d["temperature"] == 0 else "sampled") == name)
    # greedy answers by a host argmax over the copied logits are the graph's (f32 tiny target, CPU)
    host = regenerate(tiny, tmp_path / "p.jsonl", tmp_path / "host", shard=(1, 2), engine="llama", max_tokens=6,
                      sampled=0.5, seed=1, batch=4, progress=False, command="test", greedy_in_graph=False)
    with gzip.open(tmp_path / "host" / "answers-s1of2-00.jsonl.gz", "rt") as f:
        hl = {d["key"]: d for d in map(json.loads, f)}
    assert host["n_answers"] == man["n_answers"]
    assert all(hl[d["key"]]["answer_tokens"] == d["answer_tokens"] for d in lines if d["temperature"] == 0)
