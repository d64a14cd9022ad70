"""DFlash drafter: block-diffusion drafting with target features injected into the drafter's
KV cache (Chen et al. 2026, "DFlash: Block Diffusion for Flash Speculative Decoding",
arXiv 2602.06036; llama.cpp ``common_speculative_impl_draft_dflash`` in common/speculative.cpp
and ``src/models/dflash.cpp``).

Per step: the target's layer inputs at ``target_layer_ids`` for the committed rows are
concatenated per token (``(n, n_ids × n_embd)`` float32) and decoded into the drafter as
embedding rows, which its graph turns into K/V entries; then one non-causal pass over
``[last, mask × n_max]`` gives all draft tokens at once (rows 1..n_max); the block's own
K/V entries are removed right after. On a GPU the injection rides on the draft decode (patch 0006),
padded to one shape per n_max (``constant_shape``) so that llama.cpp reuses the graph and CUDA
replays it (H200, SmolLM2: ×1.06–1.12 tokens/s, benchmarks/RESULTS.md 13.4).

Each draft token comes with the drafter's confidence (``Draft.confidence``: the top probability of
its row), which ``n_max="auto"`` uses to cut the block. With backend sampling the decode graph keeps
each row's 10 best candidates (llama.cpp's own DFlash draft chain, top-k 10): the argmax and its
probability over those 10 come back — 10 ids and logits per row instead of one id, no logits copied;
on the CPU the top-k costs about what the argmax chain it replaces does (an 8-row block of the
SmolLM2 drafter: the same within noise, measured on two shared, loaded cores — re-measure on a quiet
machine before quoting a number).
The probability over 10 candidates slightly overstates the full softmax's when the tail is heavy, as
llama.cpp's ``--spec-draft-p-min`` check does (``p_min`` is applied to it, on the backend too).

The drafter's context mirrors the target's stream layout (same ``n_ctx`` and ``n_seq_max``):
single generations use sequence 0, ``generate_batch`` sequences ``0 .. n-1`` through
:meth:`DFlashDrafter.batched`, whose one decode drafts every sequence's block (llama.cpp's
``draft()`` for ``n_seq > 1``). Between generations the injected features stay: a new prompt that
starts with the tokens they were made for keeps them (prefix reuse, :meth:`DFlashDrafter.cached_prefix`).
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..._check import check_float, check_int
from ...backend import supports_gpu_offload
from ...context import Context
from ...errors import InvalidArgumentError, UnsupportedError
from ...model import Model
from ...pairing import check_dflash_pair
from ...sampler import SamplerChain
from ..sampling import SamplingParams, densify, filtered_rows, sample_rows
from ..timing import StageTimer
from ..tree import TreeDraft, build_tree, sample_tree, tree_from_logits
from ._pick import pick
from .base import Draft, ModelDrafter, register_drafter

if TYPE_CHECKING:
    from .batch import BatchDrafter

log = logging.getLogger("pyllama_spec")

#: candidates per row kept by the backend draft chain (llama.cpp's DFlash draft chain keeps 10)
DRAFT_TOP_K = 10


#: rows of target features staged while ``n_max="auto"`` rests before they are injected in one decode
DEFER_ROWS = 64


def _top_prob(logits: np.ndarray) -> np.ndarray:
    """``(n, k)`` logits → ``(n,)`` softmax probability of each row's argmax, 1 / Σ exp(l − l_max)."""
    lg = np.asarray(logits, dtype=np.float64)
    return 1.0 / np.exp(lg - lg.max(axis=1, keepdims=True)).sum(axis=1)


def _entropy(logits: np.ndarray) -> np.ndarray:
    """``(n, k)`` logits → ``(n,)`` entropy in nats of each row's softmax over its k entries."""
    lg = np.asarray(logits, dtype=np.float64)
    z = lg - lg.max(axis=1, keepdims=True)
    e = np.exp(z)
    s = e.sum(axis=1, keepdims=True)
    # (a candidate at -inf — fewer kept tokens than candidates, a reduced draft vocabulary — has e = 0 and adds
    # nothing: 0 * -inf would be NaN, so its z counts as 0)
    ez = e * np.where(z > -np.inf, z, 0.0)
    return np.maximum(0.0, np.log(s[:, 0]) - ez.sum(axis=1) / s[:, 0])


