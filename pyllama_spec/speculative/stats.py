"""Acceptance statistics of a speculative run.

Conventions: a *step* is one target verify call. ``n_drafted`` counts draft tokens sent to
verification, ``n_accepted`` those the target agreed with. Each step also commits one
token of the target's own (the bonus), so the mean accepted length
τ = (n_accepted + n_steps) / n_steps = tokens committed per verify step (τ = 1 without a drafter).

Only delivered tokens count: when generation ends inside a step's committed tokens (an EOS,
a stop token or the end of a stop string), :meth:`SpecStats.truncate_last` drops the tokens
after that point, and the last counted token takes the bonus's place. So at the end
``n_accepted + n_steps`` is exactly the number of tokens generated (the delivered ones plus
the EOS / stop token / stop-string tokens that ended the output): ``GenerationResult.n_generated``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class SpecStats:
    """Counters of one generation.

    Attributes:
        n_steps: verify steps (target forward passes after prefill).
        n_drafted: draft tokens verified.
        n_accepted: draft tokens accepted.
        acceptance_lengths: accepted draft tokens per step.
        draft_lengths: draft tokens verified per step (with ``n_max="auto"`` the lengths the cost
            model chose; otherwise ``n_max`` or fewer when the drafter had less to offer).
        drafted_at, accepted_at: per draft position i (0-based), how often a token was
            drafted there and how often it was accepted.
        n_tree_steps, n_tree_nodes: token-tree steps, and the nodes they verified (a tree step
            verifies nodes + 1 rows).
        tree_mass: ``[b][d]`` (nodes × depths): over the tree steps, the sum of the drafter's path
            probability of the tree's node ``b`` (in the order the tree chose its nodes, best first)
            when that node lies at depth ``d + 1``. The first ``b`` nodes of a best-first tree are the
            tree of budget ``b``, so this predicts τ for every smaller budget
            (:func:`~pyllama_spec.speculative.costmodel.tree_tau_from_mass`).
        spine_mass: ``[d]``: over the tree steps, the sum of the drafter's path probability of its
            best candidates at depths 1..d + 1 (the chain's draft), what calibrates ``tree_mass``.
    """
    n_max: int = 0
    n_steps: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    acceptance_lengths: list = field(default_factory=list)
    draft_lengths: list = field(default_factory=list)
    drafted_at: list = field(default_factory=list)
    accepted_at: list = field(default_factory=list)
    n_tree_steps: int = 0
    n_tree_nodes: int = 0
    tree_mass: list = field(default_factory=list)
    spine_mass: list = field(default_factory=list)

    def __post_init__(self):
        if not self.drafted_at:
            self.drafted_at = [0] * self.n_max
            self.accepted_at = [0] * self.n_max

    def record(self, n_draft: int, n_acc: int) -> None:
        """Record one verify step with ``n_draft`` draft tokens of which ``n_acc`` were accepted."""
        self.n_steps += 1
        self.n_drafted += n_draft
        self.n_accepted += n_acc
        self.acceptance_lengths.append(n_acc)
        self.draft_lengths.append(n_draft)
        for i in range(n_draft):
            self.drafted_at[i] += 1
            if i < n_acc:
                self.accepted_at[i] += 1

    def record_tree(self, path_prob: Any, depths: Any, spine_prob: Any = None) -> None:
        """Record one token tree's drafter probabilities (call beside :meth:`record` for the step).

        Args:
            path_prob: ``(n,)`` the drafter's path probability of each node, in the tree's node order.
            depths: ``(n,)`` each node's depth (1 = the root's child).
            spine_prob: ``(D,)`` the drafter's path probability of its best candidate at depths 1..D, or None.
        """
        self.n_tree_steps += 1
        self.n_tree_nodes += len(path_prob)
        # (Python ints and floats: a numpy array's scalars cost several times more per node)
        probs = np.asarray(path_prob, dtype=np.float64).tolist()
        ds = np.asarray(depths, dtype=np.int64).tolist()
        d_max = max(ds + [len(spine_prob) if spine_prob is not None else 0])
        _grow(self.tree_mass, len(probs), d_max)
        for b, (p, d) in enumerate(zip(probs, ds)):
            self.tree_mass[b][d - 1] += p
        if spine_prob is not None:
            self.spine_mass += [0.0] * (len(spine_prob) - len(self.spine_mass))
            for d, p in enumerate(np.asarray(spine_prob, dtype=np.float64).tolist()):
                self.spine_mass[d] += p

    def truncate_last(self, n_kept: int) -> None:
        """Count only the first ``n_kept`` (≥ 1) of the tokens the last step committed: the
        step's accepted length becomes ``n_kept − 1`` (no-op when it already is shorter), and
        the per-position counts above it are taken back. Drafted counts stay (they were verified)."""
        if not self.acceptance_lengths or n_kept < 1:
            return
        a = self.acceptance_lengths[-1]
        keep = min(a, n_kept - 1)
        for i in range(keep, a):
            self.accepted_at[i] -= 1
        self.n_accepted -= a - keep
        self.acceptance_lengths[-1] = keep

    def merge(self, other: SpecStats) -> None:
        """Add another run's counters to these (same n_max)."""
        self.n_steps += other.n_steps
        self.n_drafted += other.n_drafted
        self.n_accepted += other.n_accepted
        self.acceptance_lengths += other.acceptance_lengths
        self.draft_lengths += other.draft_lengths
        self.drafted_at = [a + b for a, b in zip(self.drafted_at, other.drafted_at)]
        self.accepted_at = [a + b for a, b in zip(self.accepted_at, other.accepted_at)]
        self.n_tree_steps += other.n_tree_steps
        self.n_tree_nodes += other.n_tree_nodes
        _grow(self.tree_mass, len(other.tree_mass), max((len(r) for r in other.tree_mass), default=0))
        for b, row in enumerate(other.tree_mass):
            for d, v in enumerate(row):
                self.tree_mass[b][d] += v
        self.spine_mass += [0.0] * (len(other.spine_mass) - len(self.spine_mass))
        for d, v in enumerate(other.spine_mass):
            self.spine_mass[d] += v

    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted (0.0 when nothing was drafted)."""
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """τ: tokens committed per verify step, the bonus token included."""
        return (self.n_accepted + self.n_steps) / self.n_steps if self.n_steps else 0.0

    @property
    def accepted_per_position(self) -> list:
        """Per draft position (length n_max): fraction of steps that drafted there and were accepted."""
        return [a / d if d else 0.0 for a, d in zip(self.accepted_at, self.drafted_at)]

    @property
    def mean_draft_length(self) -> float:
        """Draft tokens verified per step (0.0 before the first step)."""
        return self.n_drafted / self.n_steps if self.n_steps else 0.0

    def as_dict(self) -> dict:
        return {"n_max": self.n_max, "n_steps": self.n_steps, "n_drafted": self.n_drafted,
                "n_accepted": self.n_accepted, "acceptance_rate": self.acceptance_rate,
                "mean_accepted_length": self.mean_accepted_length, "mean_draft_length": self.mean_draft_length,
                "accepted_per_position": self.accepted_per_position}


def _grow(mass: list, n: int, d: int) -> None:
    """Pad the nested list ``mass`` in place to at least ``n`` rows of at least ``d`` zeros."""
    mass += [[] for _ in range(n - len(mass))]
    width = max([d] + [len(r) for r in mass])
    for r in mass:
        r += [0.0] * (width - len(r))


__all__ = ["SpecStats"]
