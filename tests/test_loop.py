"""The speculative loop on tiny fixtures: lossless at T = 0, reproducible and distribution-
preserving at T > 0, exact stopping, consistent timing."""
import numpy as np
import pytest
from scipy import stats

import pyllama_spec as ps
from pyllama_spec.speculative.drafters import Draft, Drafter

PROMPTS = ["hello there, how are you", "def add(a, b):\n    return", "Once upon a time " * 6]


@pytest.fixture(scope="module")
def plain(tiny_gen):
    return {p: tiny_gen.generate(p, max_tokens=48).tokens for p in PROMPTS}


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("n_max", range(1, 8))  # 1 .. block_size - 1
@pytest.mark.parametrize("drafter", ["dflash", "ngram"])
def test_greedy_is_lossless(tiny_gen, plain, prompt, n_max, drafter):
    r = tiny_gen.generate(prompt, drafter=drafter, n_max=n_max, max_tokens=48)
    assert r.tokens == plain[prompt]
    assert r.n_max == n_max and r.finish_reason == "length" and len(r.tokens) == 48
    assert r.stats.n_steps * 1 + r.stats.n_accepted == 48  # every step commits accepted + 1


def test_prompt_longer_than_ubatch_and_batch(tiny_gen):
    long_prompt = "the cat sat on the mat and looked at the dog; " * 6  # > n_batch=64 > n_ubatch=32
    toks = tiny_gen.tokenize_prompt(long_prompt)
    assert len(toks) > 2 * tiny_gen.ctx.n_batch
    ref = tiny_gen.generate(long_prompt, max_tokens=32).tokens
    assert tiny_gen.generate(long_prompt, drafter="dflash", n_max=7, max_tokens=32).tokens == ref
    assert tiny_gen.generate(long_prompt, drafter="ngram", max_tokens=32).tokens == ref


def test_n_max_clamped_to_block(tiny_gen, caplog):
    r = tiny_gen.generate("hi", drafter="dflash", n_max=30, max_tokens=8)
    assert r.n_max == 7 and len(r.stats.accepted_per_position) == 7
    assert "clamping to 7" in caplog.text


class OracleDrafter(Drafter):
    """Proposes the known target continuation, with a wrong token every `wrong_every` positions."""
    kind = "oracle-test"
    n_max_limit = 16
    n_max_default = 6

    def __init__(self, target, reference, n_prompt, wrong_every=0):
        super().__init__(target)
        self.ref, self.n_prompt, self.wrong_every = reference, n_prompt, wrong_every

    def propose(self, last_token, n_past, n_max, sp, rng, timer):
        start = n_past + 1 - self.n_prompt  # index in the output of the token after last_token
        toks = list(self.ref[start:start + n_max])
        if self.wrong_every:
            toks = [(t + 1) % 256 if (start + i) % self.wrong_every == self.wrong_every - 1 else t
                    for i, t in enumerate(toks)]
        return Draft(tokens=toks)


def test_partial_acceptance_and_rollback(tiny_gen, plain):
    prompt = PROMPTS[1]
    n_prompt = len(tiny_gen.tokenize_prompt(prompt))
    ref = plain[prompt]
    tiny_gen.drafters["oracle"] = OracleDrafter(tiny_gen.ctx, ref, n_prompt, wrong_every=5)
    try:
        r = tiny_gen.generate(prompt, drafter="oracle", n_max=6, max_tokens=48)
    finally:
        del tiny_gen.drafters["oracle"]
    assert r.tokens == ref
    assert 0.5 < r.stats.acceptance_rate < 1.0 and r.stats.mean_accepted_length > 3
    assert tiny_gen.ctx.memory.pos_max() < n_prompt + 48


@pytest.mark.parametrize("max_tokens", [1, 2, 5, 13])
def test_max_tokens_is_exact(tiny_gen, plain, max_tokens):
    prompt = PROMPTS[1]
    n_prompt = len(tiny_gen.tokenize_prompt(prompt))
    tiny_gen.drafters["oracle"] = OracleDrafter(tiny_gen.ctx, plain[prompt], n_prompt)
    try:
        r = tiny_gen.generate(prompt, drafter="oracle", n_max=6, max_tokens=max_tokens)
    finally:
        del tiny_gen.drafters["oracle"]
    assert r.tokens == plain[prompt][:max_tokens] and r.finish_reason == "length"


