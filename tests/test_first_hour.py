"""What a new user meets first (issue 21): n_max=0 with a drafter runs plain decoding and says
so, a drafter file given as the target is refused in the Generator's own words, a BatchResult is
a sequence of its results, and where two greedy runs part the target's top-2 margin is found."""
import logging

import numpy as np
import pytest

import pyllama_spec as ps
from pyllama_spec.divergence import NEAR_TIE, first_differing, first_divergence


def test_n_max_0_with_a_drafter_is_plain_decoding_with_a_warning(tiny_gen, caplog):
    plain = tiny_gen.generate("hello hello", max_tokens=10, reuse_prefix=False)
    with caplog.at_level(logging.WARNING, logger="pyllama_spec"):
        res = tiny_gen.generate("hello hello", drafter="dflash", n_max=0, max_tokens=10, reuse_prefix=False)
    assert "n_max=0" in caplog.text and "plain decoding" in caplog.text
    assert res.tokens == plain.tokens and res.drafter is None and res.n_max == 0
    assert res.stats.n_drafted == 0 and res.stats.n_steps == 10
    assert res.timings.get("inject", {}).get("count", 0) == 0  # the drafter did no work
    assert tiny_gen.generate("hello hello", drafter="dflash", n_max=3, max_tokens=4).drafter == "dflash"


@pytest.mark.parametrize("which", ["dflash"])
def test_a_drafter_as_the_target_is_refused_in_generator_words(tiny, which):
    with pytest.raises(ps.InvalidArgumentError) as e:
        ps.Generator(tiny[which], n_ctx=256)
    msg = str(e.value)
    assert "is a draft-dflash drafter" in msg and "not a target model" in msg
    assert f"drafters={{'dflash': '{tiny[which]}'}}" in msg and "-d dflash=" in msg
    assert "ctx_other" not in msg


def test_batch_result_is_a_sequence(tiny):
    gen = ps.Generator(tiny["target"], drafters={"ngram": "ngram"}, n_ctx=256, n_batch=64, n_parallel=3)
    try:
        res = gen.generate_batch(["a b", "c d e", "f"], drafter="ngram", max_tokens=5)
        assert len(res) == 3
        assert [r.text for r in res] == [r.text for r in res.results]
        assert res[0] is res.results[0] and res[-1] is res.results[2] and res[1:] == res.results[1:]
        a, b, c = res  # unpacking, as with vLLM's list of outputs
        assert c is res.results[2]
    finally:
        gen.close()


def test_first_differing():
    assert first_differing([1, 2, 3], [1, 2, 3]) is None
    assert first_differing([1, 2, 3], [1, 5, 3]) == 1
    assert first_differing([1, 2], [1, 2, 3]) == 2


def test_first_divergence_reports_the_targets_margin(tiny_gen):
    """Where two outputs part, the target's top-2 at that position is computed from the prompt and
    the common prefix: its best token is plain greedy's there, and the margin is the logit gap."""
    res = tiny_gen.generate("hello world", max_tokens=8, reuse_prefix=False)
    other = list(res.tokens)
    other[5] = (other[5] + 1) % tiny_gen.model.n_vocab
    d = first_divergence(tiny_gen, res.prompt_tokens, res.tokens, other)
    assert d is not None and d.position == 5 and d.ref_token == res.tokens[5] and d.other_token == other[5]
    assert d.top2[0] == res.tokens[5]  # greedy plain decoding took the argmax
    # the margin, recomputed token by token (1-row decodes, as plain decoding ran)
    ctx = tiny_gen.ctx
    ctx.memory.clear()
    toks = res.prompt_tokens + res.tokens[:5]
    ctx.decode(toks, np.arange(len(toks), dtype=np.int32), logits="last")
    lg = np.sort(np.array(ctx.logits_ith(-1), dtype=np.float64))
    ctx.memory.clear()
    assert d.margin == pytest.approx(lg[-1] - lg[-2], abs=1e-4) and d.near_tie == (d.margin < NEAR_TIE)
    assert first_divergence(tiny_gen, res.prompt_tokens, res.tokens, res.tokens[:4]) is None  # a prefix
    assert tiny_gen.generate("hello world", max_tokens=8).tokens == res.tokens  # the Generator is still fine
