"""Token-tree verification through the loop (tiny fixtures; SmolLM2 marked): at T = 0 the output is
plain decoding's, whichever branch is accepted; before each step every branch sequence the generation
has used holds exactly the committed positions, as sequence 0 does, and the others nothing; after the
generation only sequence 0 holds cells; the DFlash drafter gets the accepted path's features; bad
settings raise clear errors."""
import numpy as np
import pytest

import pyllama_spec as ps
from pyllama_spec.speculative.drafters import Drafter
from pyllama_spec.speculative.drafters.dflash import DFlashDrafter
from pyllama_spec.speculative.tree import TreeDraft

from .conftest import assert_same_tokens

PROMPTS = ["hello there, how are you", "def add(a, b):\n    return", "Once upon a time " * 6]


def _cache_is_committed_only(ctx, n_past):
    mem = ctx.memory
    assert mem.pos_max(0) == n_past - 1
    assert all(mem.pos_max(s) == -1 for s in range(1, ctx.n_seq_max))


def _branches_mirror_committed(ctx, n_past):
    """Between tree steps: sequence 0 and the branch sequences in use (``tree_step.BranchSeqs``: 0..n-1)
    hold exactly ``[0, n_past)``, every later one nothing."""
    mem = ctx.memory
    held = [(mem.pos_min(s), mem.pos_max(s)) for s in range(ctx.n_seq_max)]
    n = sum(h != (-1, -1) for h in held)
    assert held[:n] == [(0, n_past - 1)] * n and n >= 1, held
    assert all(h == (-1, -1) for h in held[n:]), held


class OracleTree(Drafter):
    """A tree whose correct branch (the known target continuation) is always the *last* child, under
    wrong siblings: the accepted path then runs through branch sequences other than 0."""
    kind = "oracle-tree-test"
    supports_tree = True
    n_max_limit = 8

    def __init__(self, target, reference, n_prompt, fanout=2, wrong_at=()):
        super().__init__(target)
        self.ref, self.n_prompt, self.fanout, self.wrong_at = reference, n_prompt, fanout, set(wrong_at)
        self.steps = []

    def propose(self, *a):
        raise AssertionError("a tree drafter with a budget is asked for trees")

    def propose_tree(self, last_token, n_past, n_max, budget, sp, rng, timer):
        _branches_mirror_committed(self.target, n_past)
        start = n_past + 1 - self.n_prompt
        truth = list(self.ref[start:start + n_max])
        tokens, parents, parent = [], [], -1
        for d, t in enumerate(truth):
            if len(tokens) + self.fanout > budget:
                break
            for w in range(1, self.fanout):  # wrong siblings first
                tokens.append((t + w) % 256)
                parents.append(parent)
            tokens.append((t + self.fanout) % 256 if start + d in self.wrong_at else t)
            parents.append(parent)
            parent = len(tokens) - 1
        self.steps.append((n_past, len(tokens)))
        return TreeDraft(tokens=tokens, parents=np.array(parents, dtype=np.int64))

    def observe_rows(self, tokens, positions, rows, timer):
        assert rows[0] == 0 and list(np.diff(positions[rows])) == [1] * (len(rows) - 1)


@pytest.fixture(scope="module")
def tree_gen(tiny):
    gen = ps.Generator(tiny["target"], drafters={"dflash": tiny["dflash"], "ngram": "ngram"}, n_ctx=1024,
                       n_batch=64, n_ubatch=32, tree=16)
    yield gen
    gen.close()