def test_stop_strings_cut_text_and_tokens(tiny_gen):
    full = tiny_gen.generate(PROMPTS[0], max_tokens=40)
    text = full.text
    stop = text[10:13]
    assert stop and text.find(stop) == 10
    for drafter in (None, "dflash", "ngram"):
        r = tiny_gen.generate(PROMPTS[0], drafter=drafter, max_tokens=40, stop=["\x00never", stop])
        assert r.finish_reason == "stop" and r.text == text[:10]
        assert r.tokens == full.tokens[:len(r.tokens)]
        assert tiny_gen.model.vocab.detokenize(r.tokens).startswith(text[:10])
        assert len(tiny_gen.model.vocab.detokenize(r.tokens[:-1])) < 10


def test_stream_matches_and_never_splits_utf8(tiny_gen):
    full = tiny_gen.generate(PROMPTS[2], drafter="dflash", max_tokens=40)
    stream = tiny_gen.generate(PROMPTS[2], drafter="dflash", max_tokens=40, stream=True)
    pieces = list(stream)
    assert "".join(pieces) == full.text and stream.result.tokens == full.tokens
    assert all(p.encode("utf-8").decode("utf-8") == p for p in pieces)


def test_sampling_reproducible_and_seed_dependent(tiny_gen):
    kw = dict(drafter="dflash", max_tokens=24, temperature=0.9, top_k=20, n_max=4)
    for verify in ("match", "rejection"):
        a = tiny_gen.generate(PROMPTS[0], seed=7, verify=verify, **kw).tokens
        b = tiny_gen.generate(PROMPTS[0], seed=7, verify=verify, **kw).tokens
        c = tiny_gen.generate(PROMPTS[0], seed=8, verify=verify, **kw).tokens
        assert a == b and a != c


@pytest.mark.parametrize("verify", ["match", "rejection"])
def test_first_tokens_follow_the_target_distribution(tiny_gen, verify):
    """Chi-square over many seeds: the first two generated tokens are distributed as the
    target's own (T = 1, top-k 6), whatever the drafter proposes."""
    from pyllama_spec.speculative.sampling import SamplingParams, probs

    prompt = PROMPTS[0]
    sp = SamplingParams(temperature=1.0, top_k=6)
    ctx = tiny_gen.ctx
    toks = tiny_gen.tokenize_prompt(prompt)
    ctx.memory.clear()
    ctx.decode(toks, logits="last")
    p1 = probs(ctx.logits()[0].copy(), sp)
    first = int(np.argmax(p1))
    ctx.decode([first], logits="last")
    p2 = probs(ctx.logits()[0].copy(), sp)
    n = 500
    c1, c2 = np.zeros_like(p1), np.zeros_like(p2)
    for seed in range(n):
        r = tiny_gen.generate(prompt, drafter="dflash", n_max=3, max_tokens=2, temperature=1.0, top_k=6,
                              seed=seed, verify=verify)
        c1[r.tokens[0]] += 1
        if r.tokens[0] == first:
            c2[r.tokens[1]] += 1
    for counts, p in ((c1, p1), (c2, p2)):
        keep = p > 0
        assert counts[~keep].sum() == 0
        assert stats.chisquare(counts[keep], p[keep] * counts.sum()).pvalue > 1e-3


def test_timing_adds_up(tiny_gen):
    r = tiny_gen.generate(PROMPTS[2], drafter="dflash", max_tokens=40, sync_stages=True)
    t = r.timings
    staged = sum(v["seconds"] for k, v in t.items() if k not in ("wall", "other"))
    assert staged + t["other"]["seconds"] == pytest.approx(t["wall"]["seconds"], rel=1e-9)
    assert t["other"]["seconds"] <= 0.10 * t["wall"]["seconds"]  # tiny model: ~0.1 ms steps, glue shows
    for stage in ("tokenize", "prefill", "extract", "inject", "draft", "draft_sample", "verify", "accept",
                  "rollback", "detokenize"):
        assert t[stage]["count"] > 0, stage
    assert t["verify"]["count"] == r.stats.n_steps
    rep = r.report()
    for word in ("verify", "inject", "% wall", "ms/step", "tok/s", "τ"):
        assert word in rep


