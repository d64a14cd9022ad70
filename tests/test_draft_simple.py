"""draft-simple: a separate draft model (issue 9) against llama.cpp's ``--spec-type draft-simple``."""
import pytest

import pyllama_spec as ps
from pyllama_spec import drafter_fixtures, fixtures
from pyllama_spec.speculative.drafters import create_drafter, drafter_kind_of_file
from pyllama_spec.speculative.drafters.draft_simple import DraftModelDrafter

from .drafter_helpers import assert_in_graph_drafts_equal_the_host_argmax, compare_with_native

# prompts whose greedy continuation on the target ends at EOS (23 and 34 tokens): both loops
# then make the same steps, so their totals must agree too
PROMPT = "hello there, how are you"
PROMPT2 = "once upon a time"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A bigram-ish tiny target and three draft models: an exact copy (always right), a noisy copy
    (partly right) and an unrelated small model with the same vocabulary (rarely right)."""
    d = tmp_path_factory.mktemp("draft_simple")
    t = d / "target.gguf"
    info = fixtures.write_tiny_target(t, arch="llama", n_layer=2, n_embd=64, seed=11, layer_scale=0.5)
    drafter_fixtures.write_draft_model(d / "copy.gguf", target=t)
    drafter_fixtures.write_draft_model(d / "noisy.gguf", target=t, noise=0.6, seed=1)
    fixtures.write_tiny_target(d / "small.gguf", arch="qwen3", n_layer=1, n_embd=32, n_head=2, n_head_kv=1, n_ff=64,
                               seed=12)
    return {"target": t, "copy": d / "copy.gguf", "noisy": d / "noisy.gguf", "small": d / "small.gguf", "dir": d,
            **info}


@pytest.fixture(scope="module")
def gen(pair):
    g = ps.Generator(pair["target"], drafters={k: pair[k] for k in ("copy", "noisy", "small")},
                     n_ctx=1024, n_batch=64, n_ubatch=32)
    yield g
    g.close()


@pytest.mark.parametrize("name,n_max", [("copy", 3), ("noisy", 1), ("noisy", 4), ("small", 3)])
def test_matches_native_token_for_token(gen, pair, name, n_max):
    ours, nat, steps = compare_with_native(gen, name, target=pair["target"], drafter_file=pair[name],
                                           spec_type="draft-simple", prompt=PROMPT if n_max != 4 else PROMPT2,
                                           n_max=n_max)
    if name == "copy":
        assert ours.stats.acceptance_rate == 1.0
    elif name == "noisy":
        assert 0.0 < ours.stats.acceptance_rate < 1.0


def test_p_min_stops_drafts_like_native(gen, pair):
    full, _, _ = compare_with_native(gen, "noisy", target=pair["target"], drafter_file=pair["noisy"],
                                     spec_type="draft-simple", prompt=PROMPT2, n_max=5)
    ours, nat, steps = compare_with_native(gen, "noisy", target=pair["target"], drafter_file=pair["noisy"],
                                           spec_type="draft-simple", prompt=PROMPT2, n_max=5, p_min=0.6)
    assert ours.tokens == full.tokens
    assert any(d < 5 for _, d in steps[:-2])  # some drafts stopped early
    assert ours.stats.acceptance_rate > full.stats.acceptance_rate  # ... and what is left is surer


def test_lossless_and_kind_from_file(gen, pair):
    plain = gen.generate(PROMPT, max_tokens=30)
    for name in ("copy", "noisy", "small"):
        assert gen.drafters[name].kind == "draft-simple"
        assert gen.generate(PROMPT, drafter=name, n_max=4, max_tokens=30).tokens == plain.tokens
    assert drafter_kind_of_file(pair["copy"]) == "draft-simple"
    assert create_drafter("draft", gen.ctx, path=pair["copy"]).kind == "draft-simple"


def test_greedy_drafts_drawn_in_the_graph_equal_the_host_argmax(gen):
    """A greedy draft with no p_min cut is drawn in the draft model's decode graph (a token id per decode, no row
    of logits read back): the same drafts, step for step, as the host's argmax over the logits; a generation whose
    drafts are sampled (rejection sampling needs their distributions) takes the sampler off in between and the
    next greedy one puts it back."""
    assert_in_graph_drafts_equal_the_host_argmax(gen, "noisy", PROMPT2, PROMPT)


def test_a_backend_that_refuses_the_chain_falls_back_to_the_host(gen, monkeypatch, caplog):
    """Where llama.cpp cannot run the greedy chain on the draft context, the drafter warns, turns
    ``backend_sampling`` off and draws on the host: the generation still runs, with the same tokens."""
    d = gen.drafters["copy"]
    d.backend_sampling = False
    ref = gen.generate(PROMPT, drafter="copy", n_max=3, max_tokens=16)
    d.backend_sampling = True

    def refuse(chain, seq_id=0):
        raise ps.UnsupportedError("llama.cpp cannot run the sampler chain on this context's backend (test)")

    monkeypatch.setattr(d.ctx, "set_sampler", refuse)  # (the draft context only: the target's keeps its own)
    with caplog.at_level("WARNING", logger="pyllama_spec"):
        r = gen.generate(PROMPT, drafter="copy", n_max=3, max_tokens=16)
    assert r.tokens == ref.tokens and r.stats.acceptance_lengths == ref.stats.acceptance_lengths
    assert d.backend_sampling is False and "drawing the drafts on the host" in caplog.text
    monkeypatch.undo()
    d.backend_sampling = True


@pytest.mark.parametrize("max_rest", [3, 12])
def test_auto_rests_defer_the_draft_models_rows_to_the_probe(gen, max_rest):
    """n_max="auto" resting (a cost model where nothing pays): the resting steps' committed rows go into the draft
    model in one batch before the probe's draft instead of one decode per step — the drafts are those of decoding
    each row as it came, and the output is plain decoding's."""
    from .test_auto_rest import _auto_with_probes

    ref = gen.generate(PROMPT2, max_tokens=48, reuse_prefix=False)
    d = gen.drafters["noisy"]
    decodes = []
    orig = d.ctx.decode

    def counting(tokens, *a, **k):
        decodes.append(len(tokens))
        return orig(tokens, *a, **k)

    d.ctx.decode = counting
    try:
        r1, deferred = _auto_with_probes(gen, PROMPT2, name="noisy", max_rest=max_rest)
        n_deferred = list(decodes)
        decodes.clear()
        r2, each = _auto_with_probes(gen, PROMPT2, name="noisy", max_rest=max_rest, deferred=False)
    finally:
        del d.ctx.decode
    assert r1.tokens == r2.tokens == ref.tokens
    assert [n for n, _ in deferred] == [n for n, _ in each] and len(deferred) >= 1
    assert [t for _, t in deferred] == [t for _, t in each]  # (f32 fixtures: the same drafts)
    # every resting step decoded its row into the draft model before; now a rest costs it nothing
    assert len(n_deferred) < len(decodes) and max(n_deferred) >= min(max_rest, 8)