class _RowTail:
    """The last ``cap`` committed rows' ``(features, positions)`` (consecutive positions), kept as the chunks
    they arrived in — views, not copies: on a Qwen3-8B-shaped pair a row of target features is 80 KB, and
    copying the whole block each step (append, cut, pick) cost ~0.5 ms a step (RESULTS.md 13.6: the fused
    injection's "other" and "rollback" stages against the split one's)."""

    def __init__(self, cap: int):
        self.cap = cap
        self._chunks: list[tuple[np.ndarray, np.ndarray]] = []

    def __len__(self) -> int:
        return sum(len(p) for _, p in self._chunks)

    def add(self, feats: np.ndarray, pos: np.ndarray) -> None:
        """Append rows ``(n, width)`` at positions ``pos`` (consecutive); rows that do not follow the kept
        ones start a new run. Whole chunks older than the last ``cap`` rows go."""
        pos = np.array(pos, dtype=np.int32)  # (the caller's positions may be a view of the loop's array)
        if self._chunks and int(self._chunks[-1][1][-1]) + 1 != int(pos[0]):
            self._chunks = []
        self._chunks.append((feats, pos))
        n = len(self)
        while n - len(self._chunks[0][1]) >= self.cap:
            n -= len(self._chunks.pop(0)[1])

    def cut(self, n: int) -> bool:
        """Keep the positions ``< n`` only; False when none is left."""
        while self._chunks and int(self._chunks[-1][1][0]) >= n:
            self._chunks.pop()
        if self._chunks:
            f, p = self._chunks[-1]
            k = int(np.searchsorted(p, n))
            if k < len(p):
                self._chunks[-1] = (f[:k], p[:k])
        return bool(self._chunks)

    def before(self, p: int, m: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The last ``m`` rows at positions ``< p`` (a copy, ``(m', width)`` with ``m' ≤ m``), or None."""
        fs: list[np.ndarray] = []
        ps: list[np.ndarray] = []
        need = m
        for f, q in reversed(self._chunks):
            if need <= 0:
                break
            k = int(np.searchsorted(q, p))  # rows of this chunk before p
            if k == 0:
                continue
            take = min(k, need)
            fs.append(f[k - take:k])
            ps.append(q[k - take:k])
            need -= take
        if not fs:
            return None
        return np.concatenate(fs[::-1]), np.concatenate(ps[::-1])

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The last ``cap`` rows (a copy): ``(features, positions)``."""
        f = np.concatenate([c[0] for c in self._chunks])
        p = np.concatenate([c[1] for c in self._chunks])
        return f[-self.cap:], p[-self.cap:]


@register_drafter
class DFlashDrafter(ModelDrafter):
    """A DFlash drafter model running in its own llama.cpp context linked to the target's.

    Args:
        target: the target :class:`~pyllama_spec.Context`.
        path: the drafter ``.gguf`` (``general.architecture = "dflash"``). A DFlash2 file
            (``dflash.selector_top_k > 0``) makes a :class:`~.dflash2.DFlash2Drafter`. A file with a head of
            its own over part of the vocabulary (``output.weight`` + ``d2t``, FR-Spec; made by
            :mod:`pyllama_spec.draft_vocab`) drafts only those tokens, at a fraction of the head's cost.
        p_min: stop the draft at the first row whose top candidate (softmax over the 10 best
            logits) is below this (``--spec-draft-p-min``; 0 = never).
        n_min: drop drafts shorter than this.
        n_gpu_layers: layers of the drafter to offload (-1 = all).
        device: the device that holds the drafter's layers and KV cache (a name from
            ``pyllama_spec.devices()``, e.g. ``"CUDA1"``; ``"CPU"``); default: the one that holds the
            target's output head, which the drafter borrows for its logits (with the target split
            over GPUs: the last of them). Elsewhere, that product runs on the head's device.
        type_k, type_v, flash_attn: the drafter's KV cache (default: like llama.cpp's).
        fused_inject: inject each verify step's committed target features in the next draft
            decode (patch 0006) instead of a separate decode; default: when the drafter runs on a
            GPU. Plain DFlash only (DFlash2 / DSpark inject separately).

    Raises:
        DrafterMismatchError: the file is not a DFlash drafter for this target.
        InvalidArgumentError, InvalidTypeError: ``p_min`` outside [0, 1], a negative ``n_min``, an
            unknown device.
        UnsupportedError: ``fused_inject=True`` for a DFlash2 / DSpark file.
    """
    kind = "draft-dflash"
    aliases = ("dflash",)
    supports_rejection = True
    supports_tree = True
    #: observe_dormant skips its rows' features: the target need not tap them (AutoState.taps_off_when_dormant;
    #: DFlash2 and DSpark inherit it)
    dormant_reads_taps = False

    #: the class a file with a selector over its block gets: ``dflash2.py`` sets it to
    #: DFlash2Drafter when it is imported (the package imports it), so that this base class
    #: need not import its subclass
    selector_class: ClassVar[type[DFlashDrafter] | None] = None

    def __new__(cls, target: Context | None = None, path: str | os.PathLike | None = None,
                **kwargs: Any) -> DFlashDrafter:
        # one --spec-type for both: a DFlash2 file (a selector over the block) gets its own class
        if (cls is DFlashDrafter and path is not None and target is not None
                and check_dflash_pair(target.model, path)["selector_top_k"] > 0):
            if DFlashDrafter.selector_class is None:  # only if dflash2.py was never imported
                raise UnsupportedError(f"{os.fspath(path)!r} is a DFlash2 file; import "
                                       "pyllama_spec.speculative.drafters to register its drafter")
            cls = DFlashDrafter.selector_class
        return super().__new__(cls)

    def __init__(self, target: Context, path: str | os.PathLike | None = None, *, p_min: float = 0.0,
                 n_min: int = 0, n_gpu_layers: int = -1, flash_attn: bool | str = "auto", type_k: str = "f16",
                 type_v: str = "f16", repack: bool = False, fused_inject: bool | None = None,
                 device: str | None = None):
        if path is None:
            raise InvalidArgumentError(f"a {type(self).kind} drafter needs the path of its .gguf file")
        p_min = check_float("p_min", p_min, min=0.0, max=1.0)
        n_min = check_int("n_min", n_min, min=0)
        meta = check_dflash_pair(target.model, path)
        super().__init__(target)
        self.meta = meta
        self.p_min, self.n_min = float(p_min), int(n_min)
        self.block_size = meta["block_size"]
        self.target_layer_ids = meta["target_layer_ids"]
        self.mask_token = meta["mask_token_id"]
        #: the rows of the head it drafts with: the target's vocabulary when it borrows the target's head, fewer with
        #: a reduced draft vocabulary of its own (``output.weight`` + ``d2t``: :mod:`pyllama_spec.draft_vocab`)
        self.draft_vocab: int = meta["draft_vocab"]
        self.n_max_limit = self.block_size - 1
        self.n_max_default = min(7, self.n_max_limit)
        if device is not None and not isinstance(device, str):
            raise InvalidArgumentError(f"device must be a device name (see pyllama_spec.devices()) or None, got "
                                       f"{device!r}")
        # The drafter computes its logits with the target's output head, and a llama.cpp backend
        # computes only with its own device's buffers (ggml_backend_sched aborts otherwise): the
        # head's device is always in the drafter's device list; with another device chosen the
        # drafter's own layers all go there (share 0 for the head's device).
        head = target.model.output_device
        self.device = head if device is None else device
        if head == "CPU" or self.device == head:
            placement: dict[str, Any] = {"devices": [self.device],
                                         "n_gpu_layers": 0 if self.device == "CPU" else n_gpu_layers}
        elif self.device == "CPU":
            placement = {"devices": [head], "n_gpu_layers": 0}
        else:
            placement = {"devices": [self.device, head], "tensor_split": [1.0, 0.0], "n_gpu_layers": n_gpu_layers}
        self.model = Model(path, repack=repack, **placement)
        # The whole noise block must be one ubatch (non-causal attention) — for a batched draft,
        # every sequence's block — and the drafter holds every committed position of every
        # sequence, in the target's stream layout (common_speculative_init_result).
        n_seq = target.n_seq_max
        n_ubatch = max(target.n_ubatch, self.block_size * n_seq)
        # outputs: at most one block per sequence (llama.cpp sizes its sampling graph and buffers by this)
        self.ctx = Context(self.model, n_ctx=target.n_ctx, n_batch=max(target.n_batch, n_ubatch),
                           n_ubatch=n_ubatch, n_seq_max=n_seq, kv_unified=target.kv_unified, ctx_other=target,
                           causal_attn=meta["causal"], flash_attn=flash_attn, type_k=type_k, type_v=type_v,
                           n_outputs_max=self.block_size * n_seq, n_outputs_max_per_seq=self.block_size,
                           n_threads=target.n_threads, n_threads_batch=target.n_threads_batch)
        self.ctx.set_embeddings_nextn(True, True)
        #: draw the greedy draft in the decode graph (False: read logits, argmax on the host)
        self.backend_sampling = True
        #: token trees rank their nodes by the full softmax of each block row (the block's logits come back);
        #: False: by the softmax over the 10 candidates the backend keeps, which overrates every row and so
        #: favours depth (held-out SmolLM2, 16 nodes: τ 1.20× the chain's vs 1.16×, RESULTS.md)
        self.tree_full_softmax = True
        #: with backend sampling that full softmax is taken in the decode graph (vendor/patches/0011: the 10 best
        #: candidates of each row come back as log-probabilities; no row of logits is copied). Default: when the
        #: drafter runs on a GPU; on 2 CPU cores the graph's softmax over 8 × 49 152 logits cost more than the host
        #: path it saves (SmolLM2, tree 16: draft +2.3 ms, draft_sample −1.0 ms a step). False: the logits come back
        #: and the host normalises them (float64: the trees of before, bit for bit)
        on_gpu = supports_gpu_offload() and n_gpu_layers != 0 and self.device != "CPU"
        self.tree_logprobs_in_graph = on_gpu
        #: inject a step's committed features in the same decode as the next draft block
        #: (vendor/patches/0006-dflash-fused-inject: one drafter call per step instead of two). Default:
        #: when the drafter runs on a GPU; on the CPU the placeholder rows' extra layer compute costs
        #: more than the call it saves
        self.fused_inject = on_gpu if fused_inject is None else bool(fused_inject)
        if meta["selector_top_k"] > 0 or meta["markov"]:
            # patch 0006 injects for plain DFlash graphs only; DFlash2 / DSpark inject separately
            if fused_inject:
                self.close()
                raise UnsupportedError(f"{self.model.path.name} is a DFlash2/DSpark drafter: fused injection "
                                       "(fused_inject=True) works with plain DFlash drafters only")
            self.fused_inject = False
        #: fused decodes of one shape (with ``fused_inject``): a step that committed fewer than
        #: n_max + 1 rows also injects again the committed rows just before them, so every draft decode at
        #: a given n_max has the same rows — llama.cpp then reuses its graph and, on CUDA, replays it as a
        #: CUDA graph, where a shape that changes with each step's acceptance rebuilds the graph and
        #: launches its kernels one by one (llama_context::decode, ggml-cuda's graph warm-up)
        self.constant_shape = True
        #: with n_max="auto" (``want_confidence``) decode the whole block, ``n_max_limit + 1`` rows as it was
        #: trained, whatever the step asks for, and read the first ``ask`` rows: one drafter shape for every step.
        #: Why: auto's ask changes from step to step (3, 5, 3, 7, 5 in a first use on an H100, 2026-12-07), and
        #: each new block width rebuilt the drafter's graph — the first use's drafter calls took 3.1 ms against
        #: ~0.5 (RESULTS.md 19.17). Default: on a GPU, where extra rows of a small drafter cost next to nothing; on
        #: 2 CPU cores each row is compute. The drafts may differ from a narrower block's (the block's rows attend
        #: to each other); lossless either way
        self.auto_full_block = on_gpu
        # staged (features, positions) of committed rows that the next propose() injects (fused);
        # they count as held: begin() and save_state() inject them first
        self._pending: tuple[np.ndarray, np.ndarray] | None = None
        # the last block_size committed rows (consecutive positions, the staged ones included): what a
        # constant-shape decode injects again
        self._recent: _RowTail | None = None
        # prefix reuse: the tokens whose features sequence 0 of the cache holds (staged rows
        # included), valid while the cache is at version _version (anything else that touched it
        # makes the record void)
        self._tokens: list[int] = []
        self._version = -1
        # the first position whose features a long rest skipped (observe_dormant), None: no hole. llama.cpp
        # takes a sequence's rows only right after its last cached position (llama-batch.cpp: Y = X + 1),
        # so before the next rows go in the cache is emptied (_close_gap): the drafter then drafts from the
        # rows after the rest only
        self._skipped_from: int | None = None

    def _settle(self) -> None:
        self._version = self.ctx.cache_version

    def cached_prefix(self, prompt: list[int]) -> int:
        if self.ctx.cache_version != self._version:
            return 0
        n = min(len(prompt), len(self._tokens))
        mismatch = np.flatnonzero(np.asarray(prompt[:n]) != np.asarray(self._tokens[:n], dtype=np.int64))
        return int(mismatch[0]) if mismatch.size else n

    def _close_gap(self) -> None:
        """Before rows go into the cache after a hole (``observe_dormant``): empty it (the rows before
        the hole cannot be followed by later ones), so that it holds only what comes next."""
        if self._skipped_from is None:
            return
        self._skipped_from = None
        self.ctx.memory.seq_rm(0, 0)  # (_recent holds rows after the hole only: observe_dormant dropped the rest)
        self._settle()

    def begin(self, prompt: list[int], n_keep: int = 0) -> None:
        if self._skipped_from is not None and n_keep <= self._skipped_from:
            self._skipped_from = None  # the hole goes with the positions >= n_keep (removed below)
        # a kept prefix with a hole in it: the cache is emptied and the prefill feeds only the rows from n_keep
        # on, so the drafter drafts this turn without the context before them (lossless; cached_prefix still
        # claims the prefix, since capping it at the hole would make the target decode the rest's rows again)
        self._close_gap()
        if n_keep:
            if self._pending is not None:  # staged rows of the kept prefix go into the cache now
                self._pending = self._rows_before(self._pending, n_keep)
                self.flush()
            self.ctx.memory.seq_rm(0, n_keep)  # features of [0, n_keep) stay; nothing after
            del self._tokens[n_keep:]
            self._cut_recent(n_keep)
        else:
            self._pending = None
            self._recent = None
            self.ctx.memory.clear()
            self._tokens = []
        self._settle()

    def _cut_recent(self, n: int) -> None:
        """The kept rows cut to positions ``< n`` (None when none is left)."""
        if self._recent is not None and not self._recent.cut(n):
            self._recent = None

    @staticmethod
    def _rows_before(rows: tuple[np.ndarray, np.ndarray] | None, n: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``(features, positions)`` cut to the positions ``< n`` (None when none is left)."""
        if rows is None:
            return None
        keep = rows[1] < n
        if keep.all():
            return rows  # (the common case, a rollback after the staged rows: no copy)
        return (rows[0][keep], rows[1][keep]) if keep.any() else None

    def _remember(self, feats: np.ndarray, pos: np.ndarray) -> None:
        """Keep the last ``block_size`` committed rows' features (``_recent``), a run of consecutive
        positions: rows that do not follow the kept ones start a new run."""
        if not len(pos) or not (self.fused_inject and self.constant_shape):
            return  # (only a fused decode injects them again)
        if self._recent is None:
            self._recent = _RowTail(self.block_size)
        self._recent.add(feats, pos)  # (feats: a fresh array of _features, kept by reference)

    def observe(self, tokens: list[int], positions: np.ndarray, n_commit: int, timer: StageTimer) -> None:
        # only the committed rows: the same cache as llama.cpp's inject-all-then-remove, less work
        feats = self._features(slice(0, n_commit), timer)
        self._take(feats, list(tokens[:n_commit]), np.asarray(positions[:n_commit], dtype=np.int32), timer)

    def observe_rows(self, tokens: list[int], positions: np.ndarray, rows: list[int], timer: StageTimer) -> None:
        # a tree verify: the accepted path's rows, wherever they sit in the batch
        idx = np.asarray(rows, dtype=np.int64)
        feats = self._features(idx, timer)
        self._take(feats, [tokens[r] for r in rows], np.asarray(positions, dtype=np.int32)[idx], timer)

    def _features(self, rows: slice | np.ndarray, timer: StageTimer) -> np.ndarray:
        """The target's layer inputs at ``target_layer_ids`` for batch ``rows`` of its last decode, side by
        side: ``(n, len(target_layer_ids) * n_embd)`` float32, a copy (the next decode overwrites the taps)."""
        with timer("extract"):
            return np.concatenate([self.target.layer_input(i)[rows] for i in self.target_layer_ids], axis=1)

    def _take(self, feats: np.ndarray, tokens: list[int], pos: np.ndarray, timer: StageTimer) -> None:
        """Inject committed rows ``feats`` ``(n, width)`` of ``tokens`` at positions ``pos`` (staged for the
        next draft decode when fused)."""
        n_commit = len(tokens)
        self.flush(timer)  # (closes a hole a long rest left, too)
        self._remember(feats, pos)
        if self.fused_inject and n_commit <= self.block_size:
            # a verify step's rows: staged for the next propose(), which decodes them with its block
            self._pending = (feats, pos.copy())
        else:
            with timer("inject", self.ctx):
                self.ctx.decode_embd(feats, pos)
        if n_commit:
            del self._tokens[int(pos[0]):]
            self._tokens.extend(int(t) for t in tokens)
        self._settle()

    def observe_deferred(self, tokens: list[int], positions: np.ndarray, n_commit: int,
                         timer: StageTimer) -> None:
        # n_max="auto" is resting: the committed rows' features are copied now (the target's next
        # decode overwrites them) and injected together by the next propose(), or DEFER_ROWS at a time
        if not n_commit:
            return
        feats = self._features(slice(0, n_commit), timer)
        pos = np.asarray(positions[:n_commit], dtype=np.int32).copy()
        self._remember(feats, pos)
        if self._pending is not None:
            feats = np.concatenate([self._pending[0], feats])
            pos = np.concatenate([self._pending[1], pos])
        self._pending = (feats, pos)
        if len(pos) >= DEFER_ROWS:
            self.flush(timer)
        del self._tokens[int(positions[0]):]
        self._tokens.extend(int(t) for t in tokens[:n_commit])
        self._settle()

    def observe_dormant(self, tokens: list[int], positions: np.ndarray, n_commit: int,
                        timer: StageTimer) -> None:
        # a long rest: these rows' features are neither copied nor injected (the extract and the 64-row
        # deferred decodes were ~0.2 ms of a resting step's ~1 ms excess over plain on 2 CPU cores, RESULTS.md
        # 19.1); the cache keeps a gap here, the token record follows
        if not n_commit:
            return
        if self._pending is not None:
            self.flush(timer)  # rows staged before the hole go in first (a batch never spans it)
        if self._skipped_from is None:
            self._skipped_from = int(positions[0])
            self._recent = None
        del self._tokens[int(positions[0]):]
        self._tokens.extend(int(t) for t in tokens[:n_commit])
        self._settle()

    def flush(self, timer: StageTimer | None = None) -> None:
        """Inject staged features now (a separate decode), so that the drafter's cache holds every
        committed position; ``propose`` does it in its own decode otherwise. A hole a long rest left
        (``observe_dormant``) is closed first, so that the cache takes whatever rows come next."""
        if self._pending is None and self._skipped_from is None:
            return
        if timer is None:
            self._inject_pending()
            return
        with timer("inject", self.ctx):  # (the hole's seq_rm too: no backend call outside a stage)
            self._inject_pending()

    def _inject_pending(self) -> None:
        self._close_gap()
        if self._pending is not None:
            feats, pos = self._pending
            self._pending = None
            self.ctx.decode_embd(feats, pos)

    def _decode_block(self, last_token: int, n_past: int, n_max: int, sp: SamplingParams, timer: StageTimer,
                      candidates: bool, host: bool = False, logprobs: bool = False) -> None:
        """Decode the noise block ``[last, mask × n_max]`` at ``n_past`` (with the staged features, when
        fused). With greedy ``sp`` and backend sampling, each row's pick is made in the decode graph
        (llama.cpp's backend sampling, no logits copied): its argmax, or with ``candidates`` its 10 best
        ids and logits (``logprobs``: their log-probabilities under the whole row's softmax); otherwise
        (sampling from q needs q itself, or ``host``) the logits come back."""
        if sp.greedy and self.backend_sampling and not host:
            chain = self.ctx.samplers.get(0)
            if (chain is None or chain.draws == candidates or (not candidates and not chain.params.greedy)
                    or (candidates and chain.logprobs != logprobs)):
                # none yet, the other kind, or a batched draft's draw chain: fresh (llama.cpp sets each up once)
                self.ctx.set_sampler(SamplerChain.candidates(DRAFT_TOP_K, logprobs=logprobs) if candidates
                                     else SamplerChain())
        else:
            for seq in list(self.ctx.samplers):  # (a batched draft may have left chains on other sequences)
                self.ctx.set_sampler(None, seq)
        if self.ctx._reserve_pending:
            # a sampler change: llama.cpp may re-reserve its graphs at the next decode, which it cannot do
            # for a fused one (GGML_ASSERT in src/models/dflash.cpp): the staged rows go in separately
            self.flush(timer)
        if self._pending is not None and (not self.fused_inject or len(self._pending[1]) > self.block_size):
            self.flush(timer)  # rows deferred while n_max="auto" rested: one decode of their own
        block = np.full(n_max + 1, self.mask_token, dtype=np.int32)
        block[0] = last_token
        pos = np.arange(n_past, n_past + n_max + 1, dtype=np.int32)
        # (every cache edit here is inside the stage: a seq_rm waits for the backend like a decode)
        with timer("draft", self.ctx):
            self._close_gap()
            if self._pending is None:
                self.ctx.decode(block, pos, logits="all")
                return
            # fused: placeholders at the staged rows' positions, then the block (patch 0006)
            feats, pos_inj = self._pending
            self._pending = None
            if self.constant_shape:
                feats, pos_inj = self._pad_injection(feats, pos_inj, n_max + 1)
            n_inj = len(pos_inj)
            block = np.concatenate([np.full(n_inj, self.mask_token, dtype=np.int32), block])
            pos = np.concatenate([pos_inj, pos])
            flags = np.concatenate([np.zeros(n_inj, dtype=np.int8), np.ones(n_max + 1, dtype=np.int8)])
            self.ctx.stage_dflash_inject(feats)
            self.ctx.decode(block, pos, logits=flags)

    def _pad_injection(self, feats: np.ndarray, pos: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        """Staged rows ``(feats, pos)`` grown to ``width`` rows with the committed rows just before them
        (``constant_shape``): those are removed from the cache here and injected again from their kept
        features, so the cache still holds each position once and the block attends to the same K/V
        (computed in a batch of another size: equal bits on the CPU, near-equal on a GPU; the
        target's verify keeps the output exact either way)."""
        if self._recent is None or len(pos) >= width:
            return feats, pos
        got = self._recent.before(int(pos[0]), width - len(pos))
        # (the kept rows are consecutive and end at the staged ones: those before them end at pos[0] - 1)
        if got is None or int(got[1][-1]) != int(pos[0]) - 1:
            return feats, pos
        rf, rp = got
        self.ctx.memory.seq_rm(0, int(rp[0]))
        return np.concatenate([rf, feats]), np.concatenate([rp, pos])

    def propose(self, last_token: int, n_past: int, n_max: int, sp: SamplingParams, rng: np.random.Generator,
                timer: StageTimer) -> Draft:
        n_max = min(n_max, self.n_max_limit)
        if n_max <= 0:
            return Draft(tokens=[])
        # the argmax alone unless confidences are read (n_max="auto", p_min): the top-10 chain
        # costs more (H200, SmolLM2: draft 0.83 vs 0.48 ms per call at n_max 1)
        auto = getattr(self, "want_confidence", False)
        width = n_max  # (rows 1..n_max are read)
        if auto and self.auto_full_block:  # the whole block, where the drafter's cache holds it (the context's end)
            width = max(n_max, min(self.n_max_limit, self.ctx.n_ctx_seq - n_past - 1))
        self._decode_block(last_token, n_past, width, sp, timer, candidates=self.p_min > 0.0 or auto)
        with timer("draft_sample"):
            if 0 in self.ctx.samplers and self.ctx.samplers[0].draws:
                draft = Draft(tokens=self.ctx.sampled_tokens()[1:n_max + 1])
            elif 0 in self.ctx.samplers:
                cands = [self.ctx.sampled_candidates(i) for i in range(1, n_max + 1)]
                best = [int(np.argmax(lg)) for _, lg in cands]
                tokens = [int(ids[j]) for (ids, _), j in zip(cands, best)]
                lgs = np.stack([lg for _, lg in cands])
                conf, ent = _top_prob(lgs), _entropy(lgs)
                if self.p_min > 0.0:  # llama.cpp's cut: the first row whose top candidate is below p_min
                    low = np.flatnonzero(conf < self.p_min)
                    n_keep = int(low[0]) if low.size else len(tokens)
                    tokens, conf, ent = tokens[:n_keep], conf[:n_keep], ent[:n_keep]
                draft = Draft(tokens=tokens, confidence=conf, entropy=ent)
            elif self.p_min > 0.0:  # a cut at the first unsure row: row by row, as llama.cpp
                draft = self._read_block(self.ctx.logits()[1:n_max + 1], sp, rng)
            elif sp.greedy:
                logits = self.ctx.logits()[1:n_max + 1]
                draft = Draft(tokens=[int(t) for t in np.argmax(logits, axis=1)], confidence=_top_prob(logits),
                              entropy=_entropy(logits) if getattr(self, "want_confidence", False) else None)
            else:
                rows = filtered_rows(self.ctx.logits()[1:n_max + 1], sp)
                toks = sample_rows(*rows, rng)
                probs = densify(*rows, self.target.model.n_vocab)
                draft = Draft(tokens=[int(t) for t in toks], probs=probs,
                              confidence=probs[np.arange(len(toks)), toks].astype(np.float64))
            if len(draft.tokens) < self.n_min:
                draft = Draft(tokens=[])
        with timer("rollback"):
            # the noise block never stays in the drafter's cache
            self.ctx.memory.seq_rm(0, n_past)
        self._settle()
        return draft

    def propose_tree(self, last_token: int, n_past: int, n_max: int, budget: int, sp: SamplingParams,
                     rng: np.random.Generator, timer: StageTimer) -> TreeDraft:
        # one block decode, as propose(): each row's candidates become the tree's per-depth candidates
        n_max = min(n_max, self.n_max_limit)
        if n_max <= 0 or budget <= 0:
            return TreeDraft(tokens=[], parents=np.zeros(0, dtype=np.int64))
        in_graph = self.tree_full_softmax and self.tree_logprobs_in_graph
        self._decode_block(last_token, n_past, n_max, sp, timer, candidates=True,
                           host=self.tree_full_softmax and not in_graph, logprobs=in_graph)
        with timer("draft_sample"):
            chain = self.ctx.samplers.get(0)
            if chain is not None:  # each row's 10 best from the graph
                cands = [self.ctx.sampled_candidates(i) for i in range(1, n_max + 1)]
                ids = np.stack([c[0] for c in cands])
                lg = np.stack([c[1] for c in cands]).astype(np.float64)
                if not chain.logprobs:  # logits: the softmax over the 10 (with logprobs: the whole row's, done)
                    lg -= lg.max(axis=1, keepdims=True)
                    lg -= np.log(np.exp(lg).sum(axis=1, keepdims=True))
                tree = build_tree(ids, lg, budget)
            elif sp.greedy:
                tree = tree_from_logits(self.ctx.logits()[1:n_max + 1], budget, DRAFT_TOP_K)
            else:  # verify="rejection": the children are draws from q (a shape that does not depend on them)
                q = densify(*filtered_rows(self.ctx.logits()[1:n_max + 1], sp), self.target.model.n_vocab)
                tree = sample_tree(q, budget, rng, DRAFT_TOP_K)
        with timer("rollback"):
            self.ctx.memory.seq_rm(0, n_past)  # the noise block never stays in the drafter's cache
        self._settle()
        return tree

    def _read_block(self, logits: np.ndarray, sp: SamplingParams, rng: np.random.Generator,
                    conf: np.ndarray | None = None) -> Draft:
        """Draft tokens from the block's rows of logits ``(n, n_vocab)``, stopping at the first row
        whose top candidate is below ``p_min`` (or, with ``conf``, whose confidence is)."""
        tokens: list[int] = []
        qs: list[np.ndarray] = []
        for i, row in enumerate(logits):
            if conf is not None and conf[i] < self.p_min:
                break
            tok, q = pick(row, sp, rng, 0.0 if conf is not None else self.p_min)
            if tok is None:
                break
            tokens.append(tok)
            if q is not None:
                qs.append(q)
        if len(tokens) < self.n_min:
            return Draft(tokens=[])
        n = len(tokens)
        probs = np.stack(qs).astype(np.float32) if qs else None
        if conf is not None:  # (DSpark: its confidence head)
            confidence = np.asarray(conf[:n], dtype=np.float64)
        elif probs is not None:
            confidence = probs[np.arange(n), tokens].astype(np.float64)
        else:
            confidence = _top_prob(logits[:n]) if n else np.zeros(0)
        return Draft(tokens=tokens, probs=probs, confidence=confidence)

    def rollback(self, n_past: int) -> None:
        if self._skipped_from is not None and n_past <= self._skipped_from:
            self._skipped_from = None  # the hole is gone with the positions it was at
        self._pending = self._rows_before(self._pending, n_past)
        self._cut_recent(n_past)
        self.ctx.memory.seq_rm(0, n_past)
        del self._tokens[n_past:]
        self._settle()

    def save_state(self) -> dict | None:
        if self.ctx.cache_version != self._version:
            return None
        self.flush()  # staged rows belong to the state (and a hole is closed: it could not be followed)
        self._settle()
        return {"tokens": list(self._tokens), "data": self.ctx.memory.state_get(0)}

    def load_state(self, state: dict) -> None:
        self._skipped_from = None
        self._pending = None
        self._recent = None  # (no features of the restored positions: the first steps inject what they commit)
        self.ctx.memory.clear()
        self._tokens = []
        self._settle()  # a failed restore leaves an empty, consistent cache
        self.ctx.memory.state_set(state["data"], 0)
        self._tokens = [int(t) for t in state["tokens"]]
        self._settle()

    def batched(self, n_seq: int) -> BatchDrafter:
        from .dflash_batch import DFlashBatch

        return DFlashBatch(self, n_seq)