def test_bad_arguments_raise_and_generator_stays_usable(tiny_gen):
    with pytest.raises(ValueError, match="temperature"):
        tiny_gen.generate("x", temperature=-0.5)
    with pytest.raises(ValueError, match="unknown drafter 'eagle'"):
        tiny_gen.generate("x", drafter="eagle")
    with pytest.raises(ValueError, match="verify"):
        tiny_gen.generate("x", verify="maybe")
    with pytest.raises(ValueError, match="max_tokens"):
        tiny_gen.generate("x", max_tokens=0)
    with pytest.raises(ps.PromptTooLongError, match="n_ctx"):
        tiny_gen.generate("y" * 2000)
    with pytest.raises(ValueError, match="exactly one"):
        tiny_gen.generate()
    for bad in (-3, 2.5, True):  # with or without a drafter
        with pytest.raises(ps.InvalidArgumentError, match="n_max"):
            tiny_gen.generate("x", n_max=bad)
        with pytest.raises(ps.InvalidArgumentError, match="n_max"):
            tiny_gen.generate("x", drafter="dflash", n_max=bad)
    assert len(tiny_gen.generate("x", drafter="dflash", max_tokens=3).tokens) == 3


def test_context_limit(tiny):
    gen = ps.Generator(tiny["target"], drafters={"dflash": tiny["dflash"]}, n_ctx=256, n_batch=64)
    prompt = "z" * 200
    n_prompt = len(gen.tokenize_prompt(prompt))
    r = gen.generate(prompt, drafter="dflash", max_tokens=500)
    assert r.finish_reason == "context"
    assert n_prompt + len(r.tokens) == gen.ctx.n_ctx + 1  # every cell used, plus the uncached last token
    gen.close()


def test_chat_messages(tiny_gen, tiny):
    msgs = [{"role": "user", "content": "hi"}]
    toks = tiny_gen.tokenize_prompt(messages=msgs)
    assert toks[0] == tiny["<|im_start|>"] and toks.count(tiny["<|im_end|>"]) == 1
    assert tiny_gen.model.vocab.detokenize(toks, unparse_special=True) == \
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    r = tiny_gen.generate(messages=msgs, drafter="dflash", max_tokens=8)
    assert r.prompt_tokens == toks and len(r.tokens) == 8


def test_drafter_for_another_target_is_refused(tiny, tiny_qwen3):
    gen = ps.Generator(tiny["target"], n_ctx=256)
    with pytest.raises(ps.DrafterMismatchError, match="another target"):
        gen.add_drafter("wrong", tiny_qwen3["dflash"])
    # any other model with the target's vocabulary is a separate draft model (draft-simple)
    assert gen.add_drafter("small", tiny_qwen3["target"]).kind == "draft-simple"
    assert gen.generate("still fine", max_tokens=2).finish_reason == "length"
    gen.close()


def test_qwen3_target_block_16(tiny_qwen3):
    gen = ps.Generator(tiny_qwen3["target"], drafters={"dflash": tiny_qwen3["dflash"]}, n_ctx=512)
    ref = gen.generate("qwen three", max_tokens=30).tokens
    r = gen.generate("qwen three", drafter="dflash", n_max=15, max_tokens=30)
    assert r.tokens == ref and r.n_max == 15
    gen.close()


def test_n_max_clamped_to_the_verify_batch(tiny, caplog):
    """Regression: with n_batch ≤ n_max the verify batch [last, drafts...] did not fit."""
    gen = ps.Generator(tiny["target"], drafters={"dflash": tiny["dflash"], "ngram": "ngram"}, n_ctx=256, n_batch=4)
    ref = gen.generate("abcabcabcabc", max_tokens=12).tokens
    for d in ("ngram", "dflash"):
        r = gen.generate("abcabcabcabc", drafter=d, max_tokens=12)
        assert r.n_max == 3 and r.tokens == ref
    assert "does not fit a verify batch" in caplog.text
    gen.close()


def test_a_new_generate_cuts_off_an_unfinished_stream(tiny_gen):
    s1 = tiny_gen.generate(PROMPTS[0], drafter="dflash", max_tokens=30, stream=True)
    next(s1)
    r = tiny_gen.generate(PROMPTS[1], max_tokens=5)
    assert len(r.tokens) == 5
    with pytest.raises(ps.PyllamaSpecError, match="cut off by a later generate"):
        list(s1)
    assert s1.result is None


def test_unknown_drafter_kind(tiny_gen):
    with pytest.raises(ps.InvalidArgumentError, match="neither a known drafter kind"):
        tiny_gen.add_drafter("e", "eagle")


