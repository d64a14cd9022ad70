"""EAGLE-3 drafter: a one-layer head that drafts from the target's own features (Li et al. 2025,
"EAGLE-3: Scaling up Inference Acceleration of Large Language Models via Training-Time Test",
arXiv 2503.01840; llama.cpp ``common_speculative_impl_draft_eagle3`` in common/speculative.cpp
and ``src/models/eagle3.cpp``, ``--spec-type draft-eagle3``).

Features: three target hidden states per position (``eagle3.target_layers``: layer inputs —
low, middle, high — or, for an id equal to the target's layer count, its final hidden state)
go through the head's *encoder* (the ``fc`` fusion layer) into one row ``g`` per position.
The *decoder* reads pairs: at position ``p`` the token of position ``p + 1`` with ``g_p``.
So the last position of every target batch waits for the next token (the "deferred
boundary"): the next batch's first token, or, when drafting, the newest committed token.
Drafting then continues autoregressively, each step feeding the decoder's own pre-norm
state back in as ``g``.

State between steps, as in the native driver: ``pending`` = the deferred ``(position, g)``;
``verify`` = the ``g`` rows of the last verify batch, from which ``on_accept`` picks the new
boundary (the row of the last accepted token). The drafter's KV cache holds pairs for
positions ``[0, n_past − 1)`` between steps, plus the boundary pair after a draft.
"""
from __future__ import annotations

import os

import numpy as np

from ...context import Context
from ...errors import DrafterMismatchError, InvalidArgumentError
from ...gguf_file import read_gguf
from ...model import HIDDEN_STATE_ARCHS, TAPPABLE_ARCHS, Model
from ...pairing import check_d2t
from ..sampling import SamplingParams, densify, filtered_rows
from ..timing import StageTimer
from ..tree import TreeDraft, sample_tree, tree_from_logits
from ._pick import pick
from .base import DeferredRows, Draft, ModelDrafter, register_drafter
from .dflash import DRAFT_TOP_K  # (candidates per depth of a tree: the same 10 as DFlash's)


def check_eagle3_pair(target_model: Model, drafter_path: str | os.PathLike) -> dict:
    """Check an EAGLE-3 head against a loaded target before llama.cpp loads it (several mismatches
    make llama.cpp abort: a tap the target does not record, a width the graph cannot multiply).

    Returns:
        ``{"layer_ids", "n_embd"}``: the three feature ids in order and the head's hidden size.

    Raises:
        DrafterMismatchError: not an EAGLE-3 file, or made for another target (the message says
            what differs and what would fit).
    """
    info = read_gguf(drafter_path)
    name, tname = info.path.name, target_model.path.name
    if info.arch != "eagle3":
        raise DrafterMismatchError(f"{name} is a {info.arch!r} model, not an EAGLE-3 head "
                                   "(general.architecture must be 'eagle3')")
    ids = info.get("eagle3.target_layers")
    if not ids or len(ids) != 3:
        raise DrafterMismatchError(f"{name} must name exactly 3 target features in eagle3.target_layers, got {ids!r}")
    ids = [int(i) for i in ids]
    n_layer, n_embd_t = target_model.n_layer, target_model.n_embd
    bad = [i for i in ids if not 0 <= i <= n_layer]
    if bad:
        raise DrafterMismatchError(f"{name} reads target features {ids}, but {tname} has {n_layer} layers (valid ids: "
                                   f"0..{n_layer}, {n_layer} = the final hidden state): it was made for another target")
    if any(i < n_layer for i in ids) and target_model.arch not in TAPPABLE_ARCHS:
        raise DrafterMismatchError(f"{name} reads layer inputs, but llama.cpp records none for the target "
                                   f"architecture {target_model.arch!r}; targets with layer taps: "
                                   f"{', '.join(sorted(TAPPABLE_ARCHS))}")
    if n_layer in ids and target_model.arch not in HIDDEN_STATE_ARCHS:
        raise DrafterMismatchError(f"{name} reads the target's final hidden state (feature id {n_layer}), which "
                                   f"llama.cpp does not expose for {target_model.arch!r}; targets that do: "
                                   f"{', '.join(sorted(HIDDEN_STATE_ARCHS))}")
    n_embd_tgt = int(info.get("eagle3.target_hidden_size", 0))
    if n_embd_tgt != n_embd_t:
        raise DrafterMismatchError(f"{name} was made for a target of hidden size {n_embd_tgt} "
                                   f"(eagle3.target_hidden_size) but {tname} has {n_embd_t}: use an EAGLE-3 head "
                                   f"trained for {tname}")
    n_embd = int(info.get("eagle3.embedding_length", 0))
    fc = info.tensors.get("fc.weight")
    if fc is None or tuple(fc) != (3 * n_embd_t, n_embd):
        raise DrafterMismatchError(f"{name}: fc.weight has shape {fc}, expected ({3 * n_embd_t}, {n_embd}) "
                                   "(3 target features in, the head's hidden size out)")
    tok, out = info.tensors.get("token_embd.weight"), info.tensors.get("output.weight")
    if (tok is None or out is None) and n_embd != n_embd_t:
        raise DrafterMismatchError(f"{name} has hidden size {n_embd} but borrows the token embedding / LM head of the "
                                   f"target, whose hidden size is {n_embd_t}: it needs its own token_embd and output")
    if tok is not None and tok[1] != target_model.n_vocab:
        raise DrafterMismatchError(f"{name} embeds {tok[1]} tokens but {tname}'s vocabulary has {target_model.n_vocab}")
    d2t = info.tensors.get("d2t")
    if out is not None and d2t is None and out[1] != target_model.n_vocab:
        raise DrafterMismatchError(f"{name}'s LM head covers {out[1]} tokens but {tname}'s vocabulary has "
                                   f"{target_model.n_vocab} (and there is no d2t map)")
    check_d2t(info, target_model.n_vocab, out, n_embd)  # its length, the head's, and the ids llama.cpp writes through
    return {"layer_ids": ids, "n_embd": n_embd}


