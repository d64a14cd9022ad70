"""Token trees from the other tree drafters (issue 22): DFlash2 (the best-first tree through its
selector's lattice, ``tree.build_lattice_tree``) and EAGLE-3 (one distribution per depth from the
head's chain). On the tiny fixtures, at T = 0 the output is plain decoding's whatever the budget, the
trees are real trees, and the drafter is handed exactly the committed path (EAGLE-3: the target's
features of exactly the path's rows of the tree decode); at T > 0 a seeded run repeats itself; the
lattice tree holds the lattice's best paths (a brute-force reference)."""
import itertools

import numpy as np
import pytest

import pyllama_spec as ps
from pyllama_spec import drafter_fixtures, fixtures
from pyllama_spec.errors import InvalidArgumentError
from pyllama_spec.speculative.drafters.dflash2 import walk_lattice
from pyllama_spec.speculative.tree import build_lattice_tree, check_tree

from .conftest import assert_same_tokens

PROMPTS = ["hello there, how are you", "def add(a, b):\n    return"]
KINDS = ("dflash2", "echo", "random")  # DFlash2, an EAGLE-3 echo head (often right), a random EAGLE-3 head


def _lattice(rng, depth, k, n_vocab=50):
    ids = np.stack([rng.choice(n_vocab, size=k, replace=False) for _ in range(depth)]).astype(np.float32)
    return np.concatenate([ids, rng.normal(0, 2, size=(depth, k * k)).astype(np.float32)], axis=1)


def _all_paths(rows, k):
    """Every lattice path (tuple of candidate indices, depth 1..D) with its log-probability."""
    D = rows.shape[0]
    sc = rows[:, k:].astype(np.float64).reshape(D, k, k)
    lsm = sc - np.log(np.exp(sc - sc.max(axis=2, keepdims=True)).sum(axis=2, keepdims=True)) \
        - sc.max(axis=2, keepdims=True)
    out = {}
    for d in range(1, D + 1):
        for path in itertools.product(range(k), repeat=d):
            lp, pred = 0.0, 0
            for depth, s in enumerate(path):
                lp += lsm[depth, pred, s]
                pred = s
            out[path] = lp
    return out


@pytest.mark.parametrize("seed", range(3))
def test_lattice_tree_holds_the_lattices_best_paths(seed):
    """Against every path of a random lattice (4 candidates, depth 3: 84 nodes): the tree of budget B
    holds the B nodes of highest path log-probability, parents first; its first node is the greedy walk's
    first token and ``top_logp`` is that walk's; node ``logp`` sums to the path's."""
    rng = np.random.default_rng(seed)
    k, D = 4, 3
    rows = _lattice(rng, D, k)
    ref = _all_paths(rows, k)
    ranked = sorted(ref.values(), reverse=True)
    walk = walk_lattice(rows, k)
    for budget in (1, 2, 5, 13, 40, 84, 200):
        t = build_lattice_tree(rows, k, budget)
        n = min(budget, len(ref))
        assert len(t) == n
        check_tree(t, max(budget, 1), 50)
        assert t.tokens[0] == walk[0]
        np.testing.assert_allclose(sorted(t.path_logp(), reverse=True), ranked[:n], rtol=0, atol=1e-9)
        # each node's token is the candidate its path ends at, under the right parent
        ids = rows[:, :k].astype(np.int64)
        for i in range(n):
            nodes = t.path(i)
            lp = sum(t.logp[j] for j in nodes)
            match = [p for p, v in ref.items() if len(p) == len(nodes) and abs(v - lp) < 1e-9
                     and all(ids[d, s] == t.tokens[j] for d, (s, j) in enumerate(zip(p, nodes)))]
            assert match, (budget, i)
    greedy_lp = []
    pred = 0
    sc = rows[:, k:].astype(np.float64).reshape(D, k, k)
    for d in range(D):
        row = sc[d, pred]
        s = int(np.argmax(row))
        greedy_lp.append(row[s] - row.max() - np.log(np.exp(row - row.max()).sum()))
        pred = s
    np.testing.assert_allclose(build_lattice_tree(rows, k, 4).top_logp, greedy_lp, atol=1e-12)
    assert len(build_lattice_tree(rows, k, 0)) == 0
    with pytest.raises(InvalidArgumentError, match="lattice rows"):
        build_lattice_tree(rows[:, :k + 3], k, 4)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("treekinds")
    t = d / "target.gguf"
    fixtures.write_tiny_target(t, arch="llama", n_layer=4, n_embd=64, seed=21, layer_scale=0.1)
    drafter_fixtures.write_dflash2_drafter(d / "dflash2.gguf", target=t, seed=1)
    drafter_fixtures.write_eagle3_drafter(d / "echo.gguf", target=t, echo=True, target_layers=[0, 2, 3])
    drafter_fixtures.write_eagle3_drafter(d / "random.gguf", target=t, seed=1)
    return {"target": t, **{k: d / f"{k}.gguf" for k in KINDS}}