def test_argument_errors_are_library_errors(tiny_gen):
    for kwargs in ({"temperature": -1}, {"top_p": 0}, {"max_tokens": 0}, {"drafter": "nope"}):
        with pytest.raises(ps.InvalidArgumentError):
            tiny_gen.generate("x", **kwargs)


def test_one_token_prompt(tiny_gen):
    r = tiny_gen.generate(prompt_tokens=[65], drafter="dflash", max_tokens=4)
    assert len(r.tokens) == 4 and r.n_prompt == 1
    assert "prompt – tok/s" in r.report()


class CountingDrafter(OracleDrafter):
    """The oracle, recording what the loop tells it (observe rows, on_accept calls)."""
    kind = "counting-test"

    def __init__(self, *a, overshoot=0, **kw):
        super().__init__(*a, **kw)
        self.accepts, self.observed, self.overshoot = [], [], overshoot

    def observe(self, tokens, positions, n_commit, timer):
        self.observed.append((len(tokens), int(positions[0]), n_commit))

    def propose(self, last_token, n_past, n_max, sp, rng, timer):
        d = super().propose(last_token, n_past, n_max, sp, rng, timer)
        return Draft(tokens=d.tokens + [0] * self.overshoot)

    def on_accept(self, n_drafted, n_accepted):
        self.accepts.append((n_drafted, n_accepted))


def test_config_objects_and_the_drafter_protocol(tiny_gen, plain):
    """Issue 13: SpecConfig/SamplingParams objects build the same run as the keywords; the loop
    calls observe(tokens, positions, n_commit) and on_accept(n_drafted, n_accepted) per step."""
    prompt = PROMPTS[1]
    n_prompt = len(tiny_gen.tokenize_prompt(prompt))
    d = CountingDrafter(tiny_gen.ctx, plain[prompt], n_prompt, wrong_every=4)
    tiny_gen.drafters["counting"] = d
    try:
        r = tiny_gen.generate(prompt, spec=ps.SpecConfig(drafter="counting", n_max=5), max_tokens=30)
        assert r.tokens == plain[prompt][:30] and r.n_max == 5 and r.drafter == "counting"
        assert len(d.accepts) == r.stats.n_steps
        assert sum(a for _, a in d.accepts) == r.stats.n_accepted
        assert sum(n for n, _ in d.accepts) == r.stats.n_drafted
        steps = d.observed[-r.stats.n_steps:]  # after the prefill chunk(s)
        assert all(n_rows == nd + 1 and commit == a + 1 for (n_rows, _, commit), (nd, a) in zip(steps, d.accepts))
        assert r.n_committed == 30 == r.n_generated
        with pytest.raises(ps.InvalidArgumentError, match="not both"):
            tiny_gen.generate(prompt, spec=ps.SpecConfig(), drafter="counting")
        with pytest.raises(ps.InvalidArgumentError, match="not both"):
            tiny_gen.generate(prompt, sampling=ps.SamplingParams(temperature=0.5), temperature=0.5)
        s = tiny_gen.generate(prompt, sampling=ps.SamplingParams(temperature=0.7, seed=3), max_tokens=10)
        assert s.tokens == tiny_gen.generate(prompt, temperature=0.7, seed=3, max_tokens=10).tokens
    finally:
        del tiny_gen.drafters["counting"]


@pytest.mark.parametrize("bad", [dict(n_max=-1), dict(n_max=True), dict(verify="maybe"), dict(drafter=3),
                                 dict(sync_stages="yes")])
def test_spec_config_validates(bad):
    with pytest.raises(ps.InvalidArgumentError):
        ps.SpecConfig(**bad)


def test_a_drafter_proposing_too_much_is_stopped(tiny_gen, plain):
    prompt = PROMPTS[1]
    n_prompt = len(tiny_gen.tokenize_prompt(prompt))
    tiny_gen.drafters["over"] = CountingDrafter(tiny_gen.ctx, plain[prompt], n_prompt, overshoot=2)
    try:
        with pytest.raises(ps.PyllamaSpecError, match="proposed .* more than"):
            tiny_gen.generate(prompt, drafter="over", n_max=4, max_tokens=20)
    finally:
        del tiny_gen.drafters["over"]
    assert tiny_gen.generate(prompt, drafter="dflash", max_tokens=12).tokens == plain[prompt][:12]


