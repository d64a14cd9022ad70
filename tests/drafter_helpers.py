"""Helpers shared by the model-drafter tests: run our loop and llama.cpp's
``llama-speculative-simple`` on the same files and compare them step by step."""
from __future__ import annotations

from pyllama_spec.native import run_speculative_simple

from .conftest import EXACT, native_or_skip


def pieces(vocab, tokens) -> bytes:
    return b"".join(vocab.token_to_piece(t, special=True) for t in tokens)


def record_steps(drafter):
    """Make ``drafter`` record ``(n_accepted, n_drafted)`` per verify step (through its on_accept
    hook); returns the list and the function that stops recording."""
    steps = []
    orig = drafter.on_accept

    def on_accept(n_drafted, n_accepted):
        steps.append((n_accepted, n_drafted))
        orig(n_drafted, n_accepted)

    drafter.on_accept = on_accept
    return steps, lambda: drafter.__dict__.pop("on_accept", None)


def compare_with_native(gen, name: str, *, target, drafter_file, spec_type: str, prompt: str, n_max: int,
                        max_tokens: int = 40, p_min: float | None = None, n_ctx: int = 1024, block: bool = False):
    """Generate with drafter ``name`` and with the native program; assert the same tokens and the
    same ``(n_accepted, n_drafted)`` at every verify step both loops make alike.

    Near the token budget the loops differ by design: with ``b`` tokens left both draft
    ``min(n_max, b - 1)``, but at ``b = 1`` we stop drafting while the native program drafts a
    full block (and may run one step more). Block drafters (``block=True``: DFlash, DSpark)
    decode their whole configured block and truncate it natively, while we decode a shorter
    block when the budget is short, so for them only the steps with a full budget compare.
    The comparison covers every step before that point. Returns ``(result, native_run, steps)``.
    """
    native_or_skip("llama-speculative-simple")
    d = gen.drafters[name]
    steps, stop = record_steps(d)
    old_p_min = getattr(d, "p_min", None)
    try:
        if p_min is not None:
            d.p_min = p_min
        ours = gen.generate(prompt, drafter=name, n_max=n_max, max_tokens=max_tokens)
    finally:
        stop()
        if p_min is not None:
            d.p_min = old_p_min
    nat = run_speculative_simple(target, drafter_file, prompt, n_max=n_max, n_predict=max_tokens, n_ctx=n_ctx,
                                 spec_type=spec_type, p_min=p_min, verbose=True)
    vocab = gen.model.vocab
    expected = pieces(vocab, ours.prompt_tokens) + pieces(vocab, ours.tokens)
    n_same, n_out = 0, 0
    for acc, _ in steps:
        budget = max_tokens - n_out - 1
        if budget <= 0 or (block and budget < n_max):
            break
        n_same += 1
        n_out += acc + 1
    assert n_same > 0
    assert sum(a for a, _ in steps) == ours.stats.n_accepted and sum(x for _, x in steps) == ours.stats.n_drafted
    if EXACT:
        assert nat.stdout.lstrip(b"\n").startswith(expected), (nat.stdout, expected)
        assert steps[:n_same] == nat.steps[:n_same], (steps, nat.steps)
        if ours.finish_reason == "eos":  # both stopped at the same step: the totals agree too
            assert (nat.n_drafted, nat.n_accept) == (ours.stats.n_drafted, ours.stats.n_accepted)
    return ours, nat, steps


__all__ = ["pieces", "record_steps", "compare_with_native"]


def assert_rests_defer_rows(gen, name: str, prompt: str, max_rest: int, method: str = "decode_tokens_embd",
                            max_tokens: int = 48) -> None:
    """n_max="auto" resting (a cost model where nothing pays) with drafter ``name``, its resting rows deferred to the
    probe and, again, observed as they came: the same output as plain decoding both ways, the same drafts at the
    same probes, and fewer batches into the drafter's context (``method`` of ``drafter.ctx`` counted), the
    largest holding a rest's rows (at most the context's n_batch: a longer rest goes in batches)."""
    from .test_auto_rest import _auto_with_probes

    ref = gen.generate(prompt, max_tokens=max_tokens, reuse_prefix=False)
    ctx = gen.drafters[name].ctx
    batches = []
    orig = getattr(ctx, method)

    def counting(tokens, *a, **k):
        batches.append(len(tokens))
        return orig(tokens, *a, **k)

    setattr(ctx, method, counting)
    try:
        r1, deferred = _auto_with_probes(gen, prompt, name=name, max_rest=max_rest, max_tokens=max_tokens)
        n_deferred = list(batches)
        batches.clear()
        r2, each = _auto_with_probes(gen, prompt, name=name, max_rest=max_rest, deferred=False, max_tokens=max_tokens)
    finally:
        delattr(ctx, method)
    assert r1.tokens == r2.tokens == ref.tokens
    assert [n for n, _ in deferred] == [n for n, _ in each] and len(deferred) >= 2
    assert [t for _, t in deferred] == [t for _, t in each] and any(t for _, t in deferred)
    assert len(n_deferred) < len(batches) and max(n_deferred) >= min(max_rest, 8, ctx.n_batch)


def assert_in_graph_drafts_equal_the_host_argmax(gen, name: str, prompt: str, sampled_prompt: str) -> None:
    """Drafter ``name`` (a ``ModelDrafter`` with ``backend_sampling``) draws greedy drafts in its decode graph (a
    sampler on its context) with the same drafts, step for step, as the host's argmax with the switch off; a
    sampled generation (rejection sampling needs the distributions) takes the sampler off, the next greedy one puts
    it back."""
    d = gen.drafters[name]
    runs: dict[bool, list] = {}
    for in_graph in (True, False, True):
        d.backend_sampling = in_graph
        r = gen.generate(prompt, drafter=name, n_max=4, max_tokens=30)
        assert (0 in d.ctx.samplers) == in_graph
        runs.setdefault(in_graph, []).append(r)
        s = gen.generate(sampled_prompt, drafter=name, n_max=3, max_tokens=12, temperature=0.8, seed=3,
                         verify="rejection")
        assert 0 not in d.ctx.samplers and s.stats.n_drafted > 0
    d.backend_sampling = True
    a, b, c = runs[True][0], runs[False][0], runs[True][1]
    assert a.tokens == b.tokens == c.tokens
    assert a.stats.acceptance_lengths == b.stats.acceptance_lengths == c.stats.acceptance_lengths
    assert a.stats.n_drafted == b.stats.n_drafted and 0 < a.stats.n_accepted < a.stats.n_drafted