@pytest.fixture(scope="module")
def gen(files):
    g = ps.Generator(files["target"], drafters={k: files[k] for k in KINDS}, n_ctx=1024, n_batch=64, n_ubatch=32,
                     tree=16)
    yield g
    g.close()


@pytest.fixture(scope="module")
def plain(gen):
    return {p: gen.generate(p, max_tokens=40).tokens for p in PROMPTS}


@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("budget", [4, 16])
def test_trees_of_dflash2_and_eagle3_are_lossless_and_hand_over_the_path(gen, plain, name, budget):
    d = gen.drafters[name]
    assert d.supports_tree
    trees, handed, feats, batch_rows = [], [], [], []
    orig_tree, orig_rows = d.propose_tree, d.observe_rows
    eagle = name != "dflash2"

    def propose_tree(*a):
        t = orig_tree(*a)
        trees.append(t)
        return t

    def observe_rows(tokens, positions, rows, timer):
        handed.append(([int(tokens[r]) for r in rows], [int(positions[r]) for r in rows]))
        batch_rows.append(list(rows))
        if eagle:  # the head must encode the target's features of exactly the path's rows of the tree decode
            want = np.concatenate([gen.ctx.layer_input(i)[rows] for i in d.feature_ids], axis=1)
            orig_inject = d._inject
            d._inject = lambda t, p, f, tm: (feats.append((want, f)), orig_inject(t, p, f, tm))
            try:
                return orig_rows(tokens, positions, rows, timer)
            finally:
                del d._inject
        return orig_rows(tokens, positions, rows, timer)

    d.propose_tree, d.observe_rows = propose_tree, observe_rows
    try:
        for prompt in PROMPTS:
            trees.clear()
            handed.clear()
            r = gen.generate(prompt, spec=ps.SpecConfig(drafter=name, n_max=5, tree=budget), max_tokens=40)
            assert_same_tokens(r.tokens, plain[prompt])
            assert trees and all(len(t) <= budget and t.max_depth <= 5 for t in trees)
            if budget == 16:
                assert max(len(t.leaves()) for t in trees) > 1  # real trees, not chains
            # each tree step handed the drafter the committed path: `last` and the accepted nodes, at
            # consecutive positions, with the tokens of the output
            full = gen.tokenize_prompt(prompt) + r.tokens
            for toks, pos in handed:
                assert pos == list(range(pos[0], pos[0] + len(pos)))
                assert toks == full[pos[0]:pos[0] + len(toks)]
        if name == "echo":
            assert r.stats.n_accepted > 0
        if eagle:
            assert feats and all(np.array_equal(w, f) for w, f in feats)
            # (with 16 nodes some accepted path ran through batch rows other than 0, 1, …, k: rows, not a prefix)
            assert budget < 16 or name != "echo" or any(r != list(range(len(r))) for r in batch_rows)
    finally:
        del d.propose_tree, d.observe_rows


def test_an_eagle3_tree_reads_rows_where_its_chain_draws_in_the_graph(gen, plain):
    """A greedy EAGLE-3 chain draws its drafts in the head's graph (a sampler on the head's context); a token tree
    reads each depth's whole row, so it takes the sampler off — lossless either way — and the next chain puts it
    back, with the same tokens as before."""
    d = gen.drafters["echo"]
    chain = ps.SpecConfig(drafter="echo", n_max=4, tree=0)
    a = gen.generate(PROMPTS[1], spec=chain, max_tokens=40)
    assert 0 in d.ctx.samplers
    t = gen.generate(PROMPTS[1], spec=ps.SpecConfig(drafter="echo", n_max=5, tree=8), max_tokens=40)
    assert 0 not in d.ctx.samplers and t.stats.n_tree_steps > 0
    b = gen.generate(PROMPTS[1], spec=chain, max_tokens=40)
    assert 0 in d.ctx.samplers
    assert_same_tokens(a.tokens, plain[PROMPTS[1]])
    assert_same_tokens(t.tokens, plain[PROMPTS[1]])
    assert b.tokens == a.tokens and b.stats.acceptance_lengths == a.stats.acceptance_lengths


@pytest.mark.parametrize("name,verify", [("echo", "rejection"), ("echo", "match"), ("dflash2", "match"),
                                         ("dflash2", "rejection")])
def test_trees_at_temperature_repeat_with_a_seed(gen, name, verify):
    kw = dict(max_tokens=24, temperature=0.9, top_k=20, seed=5, reuse_prefix=False)
    spec = ps.SpecConfig(drafter=name, n_max=5, tree=8, verify=verify)
    a = gen.generate(PROMPTS[0], spec=spec, **kw)
    b = gen.generate(PROMPTS[0], spec=spec, **kw)
    assert a.tokens == b.tokens and (len(a.tokens) == 24 or a.finish_reason == "eos")