def test_taps_follow_the_active_drafter(tiny_gen):
    ids = tiny_gen.drafters["dflash"].target_layer_ids
    tiny_gen.generate("x", drafter="dflash", max_tokens=3)
    assert tiny_gen.ctx.enabled_layer_inputs == sorted(ids)
    tiny_gen.generate("x", drafter="ngram", max_tokens=3)
    assert tiny_gen.ctx.enabled_layer_inputs == []
    tiny_gen.generate("x", max_tokens=3)
    assert tiny_gen.ctx.enabled_layer_inputs == []


def test_rejection_with_a_deterministic_drafter(tiny_gen):
    """n-gram drafts carry no probabilities: rejection sampling treats them as one-hot (exact)."""
    r = tiny_gen.generate(PROMPTS[2], drafter="ngram", temperature=0.8, seed=1, verify="rejection", max_tokens=40)
    assert r.verify == "rejection" and r.stats.n_drafted > 0
    assert r.stats.n_steps + r.stats.n_accepted == r.n_committed  # every step commits accepted + 1
    again = tiny_gen.generate(PROMPTS[2], drafter="ngram", temperature=0.8, seed=1, verify="rejection", max_tokens=40)
    assert again.tokens == r.tokens


# --- what ends the output, and what the statistics count (issue 12.6 / 12.7) ------------------

def _counted(r):
    """Every counter counts the same tokens: the delivered ones plus what ended them."""
    s = r.stats
    assert s.n_accepted + s.n_steps == r.n_committed == r.n_generated
    assert sum(s.acceptance_lengths) == s.n_accepted == sum(s.accepted_at)
    assert len(s.acceptance_lengths) == s.n_steps
    return r.n_committed


def _greedy_eos(gen):
    """A prompt whose greedy output ends with EOS after ≥ 3 tokens (found by probing: deterministic
    fixtures), its tokens, and the target's own greedy tokens after that EOS."""
    eos = gen.model.vocab.eos
    for t in range(0, 256, 3):
        prompt = [t, (7 * t + 3) % 256, 65]
        r = gen.generate(prompt_tokens=prompt, max_tokens=40)
        if r.finish_reason == "eos" and len(r.tokens) >= 3:
            after = gen.generate(prompt_tokens=prompt + r.tokens + [eos], max_tokens=3)
            return prompt, r.tokens, [eos] + after.tokens[:2]
    pytest.fail("no probe prompt ends with EOS")


def test_stats_stop_at_eos_inside_an_accepted_block(tiny_gen):
    """Regression: a block [..., EOS, t1, t2] accepted through EOS was cut correctly, but t1, t2
    still counted in n_accepted (acceptance and τ inflated)."""
    prompt, ref, tail = _greedy_eos(tiny_gen)
    chain = ref + tail  # what the target itself would commit, EOS included, and past it
    tiny_gen.drafters["oracle"] = OracleDrafter(tiny_gen.ctx, chain, len(prompt))
    try:
        r = tiny_gen.generate(prompt_tokens=prompt, drafter="oracle", n_max=len(chain), max_tokens=40)
    finally:
        del tiny_gen.drafters["oracle"]
    assert r.tokens == ref and r.finish_reason == "eos"
    assert r.stats.n_drafted >= len(chain) - 1  # the tokens past the EOS were drafted and verified ...
    assert _counted(r) == len(ref) + 1  # ... but only the output and its EOS count
    assert tiny_gen.ctx.memory.pos_max() < len(prompt) + len(ref)


def test_stats_on_every_other_cut(tiny_gen, plain):
    prompt = PROMPTS[0]
    n_prompt = len(tiny_gen.tokenize_prompt(prompt))
    ref = plain[prompt]
    full = tiny_gen.generate(prompt, max_tokens=48)
    text = full.text
    k = next(i for i in range(6, len(ref)) if ref[i] not in ref[:i])  # a token first seen at k
    tiny_gen.drafters["oracle"] = OracleDrafter(tiny_gen.ctx, ref, n_prompt)
    try:
        r = tiny_gen.generate(prompt, drafter="oracle", n_max=8, max_tokens=48, stop=[text[10:13]])
        assert r.finish_reason == "stop" and r.text == text[:10]
        n_through = next(n for n in range(1, 49) if len(tiny_gen.model.vocab.detokenize(ref[:n])) >= 13)
        assert _counted(r) == n_through  # through the stop string's last token, nothing after
        r = tiny_gen.generate(prompt, drafter="oracle", n_max=8, max_tokens=48, stop_token_ids=[ref[k]])
        assert r.finish_reason == "stop" and r.tokens == ref[:k] and _counted(r) == k + 1
        r = tiny_gen.generate(prompt, drafter="oracle", n_max=8, max_tokens=13)
        assert r.finish_reason == "length" and _counted(r) == 13
    finally:
        del tiny_gen.drafters["oracle"]