@pytest.fixture(scope="module")
def plain(tree_gen):
    return {p: tree_gen.generate(p, max_tokens=40).tokens for p in PROMPTS}


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("fanout,wrong_at", [(2, ()), (3, ()), (3, (2, 9, 10, 20))])
def test_oracle_tree_is_lossless_through_any_branch(tree_gen, plain, prompt, fanout, wrong_at):
    n_prompt = len(tree_gen.tokenize_prompt(prompt))
    d = tree_gen.add_drafter("oracle", OracleTree(tree_gen.ctx, plain[prompt], n_prompt, fanout, wrong_at))
    r = tree_gen.generate(prompt, spec=ps.SpecConfig(drafter="oracle", n_max=6, tree=16), max_tokens=40)
    assert_same_tokens(r.tokens, plain[prompt])
    assert r.stats.n_steps * 1 + r.stats.n_accepted == 40
    if not wrong_at:  # every step accepts its whole correct branch (16 nodes hold 16 // fanout of it)
        assert r.stats.mean_accepted_length >= min(6, 16 // fanout) - 1
    _cache_is_committed_only(tree_gen.ctx, n_prompt - 1 + 40)
    assert len(d.steps) >= r.stats.n_steps - 1  # (a last step with one token left drafts nothing)


class CheckedDFlash(DFlashDrafter):
    """The DFlash drafter, asserting both caches hold exactly the committed positions at each step, and
    that each tree verify injects the accepted path's rows (the root's and the path's, in order)."""
    kind = "dflash-tree-test"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.trees, self.injected = [], []

    def propose_tree(self, last_token, n_past, n_max, budget, sp, rng, timer):
        _branches_mirror_committed(self.target, n_past)
        held = self.ctx.memory.pos_max(0)
        if self._pending is not None:  # fused: the last step's rows are staged for this draft decode
            pending = self._pending[1]
            assert pending[0] == held + 1 and pending[-1] == n_past - 1
        else:
            assert held == n_past - 1
        assert len(self._tokens) == n_past
        t = super().propose_tree(last_token, n_past, n_max, budget, sp, rng, timer)
        self.trees.append(t)
        return t

    def observe_rows(self, tokens, positions, rows, timer):
        self.injected.append(([tokens[r] for r in rows], positions[rows].tolist()))
        super().observe_rows(tokens, positions, rows, timer)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("budget", [1, 4, 16])
def test_dflash_tree_is_lossless_and_injects_the_path(tree_gen, plain, budget, fused):
    d = tree_gen.add_drafter("checked", CheckedDFlash(tree_gen.ctx, tree_gen.drafters["dflash"].model.path,
                                                      fused_inject=fused))
    d.tree_full_softmax = not fused  # both ways of ranking the nodes (full softmax / the backend's 10 candidates)
    try:
        for prompt in PROMPTS[:2]:
            d.trees.clear()
            d.injected.clear()
            r = tree_gen.generate(prompt, spec=ps.SpecConfig(drafter="checked", n_max=7, tree=budget),
                                  max_tokens=40)
            assert_same_tokens(r.tokens, plain[prompt])
            assert all(len(t) <= budget and t.max_depth <= 7 for t in d.trees)
            if budget == 16:
                assert max(len(t.leaves()) for t in d.trees) > 1  # real trees, not chains
            # the drafter got exactly the committed tokens at their positions
            n_prompt = len(tree_gen.tokenize_prompt(prompt))
            toks = [t for inj, _ in d.injected for t in inj]
            pos = [p for _, ps_ in d.injected for p in ps_]
            full = tree_gen.tokenize_prompt(prompt) + r.tokens
            assert pos == list(range(n_prompt - 1, n_prompt - 1 + len(pos)))
            assert toks == full[n_prompt - 1:n_prompt - 1 + len(toks)]
    finally:
        tree_gen.drafters.pop("checked").close()


def test_trees_ranked_in_the_graph_equal_the_host_full_softmax(tree_gen, plain):
    """Patch 0011: the full softmax taken in the decode graph (the 10 best of each row with their
    log-probabilities) gives the trees the host's float64 log softmax of the copied logits gives."""
    d = tree_gen.add_drafter("checked", CheckedDFlash(tree_gen.ctx, tree_gen.drafters["dflash"].model.path,
                                                      fused_inject=False))
    try:
        trees = {}
        for in_graph in (True, False):
            d.tree_logprobs_in_graph = in_graph
            d.trees.clear()
            r = tree_gen.generate(PROMPTS[0], spec=ps.SpecConfig(drafter="checked", n_max=7, tree=16), max_tokens=40)
            assert_same_tokens(r.tokens, plain[PROMPTS[0]])
            trees[in_graph] = list(d.trees)
        a, b = trees[True], trees[False]
        assert len(a) == len(b) and len(a) > 3
        same = [list(x.tokens) == list(y.tokens) and list(x.parents) == list(y.parents) for x, y in zip(a, b)]
        # (float32 in the graph against float64 on the host: two paths of near-equal probability in different
        # rows may swap, so not every tree need be the same even on the CPU)
        assert np.mean(same) >= 0.9
    finally:
        tree_gen.drafters.pop("checked").close()


def test_dflash_tree_drafts_equal_the_chain_at_budget_n_max(tree_gen, plain):
    """A tree of budget 1 is the chain's first token; the chain's draft is the tree's first branch
    when the rows are confident (same block decode): the first node of every tree is the chain's first token."""
    prompt = PROMPTS[2]
    chain = tree_gen.generate(prompt, spec=ps.SpecConfig(drafter="dflash", n_max=7, tree=0), max_tokens=40)
    tree = tree_gen.generate(prompt, spec=ps.SpecConfig(drafter="dflash", n_max=7, tree=16), max_tokens=40)
    assert chain.tokens == tree.tokens == plain[prompt]
    assert tree.stats.n_steps <= chain.stats.n_steps


@pytest.mark.parametrize("verify", ["match", "rejection"])
def test_tree_at_temperature_is_reproducible(tree_gen, verify):
    # both cold: on a GPU a kept prefix differs from a cold prefill in the last bits (other batch shapes), and
    # at T > 0 the rejection rule's ratios see them (the H200 parted the two runs, 2026-12-02)
    kw = dict(max_tokens=24, temperature=0.9, top_k=20, seed=5, reuse_prefix=False)
    spec = ps.SpecConfig(drafter="dflash", n_max=5, tree=8, verify=verify)
    a = tree_gen.generate(PROMPTS[0], spec=spec, **kw)
    b = tree_gen.generate(PROMPTS[0], spec=spec, **kw)
    assert a.tokens == b.tokens and a.finish_reason == b.finish_reason
    # 24 tokens, or fewer where the sampled answer ends at an EOS (the H200's kernels draw another answer)
    assert len(a.tokens) == 24 or a.finish_reason == "eos"
    # the cache holds the prompt and every committed token but the newest (an EOS is committed, not output)
    _cache_is_committed_only(tree_gen.ctx, len(tree_gen.tokenize_prompt(PROMPTS[0])) - 1 + a.n_committed)


def test_tree_settings_are_validated(tiny, tree_gen):
    with pytest.raises(ps.InvalidArgumentError, match="tree"):
        ps.SpecConfig(drafter="dflash", tree=-1)
    with pytest.raises(ps.InvalidArgumentError, match="tree"):
        ps.SpecConfig(drafter="dflash", tree=1000)
    with pytest.raises(ps.InvalidArgumentError, match="create the Generator with tree=32"):
        tree_gen.generate("x", spec=ps.SpecConfig(drafter="dflash", tree=32), max_tokens=2)
    with pytest.raises(ps.UnsupportedError, match="chains only"):
        tree_gen.generate("x", spec=ps.SpecConfig(drafter="ngram", tree=8), max_tokens=2)
    with pytest.raises(ps.UnsupportedError, match="auto"):
        tree_gen.generate("x", spec=ps.SpecConfig(drafter="dflash", n_max="auto", tree=8), max_tokens=2)
    with pytest.raises(ps.InvalidArgumentError, match="tree"):
        ps.Generator(tiny["target"], tree=-2)
    with pytest.raises(ps.UnsupportedError, match="n_parallel"):
        ps.Generator(tiny["target"], tree=4, n_parallel=2)
    # the generator's default applies to tree drafters only; the others draft chains
    assert tree_gen.generate("x", drafter="ngram", max_tokens=3).spec.tree == 0
    assert tree_gen.generate("x", drafter="dflash", max_tokens=3).spec.tree == 16
    assert len(tree_gen.generate("x", drafter="dflash", max_tokens=3).tokens) == 3  # still usable


def test_context_too_small_for_a_tree(tiny):
    gen = ps.Generator(tiny["target"], drafters={"dflash": tiny["dflash"]}, n_ctx=256, n_batch=64)
    try:
        from pyllama_spec.speculative.tree_step import check_tree_context

        with pytest.raises(ps.InvalidArgumentError, match="kv_unified"):
            check_tree_context(gen.ctx, 4)
        with pytest.raises(ps.InvalidArgumentError):
            gen.generate("x", spec=ps.SpecConfig(drafter="dflash", tree=4), max_tokens=2)
    finally:
        gen.close()


def test_decode_seq_sets_rejects_bad_sets(tree_gen):
    ctx = tree_gen.ctx
    ctx.memory.clear()
    with pytest.raises(ps.InvalidArgumentError):
        ctx.decode_seq_sets([1, 2], [0, 1], [[0], [99]])
    with pytest.raises(ps.InvalidBatchError):
        ctx.decode_seq_sets([1, 2], [0, 1], [[0]])
    with pytest.raises(ps.PyllamaSpecError):  # llama.cpp refuses a gap in a sequence's positions
        ctx.decode_seq_sets([1, 2], [0, 5], [[0, 1], [0]])
    ctx.decode_seq_sets([1, 2, 3], [0, 1, 1], [[0, 1], [0], [1]])  # a 2-branch tree: fine
    assert ctx.logits().shape[0] == 3
    ctx.memory.clear()


@pytest.mark.smollm2
def test_smollm2_tree_is_lossless(smollm2):
    from pyllama_spec.assets import random_dflash_for_smollm2

    gen = ps.Generator(smollm2, drafters={"dflash": random_dflash_for_smollm2()}, n_ctx=1024, n_batch=256, tree=16)
    try:
        prompt = "The capital of France is"
        plain = gen.generate(prompt, max_tokens=32).tokens
        gen.ctx.reset_perf()
        r = gen.generate(prompt, spec=ps.SpecConfig(drafter="dflash", n_max=7, tree=16), max_tokens=32)
        assert_same_tokens(r.tokens, plain)
        _cache_is_committed_only(gen.ctx, len(gen.tokenize_prompt(prompt)) - 1 + 32)
        # the verify batches have the same sequences whatever the trees' shapes, so llama.cpp reuses the
        # target's graph (on CUDA: replays it) at every step but the first and where its KV view grows
        # (the root in the tree's own branches only: reused at none of 24 steps)
        assert gen.ctx.perf()["n_reused"] >= r.stats.n_steps - 4, (gen.ctx.perf(), r.stats.n_steps)
    finally:
        gen.close()


def _random_tree(rng, n, vocab):
    parents = [-1]
    for i in range(1, n):
        parents.append(int(rng.integers(-1, i)))
    kids: dict = {}
    tokens = []
    for p in parents:  # distinct siblings
        used = kids.setdefault(p, set())
        t = int(rng.integers(0, vocab))
        while t in used:
            t = int(rng.integers(0, vocab))
        used.add(t)
        tokens.append(t)
    return TreeDraft(tokens=tokens, parents=np.array(parents))


@pytest.mark.parametrize("seed", range(4))
def test_tree_attention_rows_equal_their_paths_decoded_alone(tree_gen, seed):
    """Every node's row of one tree decode holds the logits of its own path decoded as a chain (a node sees
    the prefix and its ancestors only), for random tree shapes; afterwards the kept path is exact too."""
    from pyllama_spec.speculative.tree_step import tree_verify_step  # noqa: F401 - (the module under test)

    from .conftest import close_logits

    ctx = tree_gen.ctx
    rng = np.random.default_rng(seed)
    prefix = [int(t) for t in rng.integers(1, 200, size=9)]
    tree = _random_tree(rng, 16, 200)
    leaves, sets = tree.seq_sets()
    ctx.set_sampler(None)
    ctx.memory.clear()
    ctx.decode(prefix, np.arange(len(prefix)), logits="none")
    for s in range(1, len(leaves)):
        ctx.memory.seq_cp(0, s)
    n_past = len(prefix)
    pos = n_past + np.concatenate([[0], tree.depths])
    ctx.decode_seq_sets([5] + tree.tokens, pos, [list(range(len(leaves)))] + sets)
    rows = np.array(ctx.logits()).copy()
    for i in range(len(tree)):
        path = [5] + [tree.tokens[j] for j in tree.path(i)]
        ctx.memory.clear()
        ctx.decode(prefix + path, np.arange(n_past + len(path)), logits="last")
        close_logits(rows[i + 1], np.array(ctx.logits()[-1]))
    ctx.memory.clear()
    tree_gen._ledger.forget()


def test_tree_turn_cut_by_a_stop_token_keeps_its_prefix_for_the_next(tree_gen, plain):
    """A tree generation ended early (a stop token closes the loop) leaves only sequence 0 and a valid
    prefix record: the next turn reuses it and still equals plain decoding."""
    prompt = PROMPTS[1]
    ref = plain[prompt]
    j = next(i for i in range(6, len(ref)) if ref[i] not in ref[:i])  # a token first seen at i
    spec = ps.SpecConfig(drafter="dflash", n_max=7, tree=16)
    r = tree_gen.generate(prompt, spec=spec, max_tokens=40, stop_token_ids=[ref[j]])
    assert r.tokens == ref[:j] and r.finish_reason == "stop"
    toks = tree_gen.tokenize_prompt(prompt)
    # the ledger still knows what sequence 0 holds: the prompt and the committed tokens of every step up
    # to the one with the stop token (that step's later tokens included), but the newest
    ledger = tree_gen._ledger
    held = ledger.tokens
    assert ledger.valid and len(held) >= len(toks) + j
    assert held[:len(toks) + j + 1] == toks + ref[:j + 1][:len(held) - len(toks)]
    _cache_is_committed_only(tree_gen.ctx, len(held))
    nxt = toks + ref[:j] + [ref[j]]
    again = tree_gen.generate(prompt_tokens=nxt, spec=spec, max_tokens=8)
    assert again.n_reused == min(len(held), len(nxt) - 1)  # all of it that the next prompt shares
    cold = tree_gen.generate(prompt_tokens=nxt, max_tokens=8, reuse_prefix=False)
    assert_same_tokens(again.tokens, cold.tokens)
