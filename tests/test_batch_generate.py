"""Batched speculative decoding (issue 14): N sequences in one target context, every draft of a
step verified in one decode; each sequence gives the tokens it gives alone (T = 0, CPU)."""
import numpy as np
import pytest

import pyllama_spec as ps
from pyllama_spec.speculative.drafters.batch import DraftRequest, SeqRows

from .conftest import EXACT, assert_same_tokens

PROMPTS = ["hello there, how are you", "def add(a, b):\n    return", "Once upon a time " * 6, "x"]


@pytest.fixture(scope="module")
def bgen(tiny):
    gen = ps.Generator(tiny["target"], drafters={"dflash": tiny["dflash"], "ngram": "ngram"},
                       n_ctx=512, n_batch=64, n_ubatch=32, n_parallel=4)
    yield gen
    gen.close()


@pytest.fixture(scope="module")
def alone(bgen):
    """Each prompt run by itself, per drafter: {(drafter, prompt): GenerationResult}."""
    out = {}
    for d in (None, "dflash", "ngram"):
        for i, p in enumerate(PROMPTS):
            out[d, p] = bgen.generate(p, drafter=d, n_max=5, max_tokens=20 + 4 * i, reuse_prefix=False)
    return out


@pytest.mark.parametrize("drafter", [None, "dflash", "ngram"])
def test_each_sequence_equals_its_single_run(bgen, alone, drafter):
    res = bgen.generate_batch(PROMPTS, drafter=drafter, n_max=5, max_tokens=[20 + 4 * i for i in range(4)])
    assert len(res.results) == 4
    for p, r in zip(PROMPTS, res.results):
        ref = alone[drafter, p]
        assert_same_tokens(r.tokens, ref.tokens)
        assert r.prompt_tokens == ref.prompt_tokens
        if not EXACT:  # GPUs: near-ties may flip between batch shapes (conftest)
            continue
        assert r.text == ref.text and r.finish_reason == ref.finish_reason and r.n_committed == ref.n_committed
        if drafter == "ngram":  # a drafter of the history alone drafts exactly what it drafts alone
            assert r.stats.acceptance_lengths == ref.stats.acceptance_lengths
            assert r.stats.n_drafted == ref.stats.n_drafted
    steps = max(r.stats.n_steps for r in res.results)
    assert res.timings["verify"]["count"] == steps  # one target decode per step for every sequence
    if drafter == "dflash":
        assert res.timings["draft"]["count"] <= steps  # one drafter decode per step for every sequence
    assert res.n_generated == sum(r.n_generated for r in res.results)
    assert res.stats.n_steps == sum(r.stats.n_steps for r in res.results)
    assert "tok/s" in res.report()


def test_dflash_drafts_the_same_blocks_as_alone(bgen, monkeypatch):
    """Equal block lengths (same n_max, room for all): the one batched drafter decode proposes for
    each sequence exactly what the drafter proposes for it alone, step by step."""
    from pyllama_spec.speculative.drafters.dflash import DFlashDrafter
    from pyllama_spec.speculative.drafters.dflash_batch import DFlashBatch

    prompts = PROMPTS[:3]
    batched: dict = {}
    orig_batch = DFlashBatch.propose

    def spy_batch(self, requests, sp, timer):
        out = orig_batch(self, requests, sp, timer)
        for q, d in zip(requests, out):
            batched.setdefault(q.seq, []).append(list(d.tokens))
        return out
    monkeypatch.setattr(DFlashBatch, "propose", spy_batch)
    res = bgen.generate_batch(prompts, drafter="dflash", n_max=5, max_tokens=20)
    orig_one = DFlashDrafter.propose
    for i, (p, r) in enumerate(zip(prompts, res.results)):
        alone: list = []

        def spy_one(self, *a, _alone=alone, **kw):
            d = orig_one(self, *a, **kw)
            _alone.append(list(d.tokens))
            return d
        monkeypatch.setattr(DFlashDrafter, "propose", spy_one)
        ref = bgen.generate(p, drafter="dflash", n_max=5, max_tokens=20, reuse_prefix=False)
        monkeypatch.setattr(DFlashDrafter, "propose", orig_one)
        assert_same_tokens(r.tokens, ref.tokens)
        if not EXACT:
            continue
        assert len(batched[i]) == len(alone) == r.stats.n_steps - (r.stats.drafted_at[0] < r.stats.n_steps)
        assert [len(x) for x in batched[i]] == [len(y) for y in alone]
        # a full block is the same decode alone and in the batch; a shorter one near the end (less
        # room) is padded to the batch's longest and may differ (DFlashBatch docstring)
        full = [k for k, y in enumerate(alone) if len(y) == 5]
        assert len(full) >= len(alone) - 5
        assert [batched[i][k] for k in full] == [alone[k] for k in full]