def test_stats_at_the_context_limit(tiny):
    gen = ps.Generator(tiny["target"], drafters={"ngram": "ngram"}, n_ctx=256, n_batch=64)
    r = gen.generate("ab" * 100, drafter="ngram", max_tokens=500)
    assert r.finish_reason == "context" and _counted(r) == len(r.tokens)
    gen.close()


def _sampled_special(gen, vocab):
    """A seed whose T=3 sample (near uniform over the 264 tokens) holds a special token other
    than the EOS after ≥ 2 tokens; the result and the special token's index."""
    specials = {t for t in range(vocab.n_tokens) if vocab.is_control(t)} - {vocab.eos}
    for seed in range(60):
        r = gen.generate(PROMPTS[0], max_tokens=60, temperature=3.0, seed=seed)
        hit = next((i for i, t in enumerate(r.tokens) if t in specials), None)
        if hit is not None and hit >= 2:
            return seed, r, hit
    pytest.fail("no sampled special token")


def test_special_tokens_render_and_stop(tiny_gen):
    """Issue 12.6: a special token was rendered as "" so stop=["<|im_start|>"] never fired."""
    vocab = tiny_gen.model.vocab
    seed, r, hit = _sampled_special(tiny_gen, vocab)
    tok = r.tokens[hit]
    name = vocab.token_to_piece(tok, special=True).decode()
    assert name.startswith("<|") and name not in r.text  # special=False: not rendered
    kw = dict(max_tokens=60, temperature=3.0, seed=seed)
    shown = tiny_gen.generate(PROMPTS[0], special=True, **kw)
    assert shown.tokens == r.tokens and name in shown.text
    assert shown.text.index(name) == len(vocab.detokenize(r.tokens[:hit]))
    for extra in ({"stop": [name]}, {"stop": [name], "special": True}, {"stop_token_ids": [tok]}):
        s = tiny_gen.generate(PROMPTS[0], **kw, **extra)
        assert s.finish_reason == "stop" and s.tokens == r.tokens[:hit], extra
        assert name not in s.text and _counted(s) == hit + 1


def test_model_drafters_use_the_generators_threads(tiny):
    gen = ps.Generator(tiny["target"], drafters={"dflash": tiny["dflash"]}, n_ctx=256, n_threads=1)
    assert gen.ctx.n_threads == gen.drafters["dflash"].ctx.n_threads == 1
    gen.close()


@pytest.mark.parametrize("drafter,n_max", [(None, None), ("dflash", 3), ("dflash", 7), ("ngram", 4)])
def test_backend_and_host_sampling_give_the_same_greedy_tokens(tiny_gen, plain, drafter, n_max):
    """The target's tokens drawn by llama.cpp's sampler chain in the decode graph (backend_sampling
    True), by the host's argmax (False) and by the default ('auto': the host at T = 0 on this small
    vocabulary) are the same, and equal plain decoding; with the backend the drafter's and target's chains
    are detached after."""
    outs = {}
    for backend in (True, False, "auto"):
        spec = ps.SpecConfig(drafter=drafter, n_max=n_max, backend_sampling=backend)
        r = tiny_gen.generate(PROMPTS[0], max_tokens=40, spec=spec)
        outs[backend] = r.tokens
        assert not tiny_gen.ctx.samplers  # the target's chain never outlives its generation
    assert outs[True] == outs[False] == outs["auto"] == plain[PROMPTS[0]][:40]


def test_backend_sampling_at_temperature_draws_valid_seeded_tokens(tiny_gen):
    """At T > 0 'auto' samples on the backend: reproducible for one seed, different across seeds."""
    sp = dict(max_tokens=24, temperature=0.9)
    a = tiny_gen.generate(PROMPTS[0], seed=3, **sp).tokens
    b = tiny_gen.generate(PROMPTS[0], seed=3, **sp).tokens
    c = [tiny_gen.generate(PROMPTS[0], seed=s, **sp).tokens for s in range(4, 8)]
    assert a == b and any(x != a for x in c)
    assert all(0 <= t < tiny_gen.model.n_vocab for t in a)


