"""Drafters: what proposes the draft block. One small interface, one module per drafter.

A drafter is created for one target :class:`~pyllama_spec.Context` (it keeps it as
``self.target``) and lives as long as the generator. Per generation the loop calls::

    begin(prompt[, n_keep])                         # a new generation over these prompt tokens
    observe(tokens, positions, n_commit, timer)     # after every target decode: the decoded
                                                    # tokens/positions (its batch rows, in order),
                                                    # of which the first n_commit are committed
    propose(last_token, n_past, n_max, sp, rng, timer) -> Draft
                                                    # at most n_max tokens to follow last_token
                                                    # (at position n_past); checked by the loop
    observe_deferred(tokens, positions, n_commit, timer)
                                                    # instead of observe after a step that drafted
                                                    # nothing (n_max="auto" resting): may postpone
    observe_dormant(tokens, positions, n_commit, timer)
                                                    # the same inside a long rest: may skip the rows'
                                                    # work, leaving a gap (DFlash: no features)
    on_trim(n_proposed, n_kept)                     # n_max="auto" verifies only a prefix (before on_accept)
    on_accept(n_drafted, n_accepted)                # after each verify step (adaptive drafters); not
                                                    # after a rest or a proposal auto cut to nothing
    rollback(n_past)                                # forget everything at positions ≥ n_past

so that, between steps, the drafter's state covers exactly the committed positions
``[0, n_past)`` — the loop's invariant (``loop.py``; after ``observe_dormant`` it may lack the
features of those rows, never hold anything beyond ``n_past``). ``observe`` is called for the prefill
chunks (every row committed) and after each verify (``[last, drafts…]``, the first ``k + 1``
committed); a drafter may use the rejected rows (e.g. inject all rows with one fixed shape and
drop the rejected ones in ``rollback``), as llama.cpp's drafters do.

**Prefix reuse** (``Generator.generate(reuse_prefix=True)``, the default). Between generations
the target keeps its KV cache, and a new prompt that starts like the tokens it holds is decoded
only from where they differ. Before ``begin`` the generator asks the drafter
``cached_prefix(prompt)``: how many leading tokens of ``prompt`` its own state still holds exactly
as a cold run would have built it. The kept prefix ``n_keep`` is at most that (and at most what
the target holds); then ``begin(prompt, n_keep)`` must keep the drafter's state for positions
``[0, n_keep)`` and drop everything at or after ``n_keep`` — the loop observes only
``[n_keep, len(prompt))``. A drafter that keeps nothing returns 0 (the default): the target then
starts cold too, because observe() could not be given the rows of a kept prefix, and ``begin``
is called with the prompt alone (so such drafters may define ``begin(self, prompt)``).
Per kind: state rebuilt from the tokens alone (n-gram) → ``len(prompt)``; per-position state fed
by the target (DFlash's injected features, EAGLE-3, a draft model's own KV cache) → the length of
the common prefix of ``prompt`` and the tokens that state was built from, or 0 when something
else changed it (``Context.cache_version``).

**Several sequences** (``Generator.generate_batch``): ``batched(n_seq)`` returns a
:class:`~pyllama_spec.speculative.drafters.batch.BatchDrafter` that drafts for sequences
``0 .. n_seq-1`` of the target at once (DFlash: every sequence's block in one decode). Kinds
without one raise UnsupportedError.

Capabilities are class or instance attributes that the loop reads:

* ``target_layer_ids`` — the target's layer inputs that ``observe`` reads (``Context.layer_input``);
  the loop turns on exactly these taps for the generation (and none for a drafter without them).
* ``supports_rejection`` — ``propose`` returns the drafter's probabilities (``Draft.probs``,
  ``(len(tokens), n_vocab)``; the loop checks both and raises otherwise). For ``verify="rejection"``
  a drafter without the capability counts as deterministic (q = one-hot at each draft token,
  whatever it returns), which is exact and accepts as often as the match rule.
* ``supports_tree`` — ``propose_tree`` returns a token tree
  (:class:`~pyllama_spec.speculative.tree.TreeDraft`) from one drafter call and ``observe_rows``
  takes the committed rows of a tree verify (the accepted path's batch rows, in order); the loop
  verifies the tree in one target decode when a node budget is given (``speculative/tree_step.py``).
  Chains remain the default: without a budget the loop calls ``propose``.
* ``n_max_limit`` / ``n_max_default`` — the longest draft block it can make, and the one used
  when the caller gives none.
* ``dormant_reads_taps`` — ``observe_dormant`` may read the target's layer inputs (True, the
  default). DFlash's and EAGLE-3's skip their rows (False): with ``AutoState.taps_off_when_dormant`` the loop
  turns the target's taps off for the dormant steps of a long rest and on again for the rest's
  last ``DORMANT_WINDOW`` steps, whose rows ``observe_deferred`` reads.
* ``free`` — ``propose`` is a lookup in the committed tokens (False, the default; True on every
  n-gram kind): ``n_max="auto"`` asks it for the ceiling every step instead of measuring its call
  (``AutoDraftLength.free_drafter``). A subclass of an n-gram kind inherits True: set False if
  its ``propose`` does real work.

Register new kinds with :func:`register_drafter`; :func:`create_drafter` builds one by name
(vLLM's ``create_proposer`` and HF's ``CandidateGenerator`` are the models).
"""
from __future__ import annotations

# each kind's module registers itself when imported (dflash2: the class DFlash2 files get)
from . import (  # noqa: F401
    dflash,
    dflash2,
    draft_simple,
    dspark,
    eagle3,
    mtp,
    ngram,
    ngram_cache,
    ngram_map,
    ngram_mod,
)
from .base import (
    _REGISTRY,  # noqa: F401  (the CLI lists the kinds with their aliases)
    Draft,
    Drafter,
    ModelDrafter,
    create_drafter,
    drafter_kind_of_file,
    drafter_kinds,
    register_drafter,
)

__all__ = ["Drafter", "ModelDrafter", "Draft", "register_drafter", "create_drafter", "drafter_kinds",
           "drafter_kind_of_file"]