def test_per_sequence_n_max_and_finish(bgen, alone):
    res = bgen.generate_batch(PROMPTS[:3], drafter="ngram", n_max=[0, 3, 5], max_tokens=[7, 20, 28])
    assert [r.n_max for r in res.results] == [0, 3, 5]
    assert res.results[0].stats.n_drafted == 0 and res.results[0].stats.n_steps == 7
    assert [r.finish_reason for r in res.results] == ["length"] * 3
    assert [len(r.tokens) for r in res.results] == [7, 20, 28]
    for i, r in enumerate(res.results):
        assert_same_tokens(r.tokens, alone["ngram", PROMPTS[i]].tokens[:len(r.tokens)])
        assert max(r.stats.acceptance_lengths) <= r.n_max


def test_stop_string_ends_one_sequence(bgen, alone):
    # The reference is the same two-sequence batch without the stop string: until the stop, both runs decode
    # the same batch shapes, so their tokens agree on every backend (CUDA runs other kernels for other
    # shapes, so a comparison with single-sequence runs is exact on the CPU only).
    ref = bgen.generate_batch(PROMPTS[:2], drafter="dflash", max_tokens=20)
    full, ref_b = ref.results
    if EXACT:
        assert full.text == alone[None, PROMPTS[0]].text
    stop = full.text[6:9]
    res = bgen.generate_batch(PROMPTS[:2], drafter="dflash", max_tokens=20, stop=stop)
    a, b = res.results
    assert a.finish_reason == "stop" and a.text == full.text[:full.text.find(stop)]
    # the other sequence ran beside it in the same shapes for a's steps, each committing >= 1 of its tokens
    k = a.stats.n_steps
    assert k >= 1 and b.tokens[:k] == ref_b.tokens[:k]
    if EXACT:  # after a's stop it decodes alone, as a single-sequence run does
        alone_b = bgen.generate(PROMPTS[1], drafter="dflash", max_tokens=20, stop=stop, reuse_prefix=False)
        assert b.text == alone_b.text and b.finish_reason == alone_b.finish_reason


def test_stream(bgen, alone):
    stream = bgen.generate_batch(PROMPTS, drafter="dflash", n_max=5, max_tokens=[20 + 4 * i for i in range(4)],
                                 stream=True)
    texts = ["" for _ in PROMPTS]
    finished = {}
    for piece in stream:
        assert piece.index not in finished  # nothing after a sequence's last piece
        texts[piece.index] += piece.text
        if piece.finish_reason is not None:
            finished[piece.index] = piece.finish_reason
    assert stream.result is not None and len(finished) == 4
    for i, p in enumerate(PROMPTS):
        assert texts[i] == stream.result.results[i].text
        assert_same_tokens(stream.result.results[i].tokens, alone["dflash", p].tokens)
        if EXACT:
            assert texts[i] == alone["dflash", p].text and finished[i] == alone["dflash", p].finish_reason


def test_sampling_is_reproducible_per_sequence(bgen):
    kw = dict(drafter="dflash", n_max=4, max_tokens=16, temperature=0.9, top_k=20, seed=5)
    a = bgen.generate_batch([PROMPTS[0], PROMPTS[0], PROMPTS[1]], **kw)
    b = bgen.generate_batch([PROMPTS[0], PROMPTS[0], PROMPTS[1]], **kw)
    assert [r.tokens for r in a.results] == [r.tokens for r in b.results]
    assert a.results[0].tokens == a.results[1].tokens  # same seed, same prompt: same draws
    r = bgen.generate_batch([PROMPTS[0], PROMPTS[1]], drafter="dflash", n_max=4, max_tokens=16, temperature=0.9,
                            top_k=20, seed=5, verify="rejection")
    assert all(len(x.tokens) == 16 for x in r.results)


