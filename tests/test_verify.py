"""Verification rules, checked without any model: they must preserve the target's distribution."""
import numpy as np
import pytest
from scipy import stats

from pyllama_spec.speculative.sampling import SamplingParams
from pyllama_spec.speculative.stats import SpecStats
from pyllama_spec.speculative.verify import verify_greedy, verify_match, verify_rejection

V = 6


def test_greedy_accepts_the_agreeing_prefix():
    logits = np.full((4, V), -1.0)
    for row, tok in enumerate([2, 5, 1, 3]):
        logits[row, tok] = 1.0
    assert verify_greedy(logits, [2, 5, 1]) == (3, 3)
    assert verify_greedy(logits, [2, 4, 1]) == (1, 5)
    assert verify_greedy(logits, [0, 5, 1]) == (0, 2)
    assert verify_greedy(logits[:1], []) == (0, 2)


def _first_token_freqs(rule, n=20000, seed=0):
    rng = np.random.default_rng(seed)
    p0 = np.array([0.35, 0.25, 0.2, 0.1, 0.07, 0.03])
    q0 = np.array([0.05, 0.1, 0.5, 0.2, 0.1, 0.05])  # a drafter that prefers the wrong tokens
    sp = SamplingParams(temperature=1.0)
    logits = np.log(np.stack([p0, p0]))
    counts = np.zeros(V)
    for _ in range(n):
        d = int(rng.choice(V, p=q0))
        k, bonus = rule(logits, [d], q0[None, :], sp, rng)
        counts[d if k == 1 else bonus] += 1
    return counts, p0


@pytest.mark.parametrize("mode", ["rejection", "match"])
def test_output_follows_the_target(mode):
    if mode == "rejection":
        rule = verify_rejection
    else:
        def rule(logits, draft, q, sp, rng):
            return verify_match(logits, draft, sp, rng)
    counts, p0 = _first_token_freqs(rule)
    chi2 = stats.chisquare(counts, p0 * counts.sum())
    assert chi2.pvalue > 1e-3, (counts / counts.sum(), p0)


def test_rejection_accepts_more_when_draft_matches():
    rng = np.random.default_rng(1)
    p = np.array([0.7, 0.1, 0.1, 0.05, 0.03, 0.02])
    sp = SamplingParams(temperature=1.0)
    logits = np.log(np.stack([p, p]))
    acc_same = np.mean([verify_rejection(logits, [int(rng.choice(V, p=p))], p[None], sp, rng)[0]
                        for _ in range(3000)])
    assert acc_same == pytest.approx(1.0)  # q == p: every draft is accepted


def test_stats_conventions():
    s = SpecStats(n_max=4)
    s.record(4, 4)
    s.record(4, 1)
    s.record(2, 0)
    assert (s.n_steps, s.n_drafted, s.n_accepted) == (3, 10, 5)
    assert s.acceptance_rate == 0.5
    assert s.mean_accepted_length == pytest.approx((5 + 3) / 3)
    assert s.accepted_per_position == [2 / 3, 1 / 3, 1 / 2, 1 / 2]  # drafted 3, 3, 2, 2 times
    assert s.acceptance_lengths == [4, 1, 0]


def test_rejection_with_a_deterministic_drafter_follows_the_target():
    """q one-hot (an n-gram drafter: Draft.probs is None) keeps the target's distribution, and
    accepts exactly as often as the match rule: P(accept d) = p(d)."""
    rng = np.random.default_rng(3)
    p0 = np.array([0.35, 0.25, 0.2, 0.1, 0.07, 0.03])
    sp = SamplingParams(temperature=1.0)
    logits = np.log(np.stack([p0, p0]))
    n = 20000
    counts = np.zeros(V)
    accepted = 0
    for _ in range(n):
        k, bonus = verify_rejection(logits, [1], None, sp, rng)
        accepted += k
        counts[1 if k == 1 else bonus] += 1
    assert stats.chisquare(counts, p0 * n).pvalue > 1e-3
    assert accepted / n == pytest.approx(p0[1], abs=0.01)


@pytest.mark.parametrize("sp", [SamplingParams(temperature=0.7), SamplingParams(temperature=1.0, top_k=4, top_p=0.9)])
def test_the_bonus_draw_follows_its_row(sp):
    """The last row's draw — all of a step that drafted nothing (a rest of n_max="auto") and the token after a
    fully taken draft — comes from the row's sparse form (sampling.sample_rows); it follows the reference
    distribution of that row (sampling.probs), with and without top-k / top-p."""
    from pyllama_spec.speculative.sampling import probs
    rng = np.random.default_rng(5)
    p0 = np.array([0.35, 0.25, 0.2, 0.1, 0.07, 0.03])
    p1 = np.array([0.05, 0.1, 0.15, 0.3, 0.25, 0.15])
    logits = np.log(np.stack([p0, p1])).astype(np.float32)
    n = 20000
    rest = np.bincount([verify_rejection(logits[:1], [], None, sp, rng)[1] for _ in range(n)], minlength=V)
    want = probs(logits[0], sp)
    keep = want > 0
    assert rest[~keep].sum() == 0 and stats.chisquare(rest[keep], want[keep] * n).pvalue > 1e-3
    q = probs(logits[0], sp)[None, :]  # q == p: the draft token is always taken, the bonus is row 1's draw
    after = np.zeros(V)
    for _ in range(n):
        d = int(rng.choice(V, p=q[0]))
        k, bonus = verify_rejection(logits, [d], q, sp, rng)
        assert k == 1
        after[bonus] += 1
    want = probs(logits[1], sp)
    keep = want > 0
    assert after[~keep].sum() == 0 and stats.chisquare(after[keep], want[keep] * n).pvalue > 1e-3


def test_accept_prefix():
    from pyllama_spec.speculative.verify import accept_prefix

    assert accept_prefix([4, 5, 6, 7], [4, 5, 6]) == (3, 7)
    assert accept_prefix([4, 9, 6, 7], [4, 5, 6]) == (1, 9)
    assert accept_prefix([2], []) == (0, 2)
