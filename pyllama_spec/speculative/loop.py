"""The speculative decoding loop, one readable function.

    prefill(prompt[n_keep:-1]) → observe                        # n_keep: a prefix kept from the last call
    repeat:
        draft   = drafter.propose(last, n_past, n_max)            # DFlash: one non-causal pass
                                                                  # (n_max="auto" may rest: no draft, and
                                                                  # observe_deferred instead of observe;
                                                                  # observe_dormant deep in a long rest, the
                                                                  # target's taps off there with
                                                                  # AutoState.taps_off_when_dormant)
        verify  = target.decode([last] + draft)                   # one batch, every row an output
        k, bonus = accept(verify rows, draft)                     # greedy / match / rejection
        drafter.observe([last] + draft, n_commit=k + 1)           # DFlash: inject committed features
        drafter.on_accept(len(draft), k)
        rollback both caches to n_past + 1 + k
        commit draft[:k] + [bonus]; stop at EOS / stop string / max_tokens / context
    (with a node budget, ``tree=``: tree_step.py drafts a token tree, verifies and observes it instead)

Invariant: both KV caches hold exactly positions ``[0, n_past)``; ``last`` (the newest
committed token, at position ``n_past``) has not been decoded by the target yet. (With a token
tree the target's branch sequences hold the same positions as sequence 0 until the generation
ends: ``tree_step.BranchSeqs``.) It is the
loop of llama.cpp's ``examples/speculative-simple`` with ``common_speculative_impl_draft_dflash``,
except that the drafter receives only the committed rows' features instead of every verified
row followed by a removal (same cache contents, less work).

How verify rows become tokens (``backend_sampling``): for the greedy and match rules a sampler
chain attached to the target (:meth:`Context.set_sampler`) draws one token per row inside the
decode graph — on a GPU no logits cross to the host, as llama.cpp's own speculative drivers do
with backend sampling; rejection sampling needs p and q, so its target logits come back and
numpy (``verify.py``) works on all rows at once — except in the dormant steps of n_max="auto"'s long
rests, which verify no draft: there a chain attached for the rest draws in the graph as plain decoding
does (``AutoState.draw_in_graph_when_dormant``).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ..context import Context
from ..errors import InvalidArgumentError, PyllamaSpecError, UnsupportedError
from ..sampler import SamplerChain
from .config import VERIFY_MODES, use_backend_sampling
from .drafters import Draft, Drafter
from .sampling import SamplingParams
from .stats import SpecStats
from .timing import StageTimer
from .tree_step import BranchSeqs, check_tree_context, tree_verify_step
from .verify import accept_prefix, verify_greedy, verify_match, verify_rejection

if TYPE_CHECKING:
    from .costmodel import AutoDraftLength


@dataclass
class StepOutput:
    """Tokens committed by one step, and whether generation ends here (and why)."""
    tokens: list
    finish_reason: str | None = None


def _check_draft_probs(drafter: Drafter, draft: Draft, n_vocab: int) -> None:
    """Rejection sampling reads q from a drafter that says it has it (``supports_rejection``):
    ``Draft.probs`` must then be ``(len(tokens), n_vocab)``; a drafter without the capability is
    verified as deterministic (q one-hot) whatever it returns."""
    if not drafter.supports_rejection:
        return
    if draft.probs is None:
        raise PyllamaSpecError(f"drafter {drafter.kind!r} has supports_rejection=True but returned no probabilities "
                               "for verify='rejection' at temperature > 0: return Draft(tokens, probs) from propose()")
    shape = np.shape(draft.probs)
    if shape != (len(draft.tokens), n_vocab):
        raise InvalidArgumentError(f"drafter {drafter.kind!r} returned probabilities of shape {shape}, expected "
                                   f"{(len(draft.tokens), n_vocab)} (one row per draft token over the target's "
                                   "vocabulary): fix its propose()")


def speculative_generate(target: Context, drafter: Drafter | None, prompt: list, *, max_tokens: int,
                         n_max: int, sp: SamplingParams, verify: str, stats: SpecStats, timer: StageTimer,
                         rng: np.random.Generator, backend_sampling: bool | str = "auto",
                         n_keep: int = 0, draft_length: AutoDraftLength | None = None,
                         tree: int = 0) -> Iterator[StepOutput]:
    """Run the loop; yields the tokens each step commits (EOS included, then stops).

    Args:
        target: the target context (its cache is cleared first, but for the first ``n_keep`` positions).
        drafter: None for plain decoding through the same path (empty drafts).
        prompt: token ids, at least one.
        max_tokens: most tokens to commit (the caller cuts at stop strings).
        n_max: most draft tokens per step.
        sp: sampling settings of the target (and of the drafter with ``verify="rejection"``).
        verify: ``"match"`` (llama.cpp's rule) or ``"rejection"`` (speculative sampling).
        backend_sampling: let llama.cpp draw the target's tokens in the decode graph when the rule
            allows it (greedy, match, plain decoding); False reads logits and samples with numpy;
            ``"auto"``: the backend at temperature > 0, the host's argmax at T = 0.
        n_keep: prefix reuse: positions ``[0, n_keep)`` of both caches stay as the previous
            generation left them and only ``prompt[n_keep:-1]`` is prefilled. The caller (the
            Generator's ``reuse_prefix``) guarantees that both caches hold ``prompt[:n_keep]`` there
            and that ``n_keep < len(prompt)``; 0 starts from empty caches.
        draft_length: ``n_max="auto"``: an object whose ``plan(ceiling)`` says how many tokens to ask
            the drafter for (0: rest — no drafter call, a plain step, the drafter's
            ``observe_deferred``) and whose ``trim(draft)`` returns the prefix of each proposal worth
            verifying (``costmodel.AutoDraftLength``); ``n_max`` is then the ceiling.
        tree: a node budget > 0 verifies a token tree per step (``tree_step.py``; the drafter needs
            ``supports_tree``, the target ``n_seq_max ≥ tree`` and ``kv_unified``), ``n_max`` its depth;
            0: chains. Its rows are read on the host (a backend sampler draws per sequence).

    The caller (``Generator``) validates sizes; this function assumes ``len(prompt) < n_ctx_seq``.
    """
    if verify not in VERIFY_MODES:
        raise PyllamaSpecError(f"verify must be one of {VERIFY_MODES}, got {verify!r}")
    vocab = target.model.vocab
    mem = target.memory
    # Setting up the caches for this prompt is part of the prefill: timed as "prefill" (a cleared KV
    # cache is a device memset on a GPU, a drafter's begin() clears its own), so that "other" holds
    # only the loop's Python glue — on a fast GPU a short generation's set-up is a few % of its wall.
    with timer("prefill", target):
        if n_keep:
            mem.seq_rm(0, n_keep)  # nothing after the kept prefix remains
        else:
            mem.clear()
        # the target records exactly the layer inputs the active drafter reads (none without one); with
        # AutoState.taps_off_when_dormant none either while its rows go to an observe_dormant that reads none
        toggle_taps = _toggles_taps(drafter, draft_length)
        taps_on = drafter is not None and not (toggle_taps and draft_length is not None
                                               and draft_length.dormant_prefill())
        target.set_layer_inputs(drafter.target_layer_ids if taps_on and drafter is not None else [])
    host_rule = verify == "rejection" and not sp.greedy and drafter is not None
    fits = n_max + 1 <= target.n_outputs_max_per_seq  # llama.cpp's sampling graph is sized for that many rows
    use_backend = use_backend_sampling(backend_sampling, sp.greedy, target.model.n_vocab)
    tree_budget = tree if drafter is not None and n_max > 0 else 0
    if tree_budget:
        assert drafter is not None  # (tree_budget is 0 without one)
        if not drafter.supports_tree:
            raise UnsupportedError(f"drafter {drafter.kind!r} drafts chains only: token trees (tree={tree}) need a "
                                   "drafter with supports_tree (draft-dflash)")
        if draft_length is not None:
            raise UnsupportedError("n_max='auto' chooses a chain's length: use an int n_max with a token tree")
        check_tree_context(target, tree_budget)
    chain = (SamplerChain.from_params(sp) if use_backend and fits and not host_rule and not tree_budget
             else None)
    target.set_sampler(chain)
    # the rejection rule reads logits only where a draft is verified: a long rest's dormant steps may draw in the
    # graph (AutoState.draw_in_graph_when_dormant), through a chain attached for the rest (_rest_chain)
    rest_in_graph = (host_rule and use_backend and not tree_budget and draft_length is not None
                     and draft_length.state.draw_in_graph_when_dormant)
    if drafter is not None:
        drafter.want_confidence = draft_length is not None
        with timer("prefill", getattr(drafter, "ctx", None)):
            # n_keep > 0 only for drafters that said they hold that prefix (Drafter.cached_prefix), so
            # drafters that never keep one may define begin(prompt)
            if n_keep:
                drafter.begin(prompt[:-1], n_keep)
            else:
                drafter.begin(prompt[:-1])
    # with the match rule the drafter proposes its argmax, as llama.cpp's drafters do
    dsp = sp if verify == "rejection" else SamplingParams()
    # a token tree's branch sequences mirror sequence 0 for the whole generation (tree_step.py says why)
    branches = BranchSeqs() if tree_budget else None
    try:
        yield from _run(target, drafter, prompt, vocab, mem, chain, max_tokens=max_tokens, n_max=n_max, sp=sp,
                        dsp=dsp, verify=verify, stats=stats, timer=timer, rng=rng, n_keep=n_keep,
                        draft_length=draft_length, tree_budget=tree_budget, branches=branches,
                        toggle_taps=toggle_taps, taps_on=taps_on, rest_in_graph=rest_in_graph)
    finally:
        target.set_sampler(None)  # the user's own decodes get logits again
        if branches is not None:
            branches.release(mem)  # only sequence 0 holds cells again (the invariant)


def _run(target, drafter, prompt, vocab, mem, chain, *, max_tokens, n_max, sp, dsp, verify, stats, timer, rng,
         n_keep, draft_length, tree_budget, branches, toggle_taps, taps_on, rest_in_graph):
    # prefill: everything but the last prompt token (and the kept prefix), chunked by n_batch
    timer.mark("prefill_start")
    n_prefill = len(prompt) - 1
    for i in range(n_keep, n_prefill, target.n_batch):
        chunk = prompt[i:min(i + target.n_batch, n_prefill)]
        pos = np.arange(i, i + len(chunk), dtype=np.int32)
        with timer("prefill", target):
            target.decode(chunk, pos, logits="none")
        if drafter is not None and draft_length is not None and draft_length.dormant_prefill():
            drafter.observe_dormant(chunk, pos, len(chunk), timer)  # the last generation's long rest goes on
        elif drafter is not None:
            drafter.observe(chunk, pos, len(chunk), timer)

    timer.mark("prefill_done")
    last = int(prompt[-1])
    n_past = n_prefill
    n_out = 0
    n_ctx = target.n_ctx_seq  # what sequence 0 can hold (n_ctx unless the context has several streams)
    while True:
        room = min(n_ctx - n_past - 1, max_tokens - n_out - 1)
        step = None
        if tree_budget and room > 0:  # a token tree: drafted, verified and observed in tree_step.py
            step = tree_verify_step(target, drafter, last, n_past, n_max=min(n_max, room),
                                    budget=min(tree_budget, n_ctx - n_past - 1),
                                    sp=sp, dsp=dsp, verify=verify, rng=rng, timer=timer, branches=branches)
        draft = Draft(tokens=[])
        rest = False  # n_max="auto" found no draft length paying: a plain step, no drafter call
        n_proposed = 0  # tokens the drafter proposed (before n_max="auto"'s trim)
        if step is None and drafter is not None and room > 0 and n_max > 0:
            ask = min(n_max, room)
            if draft_length is not None:  # n_max="auto": draft no more than might be verified, or nothing
                with timer("plan"):
                    ask = draft_length.plan(ask)
                rest = ask == 0
        if step is None and not rest and drafter is not None and room > 0 and n_max > 0:
            draft = drafter.propose(last, n_past, ask, dsp, rng, timer)
            if len(draft.tokens) > ask:
                raise PyllamaSpecError(f"drafter {drafter.kind!r} proposed {len(draft.tokens)} tokens, more than the "
                                       f"{ask} asked for (n_max, or the room left): fix its propose()")
            if verify == "rejection" and not sp.greedy and draft.tokens:
                _check_draft_probs(drafter, draft, target.model.n_vocab)
            n_proposed = len(draft.tokens)
            if draft_length is not None:  # n_max="auto": verify only the prefix the cost model prefers
                with timer("plan"):
                    draft = draft_length.trim(draft)
                if 0 < len(draft.tokens) < n_proposed:
                    drafter.on_trim(n_proposed, len(draft.tokens))
        n_d = len(draft.tokens) if step is None else step.depth  # a tree counts its deepest branch
        # deep in a long rest (or the generation's last step, too short to draft, inside one): the drafter may
        # skip this step's rows (observe_dormant)
        dormant = draft_length is not None and drafter is not None and (
            (rest and draft_length.dormant()) or (step is None and room <= 0 and draft_length.dormant_prefill()))
        if toggle_taps and taps_on == dormant:
            # the taps off for a decode whose rows observe_dormant skips, on for every other (a rest's last
            # DORMANT_WINDOW steps, whose rows the probe drafts from; a drafting step): the switch costs a
            # rebuilt graph at the decode below (patch 0016; a whole scheduler reserve before it)
            taps_on = not dormant
            target.set_layer_inputs(drafter.target_layer_ids if taps_on else [])
        in_graph = rest_in_graph and dormant and draft_length.draw_in_graph(chain is not None, room)
        if rest_in_graph and (chain is not None) != in_graph:
            # a dormant step verifies no draft: it draws its token in the graph as plain decoding does, no logits
            # row read and drawn on the host; the first step that is not dormant detaches the chain (each switch
            # costs a rebuilt graph at the decode below: patch 0017)
            if in_graph:
                try:
                    chain = _rest_chain(target, sp, rng)
                except UnsupportedError:  # this backend cannot run the chain: the host draws, as before
                    rest_in_graph = False
            else:
                target.set_sampler(None)
                chain.close()
                chain = None

        if step is None:
            batch, pos, k, bonus = _verify_chain(target, drafter, chain, draft, last, n_past, sp, verify, rng, timer)
            committed = draft.tokens[:k] + [bonus]
        else:
            k, committed = step.n_accepted, step.committed
        stats.record(n_d, k)
        if step is not None and step.tree is not None:  # what the cost model predicts trees from
            plp = step.tree.path_logp()
            if plp is not None:
                top = step.tree.top_logp
                stats.record_tree(np.exp(plp), step.tree.depths,
                                  None if top is None else np.exp(np.cumsum(np.asarray(top, dtype=np.float64))))

        if chain is not None:
            for t in committed:  # llama.cpp's seeded draw advances only over accepted rows
                chain.accept(t)
        if drafter is not None:
            if dormant:
                drafter.observe_dormant(batch, pos, k + 1, timer)
            elif rest:  # the drafter may postpone its work (DFlash: inject the rows at its next propose)
                drafter.observe_deferred(batch, pos, k + 1, timer)
            elif step is None:  # (a tree step has observed its accepted path's rows)
                drafter.observe(batch, pos, k + 1, timer)
            if not rest and not (n_proposed and not draft.tokens):  # (n_proposed: a chain step's, before trim)
                # (a resting step asked the drafter nothing: llama.cpp's accept follows a draft call, even an
                # empty one, which first resets the n-gram kinds' per-draft state — after a rest that state is
                # the last real draft's, and accept(0) would cut ngram-map's value for that key to 0 tokens or
                # count a low-acceptance streak against ngram-mod's table, once per resting step. Nor a step
                # whose proposal n_max="auto"'s trim cut to nothing: none of it was verified, and accept(0)
                # would silence that ngram-map key for the generation or clear ngram-mod's table after 5)
                drafter.on_accept(n_d, k)
        n_past += k + 1
        # nothing to remove after a resting step or in plain decoding (one row verified and committed): on
        # a GPU a plain token costs ~1.2 ms, and this call with its timer and lock is ~2 % of it
        if not rest and drafter is not None:
            with timer("rollback"):
                mem.seq_rm(0, n_past)
                if drafter is not None:
                    drafter.rollback(n_past)
        last = committed[-1]

        finish = None
        for j, t in enumerate(committed):
            if vocab.is_eog(t):
                committed = committed[:j + 1]
                stats.truncate_last(j + 1)  # tokens after the EOS were accepted but are not delivered
                finish = "eos"
                # nothing at or after the EOS stays cached
                eos_pos = n_past - (k + 1) + j + 1
                with timer("rollback"):
                    if branches is not None:  # (the tree's branch sequences mirror sequence 0)
                        branches.truncate(mem, eos_pos)
                    else:
                        mem.seq_rm(0, eos_pos)
                    if drafter is not None:
                        drafter.rollback(eos_pos)
                break
        n_out += len(committed)
        if finish is None and n_out >= max_tokens:
            finish = "length"
        if finish is None and n_past >= n_ctx:
            finish = "context"
        yield StepOutput(committed, finish)
        if finish is not None:
            return


def _toggles_taps(drafter: Drafter | None, draft_length: AutoDraftLength | None) -> bool:
    """Whether this generation turns the target's layer-input taps off for its dormant decodes
    (``AutoState.taps_off_when_dormant``): n_max="auto" with the switch on, and a drafter with taps whose
    ``observe_dormant`` reads none (``Drafter.dormant_reads_taps`` False)."""
    return (drafter is not None and draft_length is not None and draft_length.state.taps_off_when_dormant
            and not drafter.dormant_reads_taps and bool(drafter.target_layer_ids))


def _rest_chain(target: Context, sp: SamplingParams, rng: np.random.Generator) -> SamplerChain:
    """Attach a new chain for a long rest's dormant steps → that chain. A chain attaches to a context once, so
    each rest makes its own, seeded from the loop's ``rng``: its draws are independent of the last rest's and a
    seeded generation repeats.

    Raises:
        UnsupportedError: llama.cpp cannot run the chain on the target's backend (nothing is attached).
    """
    chain = SamplerChain.from_params(replace(sp, seed=int(rng.integers(2**31 - 1))))
    target.set_sampler(chain)
    return chain


def _verify_chain(target, drafter, chain, draft, last, n_past, sp, verify, rng, timer):
    """Verify a chain ``[last] + draft`` in one target decode → ``(batch, positions, k, bonus)``."""
    n_d = len(draft.tokens)
    with timer("verify", target):
        batch = [last] + draft.tokens
        pos = np.arange(n_past, n_past + n_d + 1, dtype=np.int32)
        target.decode(batch, pos, logits="all")
    with timer("accept"):
        if chain is not None:
            k, bonus = accept_prefix(target.sampled_tokens(n_d + 1), draft.tokens)
        else:
            logits = target.logits()
            if sp.greedy:
                k, bonus = verify_greedy(logits, draft.tokens)
            elif verify == "rejection":  # a drafter without probabilities is deterministic (q one-hot)
                q = draft.probs if drafter is not None and drafter.supports_rejection else None
                k, bonus = verify_rejection(logits, draft.tokens, q, sp, rng)
            else:
                k, bonus = verify_match(logits, draft.tokens, sp, rng)
    return batch, pos, k, bonus


__all__ = ["speculative_generate", "StepOutput", "VERIFY_MODES"]