def test_generate_after_a_batch(bgen, alone):
    bgen.generate_batch(PROMPTS[:2], drafter="dflash", max_tokens=8)
    # the batch left a drafting chain on each sequence of the drafter: sampling with q needs none
    assert len(bgen.generate(PROMPTS[0], drafter="dflash", max_tokens=8, temperature=0.8, seed=1,
                             verify="rejection").tokens) == 8
    bgen.generate_batch(PROMPTS[:3], drafter="dflash", max_tokens=8)
    r = bgen.generate(PROMPTS[2], drafter="dflash", n_max=5, max_tokens=28)
    assert r.n_reused == 0
    assert_same_tokens(r.tokens, alone["dflash", PROMPTS[2]].tokens)


def test_batch_arguments(bgen, tiny):
    with pytest.raises(ps.InvalidArgumentError, match="n_parallel=5"):
        bgen.generate_batch(["a"] * 5)
    with pytest.raises(ps.InvalidArgumentError, match="exactly one"):
        bgen.generate_batch()
    with pytest.raises(ps.InvalidArgumentError, match="one per prompt"):
        bgen.generate_batch(["a", "b"], max_tokens=[3])
    with pytest.raises(ps.InvalidArgumentError, match="max_tokens"):
        bgen.generate_batch(["a", "b"], max_tokens=[3, 0])
    with pytest.raises(ps.PromptTooLongError):
        bgen.generate_batch(["a", "z" * 600])
    single = ps.Generator(tiny["target"], n_ctx=256, n_batch=32)
    try:
        with pytest.raises(ps.InvalidArgumentError, match="n_parallel"):
            single.generate_batch(["a", "b"])
        assert len(single.generate_batch(["a"], max_tokens=3).results[0].tokens) == 3
    finally:
        single.close()


def test_a_drafter_without_batching_is_refused(bgen):
    from pyllama_spec.speculative.drafters import Draft, Drafter

    class OneSeq(Drafter):
        kind = "one-seq-test"

        def propose(self, last_token, n_past, n_max, sp, rng, timer):
            return Draft(tokens=[])

    bgen.drafters["one"] = OneSeq(bgen.ctx)
    try:
        with pytest.raises(ps.UnsupportedError, match="one sequence at a time"):
            bgen.generate_batch(["a", "b"], drafter="one")
    finally:
        del bgen.drafters["one"]


def test_dflash_batch_protocol_directly(bgen):
    """The batch drafter's contract, call by call: one decode drafts every request's block; the
    noise blocks never stay in the drafter's cache."""
    from pyllama_spec.speculative.sampling import SamplingParams
    from pyllama_spec.speculative.timing import StageTimer

    d = bgen.drafters["dflash"].batched(3)
    ctx, dctx = bgen.ctx, bgen.drafters["dflash"].ctx
    timer = StageTimer(sync=False)
    ctx.memory.clear()
    ctx.set_layer_inputs(d.target_layer_ids)
    prompts = [bgen.tokenize_prompt(p) for p in (PROMPTS[0], PROMPTS[1], "a short one")]  # one decode
    toks, pos, seq, rows = [], [], [], []
    for s, p in enumerate(prompts):
        d.begin(s, p[:-1])
        rows.append(SeqRows(s, len(toks), p[:-1], np.arange(len(p) - 1, dtype=np.int32), len(p) - 1))
        toks += p[:-1]
        pos += list(range(len(p) - 1))
        seq += [s] * (len(p) - 1)
    ctx.decode(toks, np.array(pos), seq_id=np.array(seq), logits="none")
    d.observe(rows, timer)
    assert [dctx.memory.pos_max(s) for s in range(3)] == [len(p) - 2 for p in prompts]
    reqs = [DraftRequest(s, p[-1], len(p) - 1, n) for s, (p, n) in enumerate(zip(prompts, [5, 2, 0]))]
    drafts = d.propose(reqs, SamplingParams(), timer)
    assert [len(x.tokens) for x in drafts] == [5, 2, 0]
    assert timer.stages["draft"].count == 1
    assert [dctx.memory.pos_max(s) for s in range(3)] == [len(p) - 2 for p in prompts]
