"""``SamplerChain``: llama.cpp's own sampler chain (``llama_sampler_chain_*``).

Two uses: sampling a context's logits on the host in C (:meth:`SamplerChain.sample`), and
*backend sampling* — attached to a context with :meth:`Context.set_sampler`, the chain runs
inside the decode graph (on the GPU when there is one) and only the drawn tokens come back.
The speculative loop uses the latter for greedy and match verification and for the drafter's
argmax; rejection sampling needs the distributions themselves and uses the numpy rules of
``speculative/sampling.py``."""
from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from . import backend
from ._check import check_int
from ._ffi import ffi, lib
from ._locks import locked
from .errors import ClosedError, InvalidArgumentError
from .sampling_params import SamplingParams

if TYPE_CHECKING:
    from .context import Context


class SamplerChain:
    """top-k → top-p → min-p → temperature → seeded draw (greedy when temperature == 0),
    the order of llama.cpp's default chain.

    Raises:
        InvalidTypeError, InvalidArgumentError: a sampling value of the wrong type or out of range
            (see :class:`SamplingParams`).

    Calls are serialised by a lock, and :meth:`sample` holds the context's too (``_locks.py``).
    """

    def __init__(self, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
                 seed: int | None = None):
        backend.ensure_init()
        self._lock = threading.RLock()
        self.params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed)
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        self._ptr = ffi.gc(chain, lib.llama_sampler_free)
        self._attached = False  # set by Context.set_sampler: llama.cpp sets a chain up for one context once
        self._attached_to: weakref.ref[Context] | None = None
        self.draws = True  # ends in a draw: one token per row (False: candidates only, see candidates())
        self.logprobs = False  # candidates() only: the kept values are log-probabilities, not logits
        if self.params.greedy:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
            return
        if top_k:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_k(top_k))
        if top_p < 1.0:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_p(top_p, 1))
        if min_p > 0.0:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_min_p(min_p, 1))
        lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_temp(temperature))
        lib.llama_sampler_chain_add(
            chain, lib.llama_sampler_init_dist(lib.LLAMA_DEFAULT_SEED if seed is None else seed))

    @classmethod
    def candidates(cls, k: int = 10, *, logprobs: bool = False) -> SamplerChain:
        """top-k alone, without a draw: attached to a context, each output row keeps its ``k`` best
        token ids and their logits (:meth:`Context.sampled_candidates`) instead of one token — the
        draft chain of llama.cpp's DFlash drafter (common/speculative.cpp), which takes the argmax
        and its probability over these candidates from it. ``logprobs``: their log-probabilities under
        the softmax of the whole row instead (``logit − log Σ exp`` over every token, computed in the
        graph: vendor/patches/0011-sampler-top-k-logprobs), what a token tree ranks its paths by.

        Raises:
            InvalidTypeError, InvalidArgumentError: ``k`` is not an int ≥ 1.
        """
        k = check_int("k", k, min=1)
        backend.ensure_init()
        self = cls.__new__(cls)
        self._lock = threading.RLock()
        self.params = SamplingParams(top_k=k)
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        self._ptr = ffi.gc(chain, lib.llama_sampler_free)
        self._attached = False
        self._attached_to = None
        self.draws = False
        self.logprobs = bool(logprobs)
        init = lib.llama_sampler_init_top_k_logprobs if logprobs else lib.llama_sampler_init_top_k
        lib.llama_sampler_chain_add(chain, init(k))
        return self

    @classmethod
    def from_params(cls, sp: SamplingParams) -> SamplerChain:
        """The chain that draws from the distribution :func:`~pyllama_spec.speculative.sampling.probs`
        computes for ``sp`` (same filters, same order)."""
        return cls(temperature=sp.temperature, top_k=sp.top_k, top_p=sp.top_p, min_p=sp.min_p, seed=sp.seed)

    @property
    def ptr(self) -> Any:
        """The ``llama_sampler *`` (raises once closed)."""
        if self._ptr is None:
            raise ClosedError("this sampler chain is closed: create a new one")
        return self._ptr

    def __repr__(self) -> str:
        if self.draws:
            return f"SamplerChain({self.params})"
        return f"SamplerChain.candidates({self.params.top_k}{', logprobs=True' if self.logprobs else ''})"

    @locked
    def sample(self, ctx: Context, idx: int = -1) -> int:
        """Sample from the logits of batch row ``idx`` of ``ctx``'s last decode (and accept it).

        Raises:
            IndexError: row ``idx`` produced no logits.
        """
        with ctx._lock:
            ctx.logits_ith(idx)  # raises IndexError before llama.cpp would abort on a bad row
            return int(lib.llama_sampler_sample(self.ptr, ctx.ptr, idx))

    @locked
    def accept(self, token: int) -> None:
        """Commit ``token``: advances stateful samplers (with backend sampling of several rows per
        decode, llama.cpp's seeded draw advances its generator only for accepted tokens)."""
        lib.llama_sampler_accept(self.ptr, token)

    @locked
    def reset(self) -> None:
        """Forget the accepted tokens."""
        lib.llama_sampler_reset(self.ptr)

    @locked
    def close(self) -> None:
        """Free the chain (idempotent).

        Raises:
            InvalidArgumentError: it is attached to an open context (llama.cpp would use it after
                the free): detach it first with ``ctx.set_sampler(None)``, or close the context.
        """
        ctx = self._attached_to() if self._attached_to is not None else None
        if ctx is not None and ctx._ptr is not None and any(c is self for c in ctx._samplers.values()):
            raise InvalidArgumentError(f"{self!r} is attached to a context: detach it with set_sampler(None) "
                                       "or close the context before closing the chain")
        if self._ptr is not None:
            ffi.release(self._ptr)
            self._ptr = None


__all__ = ["SamplerChain"]
