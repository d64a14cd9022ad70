"""``Generator``: a target, its drafters, and ``generate()`` — the library's main entry point."""
from __future__ import annotations

import codecs
import logging
import os
from collections.abc import Iterator

import numpy as np

from .chat import render_chat
from .context import Context
from .errors import InvalidArgumentError, PromptTooLongError, PyllamaSpecError, UnsupportedError
from .model import Model
from .speculative.drafters import Drafter, create_drafter, drafter_kind_of_file, drafter_kinds
from .speculative.config import SpecConfig
from .speculative.loop import speculative_generate
from .speculative.report import GenerationResult
from .speculative.sampling import SamplingParams
from .speculative.stats import SpecStats
from .speculative.timing import StageTimer

log = logging.getLogger("pyllama_spec")


class Generator:
    """A target model with named drafters, ready to generate.

    Args:
        target: path of the target ``.gguf``.
        drafters: ``{name: spec}``; a spec is a ``.gguf`` path (its architecture picks the kind:
            ``"draft-dflash"``, ``"draft-eagle3"``, ``"draft-simple"``, ...), a drafter kind with no
            file (``"mtp"``, ``"ngram"``; None = the name is the kind), a ``(kind, kwargs)`` pair,
            or a :class:`~pyllama_spec.speculative.drafters.Drafter` instance (see :meth:`add_drafter`).
        n_ctx, n_batch, n_ubatch, flash_attn, type_k, type_v, n_threads: the target context
            (see :class:`~pyllama_spec.Context`).
        n_gpu_layers: layers to offload, for the target and model drafters (-1 = all).
        repack: llama.cpp's CPU weight repacking (off by default: it crashes on AMX CPUs).

    Raises:
        ModelLoadError (and subclasses), ContextError, DrafterMismatchError.

    Example::

        gen = Generator("target.gguf", drafters={"dflash": "drafter.gguf"}, n_ctx=4096)
        res = gen.generate("Write a debounce function.", drafter="dflash", max_tokens=256)
        print(res.text); print(res.report())
    """

    def __init__(self, target, drafters: dict | None = None, *, n_ctx: int = 4096, n_batch: int = 512,
                 n_ubatch: int | None = None, n_gpu_layers: int = -1, flash_attn="auto", type_k: str = "f16",
                 type_v: str = "f16", n_threads: int | None = None, repack: bool = False, progress: bool = False):
        self.model = Model(target, n_gpu_layers=n_gpu_layers, repack=repack, progress=progress)
        self.ctx = Context(self.model, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch, flash_attn=flash_attn,
                           type_k=type_k, type_v=type_v, n_threads=n_threads)
        self.drafters: dict[str, Drafter] = {}
        self._active: _Run | None = None
        self._drafter_opts = {"n_gpu_layers": n_gpu_layers, "repack": repack}
        for name, spec in (drafters or {}).items():
            self.add_drafter(name, spec)

    def add_drafter(self, name: str, spec=None) -> Drafter:
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
            InvalidArgumentError: an unknown kind or a missing file.
            DrafterMismatchError: the drafter was made for another target.
            TypeError: ``spec`` is none of the above.
        """
        if spec is None:
            spec = name
        if isinstance(spec, Drafter):
            drafter = spec
        elif isinstance(spec, tuple):
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
            drafter = create_drafter(drafter_kind_of_file(spec), self.ctx, path=spec, **self._drafter_opts)
        else:
            raise TypeError(f"drafter spec must be a path, a kind, (kind, kwargs), None or a Drafter, got {spec!r}")
        self.drafters[name] = drafter
        return drafter

    # ------------------------------------------------------------------------------------------
    def tokenize_prompt(self, prompt: str | None = None, messages: list | None = None,
                        template_kwargs: dict | None = None) -> list:
        """The token ids ``generate`` would feed the target for this prompt or chat."""
        vocab = self.model.vocab
        if (prompt is None) == (messages is None):
            raise InvalidArgumentError("pass exactly one of prompt= (a string) or messages= (a chat)")
        if messages is not None:
            bos = vocab.token_to_piece(vocab.bos, special=True).decode() if vocab.bos is not None else ""
            eos = vocab.token_to_piece(vocab.eos, special=True).decode() if vocab.eos is not None else ""
            text = render_chat(self.model.chat_template, messages, bos_token=bos, eos_token=eos,
                               **(template_kwargs or {}))
            toks = vocab.tokenize(text, add_special=True, parse_special=True)
            # a template that writes BOS itself plus a tokenizer that adds one: keep one
            if len(toks) > 1 and vocab.bos is not None and toks[0] == toks[1] == vocab.bos:
                toks = toks[1:]
            return toks
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        return vocab.tokenize(prompt, add_special=True, parse_special=False)

    def generate(self, prompt: str | None = None, *, messages: list | None = None, prompt_tokens: list | None = None,
                 drafter: str | None = None, max_tokens: int = 256, n_max: int | None = None,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
                 seed: int | None = None, stop=None, verify: str = "match", stream: bool = False,
                 sync_stages: bool = True, template_kwargs: dict | None = None,
                 sampling: SamplingParams | None = None, spec: SpecConfig | None = None):
        """Generate a continuation, optionally speculatively.

        The sampling and speculation keywords are a convenience: they build a
        :class:`SamplingParams` and a :class:`SpecConfig`, which can be passed whole instead
        (``sampling=``, ``spec=``; then those keywords must stay at their defaults).

        Args:
            prompt / messages / prompt_tokens: a prompt string, a chat (rendered with the model's
                template), or token ids — exactly one.
            drafter: a name given at construction, or None for plain target decoding.
            max_tokens: most tokens to generate (exact).
            n_max: most draft tokens per step (default: the drafter's; clamped to the drafter's
                maximum, block_size − 1 for DFlash, with a warning).
            temperature, top_k, top_p, min_p, seed: sampling (temperature 0 = greedy).
            stop: a string or list of strings that end the output (excluded from it).
            verify: ``"match"`` (sample the target, accept while equal: llama.cpp's rule) or
                ``"rejection"`` (speculative sampling with the drafter's probabilities).
            stream: return an iterator of text pieces (its ``.result`` is set when exhausted).
            sync_stages: synchronize the backend at stage boundaries (exact per-stage GPU time);
                False runs the loop free for top speed.
            template_kwargs: extra chat-template variables (e.g. ``{"enable_thinking": False}``).
            sampling, spec: whole configuration objects instead of the keywords above.

        Returns:
            :class:`GenerationResult`, or a :class:`TextStream` when ``stream=True``.

        Raises:
            InvalidArgumentError (a ValueError): a bad argument (the message names it and the
                allowed values).
            PromptTooLongError: the prompt does not fit in n_ctx.
        """
        if sampling is None:
            sampling = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed)
        elif (temperature, top_k, top_p, min_p, seed) != (0.0, 0, 1.0, 0.0, None):
            raise InvalidArgumentError("pass either sampling=SamplingParams(...) or the temperature/top_k/top_p/"
                                       "min_p/seed keywords, not both")
        elif not isinstance(sampling, SamplingParams):
            raise InvalidArgumentError(f"sampling must be a SamplingParams, got {type(sampling).__name__}")
        if spec is None:
            spec = SpecConfig(drafter=drafter, n_max=n_max, verify=verify, sync_stages=sync_stages)
        elif (drafter, n_max, verify, sync_stages) != (None, None, "match", True):
            raise InvalidArgumentError("pass either spec=SpecConfig(...) or the drafter/n_max/verify/sync_stages "
                                       "keywords, not both")
        elif not isinstance(spec, SpecConfig):
            raise InvalidArgumentError(f"spec must be a SpecConfig, got {type(spec).__name__}")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise InvalidArgumentError(f"max_tokens must be an int ≥ 1, got {max_tokens!r}")
        d, spec = self._resolve(spec)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if any(not isinstance(s, str) or not s for s in stops):
            raise InvalidArgumentError(f"stop must be a non-empty string or a list of them, got {stop!r}")

        timer = StageTimer(sync=spec.sync_stages)
        timer.start_wall()
        with timer("tokenize"):
            if prompt_tokens is not None:
                if prompt is not None or messages is not None:
                    raise InvalidArgumentError("pass exactly one of prompt=, messages= or prompt_tokens=")
                prompt_tokens = [int(t) for t in prompt_tokens]
                bad = [t for t in prompt_tokens if not 0 <= t < self.model.n_vocab]
                if bad:
                    raise InvalidArgumentError(f"prompt_tokens holds ids outside the vocabulary [0, {self.model.n_vocab}): {bad[:5]}")
            else:
                prompt_tokens = self.tokenize_prompt(prompt, messages, template_kwargs)
        if not prompt_tokens:
            raise InvalidArgumentError("the prompt is empty (no tokens)")
        if len(prompt_tokens) >= self.ctx.n_ctx:
            raise PromptTooLongError(f"the prompt has {len(prompt_tokens)} tokens but n_ctx is {self.ctx.n_ctx}; "
                                     "shorten it or create the Generator with a larger n_ctx")
        if self._active is not None:
            # the target and drafter caches are about to be reused: an unfinished stream is void
            self._active.invalidate()
        stats = SpecStats(n_max=spec.n_max)
        rng = np.random.default_rng(sampling.seed)
        steps = speculative_generate(self.ctx, d, prompt_tokens, max_tokens=max_tokens, n_max=spec.n_max,
                                     sp=sampling, verify=spec.verify, stats=stats, timer=timer, rng=rng)
        run = _Run(self, steps, stops, timer, stats, prompt_tokens, spec)
        self._active = run
        if stream:
            return TextStream(run)
        for _ in run.pieces():
            pass
        return run.result

    def _resolve(self, spec: SpecConfig) -> tuple[Drafter | None, SpecConfig]:
        """The drafter named by ``spec`` and ``spec`` with ``n_max`` resolved (default, clamps).

        Raises:
            InvalidArgumentError: an unknown drafter name.
        """
        if spec.drafter is None:
            return None, spec.replace(n_max=0)
        if spec.drafter not in self.drafters:
            raise InvalidArgumentError(f"unknown drafter {spec.drafter!r}; this generator has: "
                                       f"{', '.join(self.drafters) or 'none'} (or None for plain decoding)")
        d = self.drafters[spec.drafter]
        n_max = d.n_max_default if spec.n_max is None else spec.n_max
        if n_max > d.n_max_limit:
            log.warning("n_max=%d exceeds what drafter %r can make; clamping to %d", n_max, spec.drafter, d.n_max_limit)
            n_max = d.n_max_limit
        if n_max > self.ctx.n_batch - 1:  # the verify batch is [last, drafts...]
            log.warning("n_max=%d does not fit a verify batch of n_batch=%d; clamping to %d", n_max,
                        self.ctx.n_batch, self.ctx.n_batch - 1)
            n_max = self.ctx.n_batch - 1
        return d, spec.replace(n_max=n_max)

    # ------------------------------------------------------------------------------------------
    def memory_report(self) -> dict:
        """Memory in MiB: ``{"target": {...}, "drafters": {name: {...}}}`` with ``weights_mib``,
        ``kv_cache_mib`` and ``compute_mib`` (summed over devices)."""
        return {"target": self.ctx.memory_summary(),
                "drafters": {n: d.memory_report() for n, d in self.drafters.items()}}

    def close(self) -> None:
        """Free every drafter, context and model (idempotent)."""
        for d in self.drafters.values():
            d.close()
        self.ctx.close()
        self.model.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Run:
    """Turns the loop's committed tokens into text pieces, applying stop strings."""

    def __init__(self, gen, steps, stops, timer, stats, prompt_tokens, spec: SpecConfig):
        self.gen, self.steps, self.stops, self.timer, self.stats = gen, steps, stops, timer, stats
        self.prompt_tokens, self.spec = prompt_tokens, spec
        self.result: GenerationResult | None = None
        self.invalid = False

    def invalidate(self) -> None:
        if self.result is None:
            self.invalid = True
            self.steps.close()

    def pieces(self) -> Iterator[str]:
        vocab = self.gen.model.vocab
        dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        tokens: list = []
        text = ""
        emitted = 0
        finish = "length"
        n_committed = 0
        hold = max((len(s) for s in self.stops), default=0)
        for step in self.steps:
            if self.invalid:
                break
            n_committed += len(step.tokens)
            with self.timer("detokenize"):
                for t in step.tokens:
                    if vocab.is_eog(t):
                        break
                    tokens.append(t)
                    text += dec.decode(vocab.token_to_piece(t))
                if step.finish_reason is not None:
                    text += dec.decode(b"", final=True)
            cut = self._find_stop(text)
            if cut is not None:
                text = text[:cut]
                tokens = self._tokens_covering(tokens, cut)
                finish = "stop"
                if emitted < len(text):
                    yield text[emitted:]
                emitted = len(text)
                self.steps.close()  # leaves the caches as they are after this step
                break
            safe = len(text) - (hold - 1 if hold else 0) if step.finish_reason is None else len(text)
            if safe > emitted:
                yield text[emitted:safe]
                emitted = safe
            if step.finish_reason is not None:
                finish = step.finish_reason
        if self.invalid:
            raise PyllamaSpecError("this stream was cut off by a later generate() call on the same Generator "
                                   "(they share the KV caches); consume a stream before starting the next")
        if emitted < len(text):
            yield text[emitted:]
        self.timer.stop_wall()
        self.result = GenerationResult(
            text=text, tokens=tokens, finish_reason=finish, prompt_tokens=self.prompt_tokens, stats=self.stats,
            timings=self.timer.as_dict(), drafter=self.spec.drafter, n_max=self.spec.n_max, verify=self.spec.verify,
            sync_stages=self.spec.sync_stages, n_committed=n_committed, marks=dict(self.timer.marks))

    def _find_stop(self, text: str):
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        return min(hits) if hits else None

    def _tokens_covering(self, tokens: list, n_chars: int) -> list:
        """The shortest prefix of ``tokens`` whose text reaches ``n_chars`` characters."""
        vocab = self.gen.model.vocab
        if n_chars == 0:
            return []
        dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        length = 0
        for i, t in enumerate(tokens):
            length += len(dec.decode(vocab.token_to_piece(t)))
            if length >= n_chars:
                return tokens[:i + 1]
        return tokens


class TextStream:
    """An iterator of text pieces (never splitting a UTF-8 character); ``.result`` is the
    :class:`GenerationResult` once the iterator is exhausted."""

    def __init__(self, run: _Run):
        self._run = run
        self._it = run.pieces()

    def __iter__(self):
        return self

    def __next__(self) -> str:
        return next(self._it)

    @property
    def result(self) -> GenerationResult | None:
        return self._run.result


__all__ = ["Generator", "TextStream"]