def test_auto_draws_greedy_tokens_in_the_graph_on_large_vocabularies(tiny_gen, plain, monkeypatch):
    """'auto' at T = 0: the host's argmax below BACKEND_GREEDY_MIN_VOCAB tokens, the graph's from it
    on (a 151 936-token vocabulary's host argmax costs ~75 µs a verify row); T > 0 always the graph;
    True / False force either. The tokens stay plain decoding's either way."""
    from pyllama_spec.context import Context
    from pyllama_spec.speculative import config

    use = config.use_backend_sampling
    assert use("auto", True, 151_936) and not use("auto", True, 49_152) and use("auto", False, 49_152)
    assert use(True, True, 10) and not use(False, False, 10**6)
    attached = []
    real = Context.set_sampler

    def spy(self, chain, seq_id=0):
        if self is tiny_gen.ctx:  # the target's context (a drafter's has its own chains)
            attached.append(chain is not None)
        return real(self, chain, seq_id)

    monkeypatch.setattr(Context, "set_sampler", spy)
    spec = ps.SpecConfig(drafter="dflash", n_max=3)
    assert tiny_gen.generate(PROMPTS[0], max_tokens=24, spec=spec).tokens == plain[PROMPTS[0]][:24]
    host_run, attached[:] = list(attached), []
    monkeypatch.setattr(config, "BACKEND_GREEDY_MIN_VOCAB", tiny_gen.model.n_vocab)  # "large" from this vocabulary
    assert tiny_gen.generate(PROMPTS[0], max_tokens=24, spec=spec).tokens == plain[PROMPTS[0]][:24]
    assert True not in host_run and True in attached


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_backend_sampling_values(bad):
    with pytest.raises(ps.errors.InvalidTypeError, match="backend_sampling"):
        ps.SpecConfig(backend_sampling=bad)
    assert ps.SpecConfig(backend_sampling=np.bool_(True)).backend_sampling is True


def test_rejection_reads_supports_rejection_and_checks_the_probabilities(tiny_gen, plain):
    """verify='rejection' at T > 0 takes q only from a drafter that declares it; a q of the wrong
    shape, or none from a drafter that declares it, raises a library error naming the drafter, and
    the Generator stays usable."""
    n_vocab = tiny_gen.model.n_vocab

    class Fixed(Drafter):
        kind = "fixed-probs-test"
        supports_rejection = True
        probs_shape: tuple | None = (2, n_vocab)

        def propose(self, last_token, n_past, n_max, sp, rng, timer):
            toks = [5, 6][:n_max]
            if self.probs_shape is None:
                return Draft(tokens=toks)
            q = np.full(self.probs_shape, 1.0 / self.probs_shape[-1])
            return Draft(tokens=toks, probs=q[:len(toks)] if self.probs_shape[0] == 2 else q)

    d = Fixed(tiny_gen.ctx)
    tiny_gen.add_drafter("fixed", d)
    try:
        kw = dict(drafter="fixed", n_max=2, max_tokens=12, temperature=0.9, seed=1, verify="rejection")
        r = tiny_gen.generate(PROMPTS[0], **kw)
        assert r.stats.n_drafted > 0 and (len(r.tokens) == 12 or r.finish_reason == "eos")
        d.probs_shape = (2, n_vocab - 1)
        with pytest.raises(ps.InvalidArgumentError, match="fixed-probs-test.*shape"):
            tiny_gen.generate(PROMPTS[0], **kw)
        d.probs_shape = None
        with pytest.raises(ps.PyllamaSpecError, match="supports_rejection=True but returned no probabilities"):
            tiny_gen.generate(PROMPTS[0], **kw)
        type(d).supports_rejection = False  # then q is one-hot at the draft tokens: no probabilities needed
        r = tiny_gen.generate(PROMPTS[0], **kw)
        assert r.stats.n_drafted > 0 and (len(r.tokens) == 12 or r.finish_reason == "eos")
        assert tiny_gen.generate(PROMPTS[0], max_tokens=48).tokens == plain[PROMPTS[0]]
    finally:
        del tiny_gen.drafters["fixed"]
