"""``Generator``: a target, its drafters, and ``generate()`` — the library's main entry point."""
from __future__ import annotations

import codecs
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, overload

import numpy as np

from . import backend
from ._check import check_bool, check_int, check_str, check_str_list, check_token_ids
from .batching import BatchResult, BatchRun, BatchStream, start_batch
from .cache_reuse import CacheLedger, ConversationState, check_state, restore, snapshot
from .chat import render_chat
from .context import Context
from .errors import InvalidArgumentError, InvalidTypeError, PromptTooLongError, PyllamaSpecError, UnsupportedError
from .model import Model
from .speculative.config import AUTO, SpecConfig
from .speculative.costmodel import AutoDraftLength, AutoState, measure_verify_ms
from .speculative.drafters import Drafter, create_drafter, drafter_kind_of_file, drafter_kinds
from .speculative.loop import StepOutput, speculative_generate
from .speculative.report import GenerationResult
from .speculative.sampling import SamplingParams
from .speculative.stats import SpecStats
from .speculative.timing import StageTimer
from .speculative.tree import TREE_BUDGET_MAX

log = logging.getLogger("pyllama_spec")

#: verify batches up to this many rows (n_max + 1) are sampled inside llama.cpp's decode graph;
#: llama.cpp sizes that graph for this many rows, so it stays near the largest DFlash block
VERIFY_ROWS_BACKEND = 32


#: architectures of drafter-only files (no model of their own to decode with) → the drafter kind
_DRAFTER_ARCHS = {"dflash": "draft-dflash", "eagle3": "draft-eagle3", "gemma4-assistant": "draft-mtp"}


def _check_not_a_drafter(target: str | os.PathLike) -> None:
    """Refuse a drafter file given as the target, in the Generator's own words (llama.cpp would
    load it and then fail on a missing output head or linked context).

    Raises:
        InvalidArgumentError: ``target`` is a DFlash / EAGLE-3 drafter or a Gemma-4 assistant.
    """
    if not isinstance(target, (str, os.PathLike)) or not os.path.isfile(target):
        return  # (Model raises the clear error for a missing path or a wrong type)
    from .gguf_file import read_gguf

    try:
        info = read_gguf(target)
    except PyllamaSpecError:
        return  # not a GGUF, truncated: Model says so
    kind = _DRAFTER_ARCHS.get(info.arch)
    if kind is None:
        return
    path = os.fspath(target)
    name = info.get("general.name")
    short = kind.removeprefix("draft-")
    raise InvalidArgumentError(
        f"{info.path.name} is a {kind} drafter" + (f" ({name!r})" if name else "") + ", not a target model: it "
        f"cannot generate on its own. Give the model it drafts for as the target and this file as a drafter: "
        f"Generator(target_gguf, drafters={{{short!r}: {path!r}}}) (command line: pyllama-spec generate TARGET "
        f"-d {short}={path})")