def test_rejection_sampling_runs_with_draft_probabilities(gen):
    r = gen.generate(PROMPT, drafter="noisy", n_max=3, max_tokens=24, temperature=0.8, seed=3, verify="rejection")
    assert len(r.tokens) == 24 and r.stats.n_drafted > 0 and r.stats.n_accepted > 0


def test_memory_report_has_its_own_kv_cache(gen):
    mem = gen.memory_report()["drafters"]["small"]
    assert mem["kv_cache_mib"] > 0 and mem["weights_mib"] > 0


def _mismatched(pair, name, **set_kv):
    out = pair["dir"] / f"{name}.gguf"
    if not out.exists():
        drafter_fixtures.copy_gguf(pair["copy"], out, set_kv=set_kv)
    return out


def test_incompatible_vocabularies_raise(gen, pair):
    target_vocab = gen.model.vocab
    tokens = [target_vocab.raw_text(i) for i in range(target_vocab.n_tokens)]
    tokens[100] = b"zz"
    bad_text = _mismatched(pair, "bad_text", **{"tokenizer.ggml.tokens": tokens})
    with pytest.raises(ps.DrafterMismatchError, match=r"token 100 is b'zz'.*differ"):
        DraftModelDrafter(gen.ctx, bad_text)
    bad_bos = _mismatched(pair, "bad_bos", **{"tokenizer.ggml.add_bos_token": True})
    with pytest.raises(ps.DrafterMismatchError, match=r"BOS token \(added: True vs False"):
        gen.add_drafter("x", bad_bos)
    assert "x" not in gen.drafters
    assert gen.generate(PROMPT, drafter="copy", max_tokens=4).stats.n_steps > 0  # still usable


@pytest.mark.smollm2
def test_smollm2_q4_1_drafting_for_its_f16_copy_matches_native(smollm2):
    """The real stand-in pair: SmolLM2 Q4_1 drafts for the same weights in f16 (assets.smollm2_f16_path)."""
    from pyllama_spec.assets import smollm2_f16_path

    f16 = smollm2_f16_path()
    with ps.Generator(f16, drafters={"q4_1": smollm2}, n_ctx=1024, n_batch=256) as g:
        ours, nat, steps = compare_with_native(g, "q4_1", target=f16, drafter_file=smollm2, spec_type="draft-simple",
                                               prompt="Write a JavaScript debounce function.", n_max=4,
                                               max_tokens=32)
        assert ours.stats.acceptance_rate > 0.6