#: encodes of more rows than this take the head's in-graph sampler off first (:meth:`Eagle3Drafter._inject`): a verify's
#: rows (≤ 16) stay under it, a prefill's or a long rest's go over
IN_GRAPH_MAX_ENCODE = 16


@register_drafter
class Eagle3Drafter(ModelDrafter):
    """An EAGLE-3 head in its own llama.cpp context linked to the target's (``--spec-type draft-eagle3``).

    Args:
        target: the target :class:`~pyllama_spec.Context`.
        path: the head's ``.gguf`` (``general.architecture = "eagle3"``).
        p_min, n_min: early stop / minimum draft, as for ``draft-simple``.
        n_gpu_layers, flash_attn, type_k, type_v, repack: the head's model and KV cache.

    Raises:
        DrafterMismatchError: the head was made for another target (see :func:`check_eagle3_pair`).

    Memory: the head's weights (one decoder layer and ``fc``; it may borrow the target's token
    embedding and LM head), a KV cache of one layer for the target's ``n_ctx``, compute buffers.
    """
    kind = "draft-eagle3"
    aliases = ("eagle3",)
    supports_rejection = True
    n_max_limit = 32
    n_max_default = 3  # llama.cpp's --spec-draft-n-max default
    supports_tree = True
    # (ModelDrafter.backend_sampling: greedy drafts drawn in the head's graph, a token id per head decode instead of
    # the 49 152-logit row copied back and its host argmax — EAGLE-3 ran 0.77-0.96 × llama-speculative-simple
    # through our loop, RESULTS.md 19.15)
    #: observe_dormant reads no feature (it skips its rows, as DFlash's does): the target need not tap them
    #: (AutoState.taps_off_when_dormant)
    dormant_reads_taps = False

    def __init__(self, target: Context, path: str | os.PathLike | None = None, *, p_min: float = 0.0, n_min: int = 0,
                 n_gpu_layers: int = -1, flash_attn: bool | str = "auto", type_k: str = "f16", type_v: str = "f16",
                 repack: bool = False) -> None:
        if path is None:
            raise InvalidArgumentError("an EAGLE-3 drafter needs the path of its .gguf file")
        if not 0.0 <= p_min <= 1.0:
            raise InvalidArgumentError(f"p_min must lie in [0, 1], got {p_min!r}")
        meta = check_eagle3_pair(target.model, path)
        super().__init__(target)
        self.p_min, self.n_min = float(p_min), int(n_min)
        n_layer_t = target.model.n_layer
        self.feature_ids = meta["layer_ids"]
        # the loop turns on these layer-input taps; the final hidden state is switched on in begin()
        self.target_layer_ids = sorted({i for i in self.feature_ids if i < n_layer_t})
        self.reads_final_hidden = n_layer_t in self.feature_ids
        #: reads the target's final hidden state (switched on in begin(), see MTPDrafter)
        self.target_hidden_state = self.reads_final_hidden
        self.model = Model(path, n_gpu_layers=n_gpu_layers, repack=repack)
        try:
            if self.model.n_vocab != target.model.n_vocab:
                raise DrafterMismatchError(f"{self.model.path.name} has a vocabulary of {self.model.n_vocab} tokens "
                                           f"but the target {target.model.path.name} has {target.model.n_vocab}")
            self.ctx = Context(self.model, n_ctx=target.n_ctx, n_batch=target.n_batch, n_ubatch=target.n_ubatch,
                               ctx_other=target, flash_attn=flash_attn, type_k=type_k, type_v=type_v)
        except BaseException:
            self.model.close()
            raise
        # the encoder's g and the decoder's pre-norm state both come out as next-n embeddings
        self.ctx.set_embeddings_nextn(True, True)
        self.n_embd = meta["n_embd"]
        self._reset()

    def _reset(self) -> None:
        #: the committed rows (and their target features) kept while n_max="auto" rests (observe_deferred)
        self._deferred = DeferredRows(self.ctx.n_batch)
        self._stale_pos = -1  # the boundary cell that holds a rejected draft's pair (on_accept), -1: none
        # a long rest skipped rows (observe_dormant): the head's cache has a hole there and is emptied before the
        # next rows go in (llama.cpp takes a sequence's rows only right after its last cached position)
        self._hole = False
        self.pending_pos = -1
        self.pending_g = np.zeros(self.n_embd, dtype=np.float32)
        self.verify_g = np.zeros((0, self.n_embd), dtype=np.float32)
        self.verify_pos_first = -1

    def begin(self, prompt: list[int], n_keep: int = 0) -> None:
        self.ctx.memory.clear()
        self._reset()
        if self.reads_final_hidden:
            # every row's final hidden state, not only output rows (llama.cpp: masked = false)
            self.target.set_embeddings_nextn(True, False)

    def _features(self, rows: slice | np.ndarray) -> np.ndarray:
        """The target's features of batch ``rows`` of its last decode, side by side (a copy)."""
        n_layer_t = self.target.model.n_layer
        cols = [self.target.layer_input(i)[rows] if i < n_layer_t else self.target.embeddings_nextn()[rows]
                for i in self.feature_ids]
        return np.concatenate(cols, axis=1)

    def observe(self, tokens: list[int], positions: np.ndarray, n_commit: int, timer: StageTimer) -> None:
        self._flush(timer)
        with timer("extract"):
            feats = self._features(slice(0, len(tokens)))
        self._inject(list(tokens), np.asarray(positions), feats, timer)

    def observe_deferred(self, tokens: list[int], positions: np.ndarray, n_commit: int,
                         timer: StageTimer) -> None:
        # n_max="auto" is resting: the committed rows' features are copied now (the target's next decode overwrites
        # its taps) and go into the head in one encode + decode before the next draft, instead of one pair per
        # resting step (as draft-simple and DFlash defer theirs; RESULTS.md 19.7). The pairs are the same: a
        # joined batch pairs the token of p + 1 with g_p across what were separate one-row batches
        with timer("extract"):
            feats = self._features(slice(0, n_commit))
        if self._deferred.add(tokens[:n_commit], positions[:n_commit], feats):
            self._flush(timer)  # (a batch's worth: the copies kept stay bounded — a long prompt in a long rest)

    def observe_dormant(self, tokens: list[int], positions: np.ndarray, n_commit: int,
                        timer: StageTimer) -> None:
        # a long rest: these rows' features are neither copied nor encoded (the copy alone was 0.06 ms of a resting
        # step's ~1.3 ms on an H100, RESULTS.md 19.15). The head's cache keeps a hole here and is emptied before the
        # rows after it go in (_inject), so the probe drafts from the rest's last window on (the loop hands those
        # rows to observe_deferred), as DFlash's does. Lossless: what is committed stays the target's
        if not n_commit:
            return
        self._deferred.cut(0)  # (rows deferred before the hole, if any, would go out with the cache: not decoded)
        self._hole = True
        self.pending_pos = -1  # no boundary until rows after the hole come: propose drafts nothing before

    def _flush(self, timer: StageTimer) -> None:
        """Inject the rows deferred while resting (consecutive committed positions), as one verify batch."""
        if self._deferred:
            tokens, positions, feats = self._deferred.take()
            assert feats is not None  # (observe_deferred keeps every row's features)
            self._inject(tokens, positions, feats, timer)

    def rollback(self, n_past: int) -> None:
        self._deferred.cut(n_past)  # (deferred rows at or after n_past never reach the head: an EOS inside a rest)
        super().rollback(n_past)

    def observe_rows(self, tokens: list[int], positions: np.ndarray, rows: list[int], timer: StageTimer) -> None:
        # a tree verify: the accepted path's rows, wherever they sit in the batch, observed as a chain verify
        # of those rows that accepted all of them (its last row is the new boundary, as on_accept would set it)
        self._flush(timer)
        idx = np.asarray(rows, dtype=np.int64)
        with timer("extract"):
            feats = self._features(idx)
        self._inject([int(tokens[r]) for r in rows], np.asarray(positions)[idx], feats, timer)

    def _inject(self, tokens: list[int], positions: np.ndarray, feats: np.ndarray, timer: StageTimer) -> None:
        """Encode the verify rows' features and decode the (token of p + 1, g_p) pairs into the head's cache;
        the last row waits for its token (``pending_*``)."""
        n = len(tokens)
        if n > IN_GRAPH_MAX_ENCODE and 0 in self.ctx.samplers:
            # llama.cpp sizes a context's output buffer by the batch's output rows — the encoder's are all of them —
            # and with a sampler attached adds three vocabulary-sized arrays a row: a prefill's 512-row encode then
            # grew the head's buffer 4 × (+392 MiB on SmolLM2's 49 152 tokens; a review's find, 2026-12-07). The
            # sampler goes for the big encodes (a prefill, a long rest's rows) and the next greedy draft attaches it
            # again: a graph rebuild each way, not every step
            self._draw_in_graph(False)
        with timer("inject", self.ctx):
            if self._hole:  # rows after a long rest's skipped ones: the cache takes them only from empty
                self._hole = False
                self.ctx.memory.clear()
            # the per-token encoder ignores positions; llama.cpp passes placeholders after the cache
            base = self.ctx.memory.pos_max(0) + 1
            g = self.ctx.encode_embd(feats, base + np.arange(n) % self.ctx.n_ubatch)
            toks, rows, pos = [], [], []
            if self._stale_pos == self.pending_pos >= 0 and self.pending_pos + 1 == positions[0]:
                # the boundary's cell still pairs the rejected draft token with g (the step before accepted
                # less than it drafted, and no draft since replaced it: a resting step): drop it for the bridge
                self.ctx.memory.seq_rm(0, self.pending_pos)
            self._stale_pos = -1
            if 0 <= self.pending_pos and self.pending_pos + 1 == positions[0] \
                    and self.pending_pos > self.ctx.memory.pos_max(0):
                # the previous batch's last position gets its token now (cross-batch bridge)
                toks.append(int(tokens[0]))
                rows.append(self.pending_g)
                pos.append(self.pending_pos)
            # position p pairs the token of p + 1 with g_p; the last position waits
            toks += [int(t) for t in tokens[1:]]
            rows += list(g[:n - 1])
            pos += [int(p) for p in positions[:n - 1]]
            self.verify_pos_first = int(positions[0])
            self.pending_pos = int(positions[n - 1])
            self.verify_g = g
            self.pending_g = g[n - 1].copy()
            if toks:
                step = self.ctx.n_batch
                rows_a = np.stack(rows)
                for i in range(0, len(toks), step):
                    self.ctx.decode_tokens_embd(toks[i:i + step], rows_a[i:i + step], pos[i:i + step], logits="none")

    def on_accept(self, n_drafted: int, n_accepted: int) -> None:
        # the new boundary is the row of the last accepted token (common_..._eagle3::accept). A step that drafted
        # nothing (a rest, an empty draft) leaves the boundary its injection set, the last row — after a rest's
        # flush verify_g holds the flushed batch, whose first row this would wrongly pick (a review's find,
        # 2026-12-06); rows still deferred are a rest's too
        n_rows = self.verify_g.shape[0]
        if n_rows == 0 or n_drafted == 0:
            return
        i = min(n_accepted, n_rows - 1)
        self.pending_pos = self.verify_pos_first + i
        self.pending_g = self.verify_g[i].copy()
        # a rejected draft token's pair sits in the boundary's cell until a draft (propose's seq_rm) or the next
        # injection (_inject) replaces it
        self._stale_pos = self.pending_pos if n_accepted < n_drafted else -1

    def _decode_pair(self, tok: int, g: np.ndarray, pos: int, timer: StageTimer) -> None:
        """One head decode of the pair (``tok``, ``g``) at ``pos`` (one output row)."""
        with timer("draft", self.ctx):
            # the boundary pair (newest token, g of the position before it), then the drafts
            self.ctx.decode_tokens_embd([tok], g[None, :], [pos], logits="all")

    def _step(self, tok: int, g: np.ndarray, pos: int, timer: StageTimer) -> tuple[np.ndarray, np.ndarray]:
        """One head decode of the pair (``tok``, ``g``) at ``pos``: its logits row (a view, valid until the next
        decode) and its pre-norm state, the next step's ``g`` (a copy)."""
        self._decode_pair(tok, g, pos, timer)
        with timer("draft_sample"):
            return self.ctx.logits()[0], self.ctx.embeddings_nextn()[0].copy()

    def propose(self, last_token: int, n_past: int, n_max: int, sp: SamplingParams, rng: np.random.Generator,
                timer: StageTimer) -> Draft:
        self._flush(timer)  # (rows deferred while n_max="auto" rested)
        if self.pending_pos < 0:  # nothing observed yet (a one-token prompt)
            return Draft(tokens=[])
        tokens: list[int] = []
        qs: list[np.ndarray] = []
        with timer("rollback"):
            self.ctx.memory.seq_rm(0, self.pending_pos)
        self._stale_pos = -1
        tok, g, pos = int(last_token), self.pending_g, self.pending_pos
        in_graph = self._draw_in_graph(sp.greedy and self.p_min == 0.0 and self.backend_sampling)
        nxt: int | None
        for _ in range(n_max):
            if in_graph:  # (the token drawn in the head's graph: no row of logits comes back)
                self._decode_pair(tok, g, pos, timer)
                with timer("draft_sample"):
                    nxt, q = int(self.ctx.sampled_tokens(1)[0]), None
                    g = self.ctx.embeddings_nextn()[0].copy()
            else:
                logits, g = self._step(tok, g, pos, timer)
                with timer("draft_sample"):
                    nxt, q = pick(logits, sp, rng, self.p_min)
            if nxt is None:
                break
            tok = nxt
            tokens.append(tok)
            if q is not None:
                qs.append(q)
            pos += 1
        with timer("rollback"):
            # keep the boundary pair (position n_past - 1), drop the drafted positions
            self.ctx.memory.seq_rm(0, n_past)
        if len(tokens) < self.n_min:
            return Draft(tokens=[])
        return Draft(tokens=tokens, probs=np.stack(qs).astype(np.float32) if qs else None)

    def propose_tree(self, last_token: int, n_past: int, n_max: int, budget: int, sp: SamplingParams,
                     rng: np.random.Generator, timer: StageTimer) -> TreeDraft:
        """A token tree from the head's autoregressive chain: each step's distribution gives that depth's
        candidates (best-first by path probability, :func:`~pyllama_spec.speculative.tree.tree_from_logits`;
        at T > 0 children drawn from it, :func:`~pyllama_spec.speculative.tree.sample_tree`), the chain
        itself conditioned on each step's most probable token, so that the distributions — and the tree's
        shape — do not depend on draws. A node off that chain gets its depth's distribution as its
        parent's, as every node of a DFlash block's tree does (one distribution per depth); ``p_min`` and
        ``n_min`` do not apply. Costs ``min(n_max, budget)`` head decodes, as a chain of that length."""
        self._flush(timer)
        n_max = min(n_max, self.n_max_limit, budget)
        if n_max <= 0 or self.pending_pos < 0:
            return TreeDraft(tokens=[], parents=np.zeros(0, dtype=np.int64))
        self._draw_in_graph(False)  # (a tree reads each depth's whole row)
        with timer("rollback"):
            self.ctx.memory.seq_rm(0, self.pending_pos)
        self._stale_pos = -1
        tok, g, pos = int(last_token), self.pending_g, self.pending_pos
        rows = []
        for _ in range(n_max):
            row, g = self._step(tok, g, pos, timer)
            rows.append(row.copy())  # (the next decode overwrites the view)
            tok = int(np.argmax(row))
            pos += 1
        with timer("rollback"):
            self.ctx.memory.seq_rm(0, n_past)
        with timer("draft_sample"):
            lg = np.stack(rows)
            if sp.greedy:
                return tree_from_logits(lg, budget, DRAFT_TOP_K)
            q = densify(*filtered_rows(lg, sp), self.target.model.n_vocab)
            return sample_tree(q, budget, rng, DRAFT_TOP_K)