def tokenize_chat(model: Model, messages: list[dict[str, Any]],
                  template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """The token ids of a chat rendered with ``model``'s template and a generation prompt (what
    :meth:`Generator.tokenize_prompt` feeds the target; a ``vocab_only`` model suffices).

    Raises:
        UnsupportedError: the model has no chat template.
    """
    vocab = model.vocab
    bos = vocab.token_to_piece(vocab.bos, special=True).decode() if vocab.bos is not None else ""
    eos = vocab.token_to_piece(vocab.eos, special=True).decode() if vocab.eos is not None else ""
    text = render_chat(model.chat_template, messages, bos_token=bos, eos_token=eos, **(template_kwargs or {}))
    toks = vocab.tokenize(text, add_special=True, parse_special=True)
    # a template that writes BOS itself plus a tokenizer that adds one: keep one
    if len(toks) > 1 and vocab.bos is not None and toks[0] == toks[1] == vocab.bos:
        toks = toks[1:]
    return toks

class Generator:
    """A target model with named drafters, ready to generate.

    Args:
        target: path of the target ``.gguf``.
        drafters: ``{name: spec}``; a spec is a ``.gguf`` path (its architecture picks the kind:
            ``"draft-dflash"``, ``"draft-eagle3"``, ``"draft-simple"``, ...), a drafter kind with no
            file (``"mtp"``, ``"ngram"``; None = the name is the kind), a ``(kind, kwargs)`` pair,
            or a :class:`~pyllama_spec.speculative.drafters.Drafter` instance (see :meth:`add_drafter`).
        n_ctx, n_batch, n_ubatch, flash_attn, type_k, type_v, n_threads: the target context
            (see :class:`~pyllama_spec.Context`); ``n_ctx`` is per sequence; model drafters use the
            same CPU threads.
        n_parallel: most sequences :meth:`generate_batch` runs at once (llama.cpp's ``--parallel``):
            the target's KV cache gets one stream of ``n_ctx`` positions per sequence.
        n_gpu_layers: layers to offload, for the target and model drafters (-1 = all).
        split_mode, tensor_split, main_gpu, devices: where the target's offloaded layers go — split
            by layer (default) or row over the devices named (default: the local GPUs), in the given
            shares (:class:`~pyllama_spec.placement.Placement` says how; checked before loading).
        rpc_servers: ``["host:port", …]``: llama.cpp RPC servers whose devices take part of the
            target (:mod:`pyllama_spec.rpc`); they come first in the device list, as in llama.cpp.
        drafter_device: the device of DFlash-family drafters given as paths (``"CUDA1"``, ``"CPU"``),
            or ``{name: device}`` per drafter; default: the device that holds the target's output
            head (a DFlash drafter computes its logits with it). A ``(kind, kwargs)`` spec takes
            ``device=`` in its kwargs.
        repack: llama.cpp's CPU weight repacking (off by default; refused on AMX CPUs, where it crashes).
        tree: token-tree verification (``speculative/tree_step.py``): the node budget of the tree each
            step drafts and verifies with drafters that support trees (draft-dflash, DFlash2, draft-eagle3;
            ``n_max`` is the depth); 0 (default) = chains. The target context gets ``tree`` branch sequences in one
            unified KV cache (``n_seq_max=tree, kv_unified=True``); a ``SpecConfig(tree=...)`` may ask
            for a smaller tree, or 0, per generation. Not with ``n_parallel > 1``.

    Raises:
        ModelLoadError (and subclasses), ContextError, DrafterMismatchError, InvalidTypeError,
        InvalidArgumentError, UnsupportedError.

    Threads: a Generator may be shared between threads. ``generate()`` calls are serialised (a
    second one waits until the first has finished); a stream holds the Generator only while it
    computes its next piece, and a ``generate()`` from any thread cuts off an unfinished stream
    (which then raises on its next read). See ``_locks.py``.

    Example::

        gen = Generator("target.gguf", drafters={"dflash": "drafter.gguf"}, n_ctx=4096)
        res = gen.generate("Write a debounce function.", drafter="dflash", max_tokens=256)
        print(res.text); print(res.report())
    """

    def __init__(self, target: str | os.PathLike, drafters: Mapping[str, Any] | None = None, *, n_ctx: int = 4096,
                 n_batch: int = 512, n_ubatch: int | None = None, n_gpu_layers: int = -1,
                 flash_attn: bool | str = "auto", type_k: str = "f16", type_v: str = "f16",
                 n_threads: int | None = None, repack: bool = False, progress: bool = False, n_parallel: int = 1,
                 split_mode: str = "layer", tensor_split: Sequence[float] | None = None, main_gpu: int = 0,
                 devices: Sequence[str] | None = None, rpc_servers: Sequence[str] | None = None,
                 drafter_device: str | Mapping[str, str] | None = None, tree: int = 0):
        self._lock = threading.RLock()
        if drafters is not None and not isinstance(drafters, Mapping):
            raise InvalidTypeError(f"drafters must be a dict {{name: spec}} or None, got {type(drafters).__name__}")
        n_parallel = check_int("n_parallel", n_parallel, min=1,
                               what="an int ≥ 1 (sequences generate_batch runs at once)")
        self.tree = check_int("tree", tree, min=0, max=TREE_BUDGET_MAX,
                              what=f"a node budget in [0, {TREE_BUDGET_MAX}] (0 = chains)")
        if self.tree and n_parallel > 1:
            raise UnsupportedError(f"tree={self.tree} and n_parallel={n_parallel}: token trees use the target's "
                                   "sequences as branches; create one Generator for trees and one for generate_batch")
        if drafter_device is not None and not isinstance(drafter_device, (str, Mapping)):
            raise InvalidTypeError(f"drafter_device must be a device name, a {{drafter name: device}} dict or "
                                   f"None, got {drafter_device!r}")
        if rpc_servers:
            from . import rpc

            if isinstance(rpc_servers, str):
                raise InvalidArgumentError(f"rpc_servers is a list of 'host:port' strings, got {rpc_servers!r}")
            remote = [name for ep in rpc_servers for name in rpc.add_server(ep)]
            local = [d["name"] for d in backend.default_offload_devices()]
            devices = remote + local if devices is None else list(devices) + [n for n in remote if n not in devices]
        _check_not_a_drafter(target)
        self.model = Model(target, n_gpu_layers=n_gpu_layers, repack=repack, progress=progress,
                           split_mode=split_mode, tensor_split=tensor_split, main_gpu=main_gpu, devices=devices)
        # a verify batch of up to VERIFY_ROWS_BACKEND rows is sampled in the decode graph (larger ones on the host)
        self.ctx = Context(self.model, n_ctx=n_ctx * n_parallel if n_ctx else 0, n_batch=n_batch, n_ubatch=n_ubatch,
                           n_seq_max=max(n_parallel, self.tree), flash_attn=flash_attn, type_k=type_k,
                           type_v=type_v, n_threads=n_threads, n_outputs_max_per_seq=min(VERIFY_ROWS_BACKEND, n_batch),
                           kv_unified=self.tree > 1)
        self.drafters: dict[str, Drafter] = {}
        self._active: _Run | BatchRun | None = None
        self._ledger = CacheLedger(self.ctx)  # what sequence 0 of the target holds (prefix reuse)
        self._verify_ms: dict[tuple[tuple[int, ...], int], list[float]] = {}  # (taps, rows) -> ms, n_max="auto"
        self._auto_state: dict[str, AutoState] = {}  # per drafter: what n_max="auto" has learnt
        self._drafter_opts = {"n_gpu_layers": n_gpu_layers, "repack": repack}
        self._drafter_device = drafter_device
        for name, spec in (drafters or {}).items():
            self.add_drafter(name, spec)

    def add_drafter(self, name: str, spec: Any = None) -> Drafter:
        """Add a drafter under ``name``.

        ``spec`` is one of:

        * a ``.gguf`` path: its architecture picks the kind (llama.cpp's ``--spec-type`` names):
          ``dflash`` → ``draft-dflash`` (``draft-dspark`` when it has a Markov head), ``eagle3`` →
          ``draft-eagle3``, ``gemma4-assistant`` → ``draft-mtp`` (an assistant sharing the
          target's KV cache), any other → ``draft-simple`` (a separate draft model);
        * a drafter kind that needs no file (``"draft-mtp"`` / ``"mtp"``, ``"ngram"``, ...), or
          None to use ``name`` as the kind (``drafters={"mtp": None}``);
        * a ``(kind, kwargs)`` pair, e.g. ``("draft-simple", {"path": p, "p_min": 0.75})``;
        * a :class:`~pyllama_spec.speculative.drafters.Drafter` instance.

        Raises:
            InvalidTypeError, InvalidArgumentError: a bad name or spec (an unknown kind lists the known ones).
            DrafterMismatchError: a drafter file made for another target (checked before llama.cpp loads it).
        """
        with self._lock:
            return self._add_drafter(check_str("name", name, nonempty=True), spec)

    def _add_drafter(self, name: str, spec: Any) -> Drafter:
        if spec is None:
            spec = name
        if isinstance(spec, Drafter):
            drafter = spec
        elif isinstance(spec, tuple):
            if len(spec) != 2 or not isinstance(spec[0], str) or not isinstance(spec[1], Mapping):
                raise InvalidTypeError(f"drafter {name!r}: a (kind, kwargs) spec must be a (str, dict) pair, "
                                       f"got {spec!r}")
            kind, kwargs = spec
            if kwargs.get("path") is not None:  # a model drafter: the generator's offload/repack unless given
                kwargs = {**self._drafter_opts, **kwargs}
            drafter = create_drafter(kind, self.ctx, **kwargs)
        elif isinstance(spec, (str, os.PathLike)) and str(spec) in drafter_kinds():
            drafter = create_drafter(str(spec), self.ctx)
        elif isinstance(spec, str) and not os.path.exists(spec) and not spec.endswith(".gguf") and os.sep not in spec:
            raise InvalidArgumentError(f"drafter {name!r}: {spec!r} is neither a known drafter kind "
                                       f"({', '.join(drafter_kinds())}) nor an existing .gguf file")
        elif isinstance(spec, (str, os.PathLike)):
            kind = drafter_kind_of_file(spec)
            opts: dict[str, Any] = dict(self._drafter_opts)
            device = (self._drafter_device.get(name) if isinstance(self._drafter_device, Mapping)
                      else self._drafter_device)
            if device is not None:
                if kind not in ("draft-dflash", "draft-dspark"):
                    raise UnsupportedError(f"drafter {name!r}: drafter_device places DFlash-family drafters only; "
                                           f"{os.fspath(spec)!r} is a {kind!r} drafter")
                opts["device"] = device
            drafter = create_drafter(kind, self.ctx, path=spec, **opts)
        else:
            raise InvalidTypeError(f"drafter {name!r}: a spec must be a path, a kind, (kind, kwargs), None or a "
                                   f"Drafter, got {spec!r}")
        self.drafters[name] = drafter
        self._auto_state.pop(name, None)  # a new drafter under this name learns afresh
        return drafter

    # ------------------------------------------------------------------------------------------
    def tokenize_prompt(self, prompt: str | None = None, messages: list[dict[str, Any]] | None = None,
                        template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
        """The token ids ``generate`` would feed the target for this prompt or chat.

        Raises:
            InvalidTypeError, InvalidArgumentError: not exactly one of a str prompt or a list of messages.
            UnsupportedError: ``messages`` for a model without a chat template.
        """
        vocab = self.model.vocab
        if (prompt is None) == (messages is None):
            raise InvalidArgumentError("pass exactly one of prompt= (a string) or messages= (a chat)")
        if template_kwargs is not None and not isinstance(template_kwargs, Mapping):
            raise InvalidTypeError(f"template_kwargs must be a dict or None, got {type(template_kwargs).__name__}")
        if messages is not None:
            return tokenize_chat(self.model, messages, template_kwargs)
        check_str("prompt", prompt)
        return vocab.tokenize(prompt, add_special=True, parse_special=False)  # type: ignore[arg-type]

    @overload
    def generate(self, prompt: str | None = None, *, messages: list[dict[str, Any]] | None = None,
                 prompt_tokens: Iterable[int] | None = None, drafter: str | None = None, max_tokens: int = 256,
                 n_max: int | None = None, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                 min_p: float = 0.0, seed: int | None = None, stop: str | Iterable[str] | None = None,
                 stop_token_ids: Iterable[int] | None = None, special: bool = False, verify: str = "match",
                 stream: Literal[False] = ..., sync_stages: bool = True,
                 template_kwargs: Mapping[str, Any] | None = None,
                 sampling: SamplingParams | None = None,
                 spec: SpecConfig | None = None, reuse_prefix: bool = True) -> GenerationResult: ...

    @overload
    def generate(self, prompt: str | None = None, *, messages: list[dict[str, Any]] | None = None,
                 prompt_tokens: Iterable[int] | None = None, drafter: str | None = None, max_tokens: int = 256,
                 n_max: int | None = None, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                 min_p: float = 0.0, seed: int | None = None, stop: str | Iterable[str] | None = None,
                 stop_token_ids: Iterable[int] | None = None, special: bool = False, verify: str = "match",
                 stream: Literal[True], sync_stages: bool = True,
                 template_kwargs: Mapping[str, Any] | None = None,
                 sampling: SamplingParams | None = None,
                 spec: SpecConfig | None = None, reuse_prefix: bool = True) -> TextStream: ...

    def generate(self, prompt: str | None = None, *, messages: list[dict[str, Any]] | None = None,
                 prompt_tokens: Iterable[int] | None = None, drafter: str | None = None, max_tokens: int = 256,
                 n_max: int | None = None, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                 min_p: float = 0.0, seed: int | None = None, stop: str | Iterable[str] | None = None,
                 stop_token_ids: Iterable[int] | None = None, special: bool = False, verify: str = "match",
                 stream: bool = False, sync_stages: bool = True, template_kwargs: Mapping[str, Any] | None = None,
                 sampling: SamplingParams | None = None,
                 spec: SpecConfig | None = None, reuse_prefix: bool = True) -> GenerationResult | TextStream:
        """Generate a continuation, optionally speculatively.

        The caches are kept between calls: a prompt that starts with the tokens of the previous
        call's prompt and output (the next turn of a chat) is decoded only from where it differs
        (``reuse_prefix``; :attr:`GenerationResult.n_reused` says how many tokens were kept).

        The sampling and speculation keywords are a convenience: they build a
        :class:`SamplingParams` and a :class:`SpecConfig`, which can be passed whole instead
        (``sampling=``, ``spec=``; then those keywords must stay at their defaults).

        Args:
            prompt / messages / prompt_tokens: a prompt string, a chat (rendered with the model's
                template), or token ids — exactly one.
            drafter: a name given at construction, or None for plain target decoding.
            max_tokens: most tokens to generate (exact).
            n_max: most draft tokens per step (default: the drafter's; clamped to the drafter's
                maximum, block_size − 1 for DFlash, with a warning); 0 runs plain decoding (a
                warning says so; ``res.spec.drafter`` is then None), or ``"auto"``: chosen per step
                by the cost model (``speculative/costmodel.py``) up to the drafter's maximum, 0 (a
                plain step, no drafter call) where no length pays; the first such call measures the
                verify cost per row count (:meth:`verify_ms`); :meth:`auto_state` holds what it learnt.
            temperature, top_k, top_p, min_p, seed: sampling (temperature 0 = greedy).
            stop: a string or list of strings that end the output (excluded from it). They are
                matched on the text as returned (so with ``special=False`` a special token, rendered
                as nothing, never matches a string); a stop string that is exactly a special token's
                text (``"<|im_start|>"``) also stops at that token.
            stop_token_ids: token ids that end the output (excluded from it, like an EOS);
                ``finish_reason`` is then ``"stop"``.
            special: render special tokens (``<|im_start|>`` …) in the text instead of dropping them
                (the EOS that ends generation is never part of the output).
            verify: ``"match"`` (sample the target, accept while equal: llama.cpp's rule) or
                ``"rejection"`` (speculative sampling with the drafter's probabilities).
            stream: return an iterator of text pieces (its ``.result`` is set when exhausted).
            sync_stages: synchronize the backend at stage boundaries (exact per-stage GPU time);
                False runs the loop free for top speed.
            template_kwargs: extra chat-template variables (e.g. ``{"enable_thinking": False}``).
            sampling, spec: whole configuration objects instead of the keywords above.
            reuse_prefix: keep the longest common prefix of the tokens both caches hold and the new
                prompt (the drafter's injected features included) and prefill only the rest. The
                output is that of a run from empty caches up to near-ties: a kept prefix was computed
                by the last call's verify steps, a cold prompt by large batches, and llama.cpp may use
                other kernels for those (on the CPU, flash attention is tiled from 64 tokens per
                ubatch; on GPUs, matmuls by batch size) — as with any prompt cache. False clears both
                caches first.

        Returns:
            :class:`GenerationResult`, or a :class:`TextStream` when ``stream=True``.

        Raises:
            InvalidArgumentError (a ValueError): a bad argument value, InvalidTypeError (a TypeError)
                a bad argument type (the message names it and the allowed values).
            PromptTooLongError: the prompt does not fit in n_ctx.
            ClosedError: the Generator was closed.
        """
        with self._lock:
            return self._generate(prompt, messages, prompt_tokens, drafter, max_tokens, n_max, temperature, top_k,
                                  top_p, min_p, seed, stop, stop_token_ids, special, verify, stream, sync_stages,
                                  template_kwargs, sampling, spec, reuse_prefix)

    def _generate(self, prompt: str | None, messages: list[dict[str, Any]] | None,
                  prompt_tokens: Iterable[int] | None, drafter: str | None, max_tokens: int, n_max: int | None,
                  temperature: float, top_k: int, top_p: float, min_p: float, seed: int | None,
                  stop: str | Iterable[str] | None, stop_token_ids: Iterable[int] | None, special: bool,
                  verify: str, stream: bool, sync_stages: bool, template_kwargs: Mapping[str, Any] | None,
                  sampling: SamplingParams | None, spec: SpecConfig | None,
                  reuse_prefix: bool) -> GenerationResult | TextStream:
        if sampling is None:
            sampling = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed)
        elif (temperature, top_k, top_p, min_p, seed) != (0.0, 0, 1.0, 0.0, None):
            raise InvalidArgumentError("pass either sampling=SamplingParams(...) or the temperature/top_k/top_p/"
                                       "min_p/seed keywords, not both")
        elif not isinstance(sampling, SamplingParams):
            raise InvalidTypeError(f"sampling must be a SamplingParams, got {type(sampling).__name__}")
        if spec is None:
            spec = SpecConfig(drafter=drafter, n_max=n_max, verify=verify, sync_stages=sync_stages)
        elif (drafter, n_max, verify, sync_stages) != (None, None, "match", True):
            raise InvalidArgumentError("pass either spec=SpecConfig(...) or the drafter/n_max/verify/sync_stages "
                                       "keywords, not both")
        elif not isinstance(spec, SpecConfig):
            raise InvalidTypeError(f"spec must be a SpecConfig, got {type(spec).__name__}")
        max_tokens = check_int("max_tokens", max_tokens, min=1)
        stream, special = check_bool("stream", stream), check_bool("special", special)
        d, spec, auto = self._resolve(spec)
        if d is not None and spec.n_max == 0:
            # n_max=0 drafts nothing: run plain decoding (what results already call n_max 0) rather than pay
            # the drafter's per-step work (extract, inject, rollback) for no draft, and say so. Not an error:
            # n_max is chosen per call, and a sweep over n_max = 0, 1, 2, ... takes 0 as its baseline
            log.warning("n_max=0 with drafter %r drafts nothing: running plain decoding (drafter=None); "
                        "res.spec records it", spec.drafter)
            d, spec = None, spec.replace(drafter=None)
        vocab = self.model.vocab
        stops = check_str_list("stop", stop)
        stop_ids = set(check_token_ids("stop_token_ids", [] if stop_token_ids is None else stop_token_ids,
                                       vocab.n_tokens))
        for s in stops:  # a stop string that is one special token also stops at that token
            toks = vocab.tokenize(s, add_special=False, parse_special=True)
            if len(toks) == 1 and vocab.is_control(toks[0]):
                stop_ids.add(toks[0])

        # n_max="auto" reads the verify cost per row count (measured on first use, outside the clocks)
        n_max = int(spec.n_max or 0)  # (resolved: an int)
        auto_verify_ms = self.verify_ms(n_max + 1, drafter=spec.drafter) if auto and n_max > 0 else None
        timer = StageTimer(sync=spec.sync_stages)
        timer.start_wall()
        with timer("tokenize"):
            if prompt_tokens is not None:
                if prompt is not None or messages is not None:
                    raise InvalidArgumentError("pass exactly one of prompt=, messages= or prompt_tokens=")
                tokens = check_token_ids("prompt_tokens", prompt_tokens, vocab.n_tokens)
            else:
                tokens = self.tokenize_prompt(prompt, messages, template_kwargs)
        if not tokens:
            raise InvalidArgumentError("the prompt is empty (no tokens)")
        if len(tokens) >= self.ctx.n_ctx_seq:
            asked = self.ctx.n_ctx_requested
            note = (f" (n_ctx={asked} was rounded up to {self.ctx.n_ctx} by llama.cpp)"
                    if asked and asked != self.ctx.n_ctx and self.ctx.n_seq_max == 1 else "")
            raise PromptTooLongError(f"the prompt has {len(tokens)} tokens but n_ctx is {self.ctx.n_ctx_seq}{note}; "
                                     "shorten it or create the Generator with a larger n_ctx")
        reuse_prefix = check_bool("reuse_prefix", reuse_prefix)
        if self._active is not None:
            # the target and drafter caches are about to be reused: an unfinished stream is void
            self._active.invalidate()
        n_keep = self._ledger.plan(tokens, d) if reuse_prefix else 0
        stats = SpecStats(n_max=n_max)
        rng = np.random.default_rng(sampling.seed)
        policy = None
        if auto_verify_ms is not None:
            assert spec.drafter is not None and d is not None  # (auto_verify_ms is measured for a drafter only)
            policy = AutoDraftLength(auto_verify_ms, stats, state=self.auto_state(spec.drafter), timer=timer,
                                     free=d.free)
        steps = speculative_generate(self.ctx, d, tokens, max_tokens=max_tokens, n_max=int(spec.n_max or 0),
                                     sp=sampling, verify=spec.verify, stats=stats, timer=timer, rng=rng,
                                     backend_sampling=spec.backend_sampling, n_keep=n_keep, draft_length=policy,
                                     tree=int(spec.tree or 0))
        run = _Run(self, self._ledger.track(steps, tokens), stops=stops, stop_ids=stop_ids, special=special,
                   timer=timer, stats=stats, prompt_tokens=tokens, spec=spec, sampling=sampling, auto=auto)
        run.n_reused = n_keep
        self._active = run
        if stream:
            return TextStream(run)
        for _ in run.pieces():
            pass
        assert run.result is not None
        return run.result

    def generate_batch(self, prompts: list[str] | None = None, *, messages: list[list[dict[str, Any]]] | None = None,
                       prompt_tokens: list[list[int]] | None = None, drafter: str | None = None,
                       max_tokens: int | Sequence[int] = 256, n_max: int | Sequence[int] | None = None,
                       temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
                       seed: int | None = None, stop: str | Iterable[str] | None = None, verify: str = "match",
                       stream: bool = False, sync_stages: bool = True, template_kwargs: Mapping[str, Any] | None = None,
                       sampling: SamplingParams | None = None,
                       spec: SpecConfig | None = None) -> BatchResult | BatchStream:
        """Generate continuations of several prompts at once, optionally speculatively: each prompt
        is a sequence of the target context (a KV stream of its own), the drafter drafts for all of
        them in one call, and one target decode verifies every draft (``speculative/batch_loop.py``).

        At T = 0 each sequence gets the tokens it gets alone (on the CPU backend exactly while
        ubatches stay below 64 tokens; otherwise, and on GPUs, up to near-ties, as for speculative
        vs. plain decoding: ``speculative/batch_loop.py`` says why). The caches are not kept for
        prefix reuse afterwards.

        Args:
            prompts / messages / prompt_tokens: a list of prompt strings, of chats, or of token-id
                lists — exactly one; at most ``n_parallel`` (see the constructor) entries.
            max_tokens: most tokens per sequence: an int, or one per prompt.
            n_max: most draft tokens per step: None (the drafter's default), an int, or one per prompt.
            drafter, temperature, top_k, top_p, min_p, seed, stop, verify, sync_stages,
            template_kwargs, sampling, spec: as for :meth:`generate`, for every sequence (with a
                seed, every sequence draws from its own generator seeded with it).
            stream: return a :class:`~pyllama_spec.batching.BatchStream` of pieces of all sequences.

        Returns:
            :class:`~pyllama_spec.batching.BatchResult` (``.results``: one :class:`GenerationResult`
            per prompt), or a :class:`~pyllama_spec.batching.BatchStream` when ``stream=True``.

        Raises:
            InvalidArgumentError: a bad argument, more prompts than ``n_parallel``, or a drafter kind
                that cannot draft for several sequences (UnsupportedError).
            PromptTooLongError: a prompt does not fit in n_ctx.
        """
        if sampling is None:
            sampling = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed)
        elif (temperature, top_k, top_p, min_p, seed) != (0.0, 0, 1.0, 0.0, None):
            raise InvalidArgumentError("pass either sampling=SamplingParams(...) or the temperature/top_k/top_p/"
                                       "min_p/seed keywords, not both")
        if spec is None:
            spec = SpecConfig(drafter=drafter, n_max=None, verify=verify, sync_stages=sync_stages)
        elif (drafter, verify, sync_stages) != (None, "match", True):
            raise InvalidArgumentError("pass either spec=SpecConfig(...) or the drafter/verify/sync_stages keywords, "
                                       "not both")
        with self._lock:
            run = start_batch(self.ctx, resolve=self._resolve, tokenize=self.tokenize_prompt,
                              release=self._release_caches, prompts=prompts, messages=messages,
                              prompt_tokens=prompt_tokens, max_tokens=max_tokens, n_max=n_max, stop=stop,
                              template_kwargs=template_kwargs, sampling=sampling, spec=spec)
            self._active = run
            if stream:
                return BatchStream(run)
            for _ in run.pieces():
                pass
            assert run.result is not None  # set when the pieces run out
            return run.result

    def _release_caches(self) -> None:
        """Before a batch uses the caches: an unfinished stream is void, the prefix-reuse record gone."""
        if self._active is not None:
            self._active.invalidate()
        self._ledger.forget()

    def _resolve(self, spec: SpecConfig) -> tuple[Drafter | None, SpecConfig, bool]:
        """The drafter named by ``spec``, ``spec`` with ``n_max`` resolved (default, clamps; for
        ``"auto"`` the ceiling), and whether ``n_max`` was ``"auto"``.

        Raises:
            InvalidArgumentError: an unknown drafter name.
        """
        if spec.drafter is None:
            return None, spec.replace(n_max=0, tree=0), False
        self._check_drafter(spec.drafter, " (or None for plain decoding)")
        d = self.drafters[spec.drafter]
        spec = spec.replace(tree=self._resolve_tree(spec, d))
        auto = spec.n_max == AUTO
        n_max = d.n_max_limit if auto else d.n_max_default if spec.n_max is None else int(spec.n_max)
        if auto:  # the ceiling: what the drafter can make and the verify batch sampled in the graph holds
            n_max = min(n_max, VERIFY_ROWS_BACKEND - 1, self.ctx.n_batch - 1)
        if n_max > d.n_max_limit:
            log.warning("n_max=%d exceeds what drafter %r can make; clamping to %d", n_max, spec.drafter, d.n_max_limit)
            n_max = d.n_max_limit
        if n_max > self.ctx.n_batch - 1:  # the verify batch is [last, drafts...]
            log.warning("n_max=%d does not fit a verify batch of n_batch=%d; clamping to %d", n_max,
                        self.ctx.n_batch, self.ctx.n_batch - 1)
            n_max = self.ctx.n_batch - 1
        return d, spec.replace(n_max=n_max), auto

    def _resolve_tree(self, spec: SpecConfig, d: Drafter) -> int:
        """The node budget of ``spec`` with drafter ``d``: the Generator's ``tree`` unless the spec
        names one (chains for drafters without tree support or with ``n_max="auto"``).

        Raises:
            InvalidArgumentError: a budget above the Generator's ``tree``.
            UnsupportedError: a budget for a drafter that drafts chains only, or with ``n_max="auto"``.
        """
        if spec.tree is None:
            return self.tree if d.supports_tree and spec.n_max != AUTO else 0
        if spec.tree and spec.tree > self.tree:
            raise InvalidArgumentError(f"tree={spec.tree} nodes, but this Generator's target context is sized for "
                                       f"trees of up to tree={self.tree}: create the Generator with tree={spec.tree}")
        if spec.tree and not d.supports_tree:
            raise UnsupportedError(f"drafter {spec.drafter!r} ({d.kind}) drafts chains only: tree={spec.tree} needs a "
                                   "drafter with supports_tree (draft-dflash with or without a selector, draft-eagle3)")
        if spec.tree and spec.n_max == AUTO:
            raise UnsupportedError("n_max='auto' chooses a chain's length: use an int n_max (the depth) with a tree")
        return int(spec.tree)

    def verify_ms(self, n_rows: int, drafter: str | None = None, tokens: Iterable[int] | None = None, *,
                  depth: int = 256, reps: int = 3) -> list[float]:
        """ms of a verify batch of R = 1..``n_rows`` rows on this target, with ``drafter``'s layer taps on
        (:func:`~pyllama_spec.speculative.costmodel.measure_verify_ms`); measured once per taps and
        size, then cached. ``n_max="auto"`` reads it. A conversation the target's KV cache holds (a
        previous generation's, or :meth:`load_state`'s) stays, and the next generation reuses it: the
        measurement decodes after it and removes what it added; with no conversation held the cache
        is cleared.

        Args:
            tokens: ids to fill the cache with (default: the BOS token, repeated).
            depth: positions cached before the measured batch (capped by n_ctx).
        """
        with self._lock:  # (it decodes on the target context)
            if not isinstance(n_rows, int) or n_rows < 1:
                raise InvalidArgumentError(f"n_rows must be an int ≥ 1, got {n_rows!r}")
            if drafter is not None:
                self._check_drafter(drafter)
            taps = tuple(self.drafters[drafter].target_layer_ids) if drafter is not None else ()
            key = next(((t, r) for t, r in self._verify_ms if t == taps and r >= n_rows), (taps, n_rows))
            if key not in self._verify_ms:
                if self._active is not None:
                    self._active.invalidate()  # the measurement reuses the target's cache
                fill = list(tokens) if tokens else [self.model.vocab.bos or 0]
                held = self._ledger.tokens if self._ledger.valid else []
                # after the conversation (as much of it as leaves sequence 0 room for a verify batch: with
                # n_parallel > 1, n_ctx is every stream's cells together, n_ctx_seq sequence 0's)
                keep = max(0, min(len(held), self.ctx.n_ctx_seq - n_rows - 2))
                self._verify_ms[key] = measure_verify_ms(self.ctx, n_rows, fill,
                                                         depth=min(depth, self.ctx.n_ctx_seq // 2), layer_ids=taps,
                                                         reps=reps, keep=keep)
                if keep:
                    self._ledger.record(held[:keep])  # positions [0, keep) were not touched
                else:
                    self.ctx.memory.clear()
                    self._ledger.forget()  # the target's cache no longer holds a conversation
            return list(self._verify_ms[key][:n_rows])

    def _check_drafter(self, name: str, hint: str = "") -> None:
        """Raise InvalidArgumentError unless ``name`` is one of this generator's drafters (``hint`` ends the
        message)."""
        if name not in self.drafters:
            raise InvalidArgumentError(f"unknown drafter {name!r}; this generator has: "
                                       f"{', '.join(self.drafters) or 'none'}{hint}")

    def auto_state(self, drafter: str) -> AutoState:
        """What ``n_max="auto"`` has learnt for ``drafter`` (a
        :class:`~pyllama_spec.speculative.costmodel.AutoState`, created on first use): its confidence
        calibration, costs and rest schedule. Its ``rule`` (``"cost"`` or ``"adaedl"``) and ``rest``
        (False: never rest) may be set; the next generation with that drafter uses them.

        Raises:
            InvalidArgumentError: an unknown drafter name.
        """
        self._check_drafter(drafter)
        return self._auto_state.setdefault(drafter, AutoState())

    def reset_auto_state(self, drafter: str, state: AutoState | None = None) -> AutoState:
        """Forget what ``n_max="auto"`` has learnt for ``drafter``: its next generation starts from ``state``
        (default a fresh :class:`~pyllama_spec.speculative.costmodel.AutoState`) — a first use again, e.g. to
        compare two settings of auto from the same start in one process (``benchmarks/auto_overhead.py``).

        Returns:
            the state now in use.

        Raises:
            InvalidArgumentError: an unknown drafter name, or ``state`` not an AutoState.
        """
        self._check_drafter(drafter)
        if state is not None and not isinstance(state, AutoState):
            raise InvalidArgumentError(f"state must be an AutoState, got {type(state).__name__}")
        self._auto_state[drafter] = state if state is not None else AutoState()
        return self._auto_state[drafter]

    def resolve_n_max(self, drafter: str | None, n_max: int | str | None = None) -> int:
        """The draft length a generation with ``drafter`` and ``n_max`` would use (the drafter's default
        for None, the ceiling for ``"auto"``, clamps applied; 0 without a drafter)."""
        return int(self._resolve(SpecConfig(drafter=drafter, n_max=n_max))[1].n_max or 0)

    # ------------------------------------------------------------------------------------------
    def save_state(self) -> ConversationState:
        """A snapshot of the conversation the caches hold (the target's and each drafter's), to
        continue it later with :meth:`load_state` — also in another process
        (:meth:`ConversationState.save`). A generation's prefix reuse then starts from it.

        Raises:
            InvalidArgumentError: the caches hold nothing known (no generation yet, or something
                else used the contexts since).
        """
        with self._lock:
            if self._active is not None and self._active.result is None and not self._active.invalid:
                raise InvalidArgumentError("a stream of this Generator is still running: consume or close it "
                                           "before saving the state")
            return snapshot(self._ledger, self.ctx, self.drafters)

    def load_state(self, state: ConversationState) -> None:
        """Restore the caches saved by :meth:`save_state` (an unfinished stream is cut off).

        Raises:
            InvalidArgumentError: a state of another model or context size.
            PyllamaSpecError: llama.cpp rejected the data (the caches are then empty).
        """
        with self._lock:
            check_state(self.ctx, state)  # a wrong state leaves a running stream alone
            if self._active is not None:
                self._active.invalidate()
            restore(self._ledger, self.ctx, self.drafters, state)

    def memory_report(self) -> dict[str, Any]:
        """Memory in MiB: ``{"target": {...}, "drafters": {name: {...}}}`` with ``weights_mib``,
        ``kv_cache_mib`` and ``compute_mib`` (summed over devices)."""
        with self._lock:
            return {"target": self.ctx.memory_summary(),
                    "drafters": {n: d.memory_report() for n, d in self.drafters.items()}}

    def close(self) -> None:
        """Free every drafter, context and model (idempotent); an unfinished stream is cut off."""
        with self._lock:
            if self._active is not None:
                self._active.invalidate()
            for d in self.drafters.values():
                d.close()
            self.ctx.close()
            self.model.close()

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Run:
    """Turns the loop's committed tokens into text pieces, applying stop strings and stop tokens,
    and counts exactly the tokens up to where the output ends (``SpecStats.truncate_last``)."""

    def __init__(self, gen: Generator, steps: Iterator[StepOutput], *, stops: list[str], stop_ids: set[int],
                 special: bool, timer: StageTimer, stats: SpecStats, prompt_tokens: list[int], spec: SpecConfig,
                 sampling: SamplingParams, auto: bool = False):
        self.gen, self.steps, self.stops, self.stop_ids = gen, steps, stops, stop_ids
        self.special, self.timer, self.stats = special, timer, stats
        self.prompt_tokens, self.spec, self.sampling, self.auto = prompt_tokens, spec, sampling, auto
        self.n_reused = 0
        self.result: GenerationResult | None = None
        self.invalid = False

    def invalidate(self) -> None:
        if self.result is None:
            self.invalid = True
            self.steps.close()  # type: ignore[attr-defined]

    def _piece(self, t: int) -> bytes:
        return self.gen.model.vocab.token_to_piece(t, special=self.special)

    def pieces(self) -> Iterator[str]:
        vocab = self.gen.model.vocab
        dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        tokens: list[int] = []
        text = ""
        emitted = 0
        finish = "length"
        n_committed = 0
        hold = max((len(s) for s in self.stops), default=0)
        for step in self.steps:
            if self.invalid:
                break
            n_before = n_committed
            n_committed += len(step.tokens)
            stop_at = None  # index in step.tokens of a stop token
            with self.timer("detokenize"):
                for j, t in enumerate(step.tokens):
                    if vocab.is_eog(t):
                        break
                    if t in self.stop_ids:
                        stop_at = j
                        break
                    tokens.append(t)
                    text += dec.decode(self._piece(t))
                if step.finish_reason is not None or stop_at is not None:
                    text += dec.decode(b"", final=True)
            cut, n_end = self._find_stop(text)
            if cut is not None or stop_at is not None:
                if cut is not None:  # a stop string: count through its last token (it ends in this step)
                    covering = self.gen.model.vocab.tokens_covering
                    n_through = max(n_before + 1, len(covering(tokens, n_end, special=self.special)))
                    text, tokens = text[:cut], covering(tokens, cut, special=self.special)
                else:  # a stop token: count through it
                    n_through = n_before + stop_at + 1  # type: ignore[operator]
                self.stats.truncate_last(n_through - n_before)
                n_committed = n_through
                finish = "stop"
                if emitted < len(text):
                    yield text[emitted:]
                emitted = len(text)
                self.steps.close()  # type: ignore[attr-defined]  # leaves the caches as after this step
                break
            safe = len(text) - (hold - 1 if hold else 0) if step.finish_reason is None else len(text)
            if safe > emitted:
                yield text[emitted:safe]
                emitted = safe
            if step.finish_reason is not None:
                finish = step.finish_reason
        if self.invalid:
            raise PyllamaSpecError("this stream was cut off by a later generate() (or close()) on the same "
                                   "Generator (they share the KV caches); consume a stream before starting the next")
        if emitted < len(text):
            yield text[emitted:]
        self.timer.stop_wall()
        self.result = GenerationResult(
            text=text, tokens=tokens, finish_reason=finish, prompt_tokens=self.prompt_tokens, stats=self.stats,
            timings=self.timer.as_dict(), spec=self.spec, sampling=self.sampling, n_committed=n_committed,
            n_reused=self.n_reused, marks=dict(self.timer.marks), stage_marks=dict(self.timer.stage_marks),
            n_max_auto=self.auto)

    def _find_stop(self, text: str) -> tuple[int | None, int]:
        """Where the earliest stop string starts, and where it ends (characters)."""
        hits = [(i, i + len(s)) for s, i in ((s, text.find(s)) for s in self.stops) if i >= 0]
        return min(hits) if hits else (None, 0)


class TextStream:
    """An iterator of text pieces (never splitting a UTF-8 character); ``.result`` is the
    :class:`GenerationResult` once the iterator is exhausted. Each next piece is computed
    holding the Generator's lock (see :class:`Generator` for threads)."""

    def __init__(self, run: _Run):
        self._run = run
        self._it = run.pieces()

    def __iter__(self) -> TextStream:
        return self

    def __next__(self) -> str:
        with self._run.gen._lock:
            return next(self._it)

    @property
    def result(self) -> GenerationResult | None:
        return self._run.result


__all__ = ["Generator", "TextStream", "tokenize_chat"]
