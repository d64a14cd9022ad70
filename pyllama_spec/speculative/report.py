"""``GenerationResult``: what ``Generator.generate`` returns, and its human-readable report."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .config import SpecConfig
from .sampling import SamplingParams
from .stats import SpecStats
from .timing import STAGES


@dataclass
class GenerationResult:
    """The outcome of one generation.

    Attributes:
        text: the generated text (stop string and EOS excluded).
        tokens: the generated token ids (EOS excluded; cut at a stop string).
        finish_reason: ``"eos"`` | ``"length"`` | ``"stop"`` | ``"context"``.
        prompt_tokens: the prompt's token ids.
        stats: acceptance statistics (:class:`SpecStats`).
        timings: ``{stage: {"seconds", "count"}}`` with ``wall`` and ``other``; seconds.
        marks: seconds since the call began at ``prefill_start`` and ``prefill_done`` (and, for a
            sequence of ``generate_batch``, ``finished``: when it ended).
        spec: the speculation settings as they ran (``n_max`` resolved: the drafter's default,
            clamps); ``drafter``, ``n_max``, ``verify`` and ``sync_stages`` read from it.
        sampling: the sampling settings.
        n_committed: tokens generated: ``tokens`` plus what ended them (the EOS, the stop token,
            or the tokens of the stop string); nothing after that point. What tokens/s and the
            statistics count (``stats.n_accepted + stats.n_steps == n_committed``).
        n_reused: prompt tokens whose KV-cache entries were kept from the previous call (prefix
            reuse) and not decoded again; see :attr:`n_prefill`.
        extra: anything a caller wants to keep with the result.
        stage_marks: per mark, each stage's seconds at that moment (:attr:`step_timings` uses it).
        n_max_auto: ``n_max="auto"`` chose each step's draft length (``n_max`` is then the ceiling
            and ``stats.draft_lengths`` the choices).
    """
    text: str
    tokens: list[int]
    finish_reason: str
    prompt_tokens: list[int]
    stats: SpecStats
    timings: dict[str, dict[str, float]]
    spec: SpecConfig = field(default_factory=SpecConfig)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    n_committed: int = 0
    n_reused: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    marks: dict[str, float] = field(default_factory=dict)
    stage_marks: dict[str, dict[str, float]] = field(default_factory=dict)
    n_max_auto: bool = False

    @property
    def drafter(self) -> str | None:
        """The drafter's name (None for plain decoding)."""
        return self.spec.drafter

    @property
    def n_max(self) -> int:
        """Draft block size used (tokens; with :attr:`n_max_auto`, the ceiling)."""
        n = self.spec.n_max
        return n if isinstance(n, int) else 0

    @property
    def verify(self) -> str:
        """The verification rule: ``"match"`` or ``"rejection"``."""
        return self.spec.verify

    @property
    def sync_stages(self) -> bool:
        """Whether stage boundaries synchronized the backend."""
        return self.spec.sync_stages

    @property
    def n_prompt(self) -> int:
        return len(self.prompt_tokens)

    @property
    def n_prefill(self) -> int:
        """Prompt tokens the target decoded in the prefill phase: all but the last (the first verify
        step decodes it) and but the :attr:`n_reused` kept from the previous call."""
        return max(0, self.n_prompt - 1 - self.n_reused)

    @property
    def n_generated(self) -> int:
        """Tokens generated (:attr:`n_committed`: the EOS or stop tokens that ended the output included)."""
        return self.n_committed or len(self.tokens)

    @property
    def prefill_seconds(self) -> float:
        """Seconds of the prefill phase (target prefill + the drafter's feature injection)."""
        return self.marks["prefill_done"] - self.marks["prefill_start"]

    @property
    def prompt_tokens_per_s(self) -> float:
        """Prefill throughput: prompt tokens decoded (:attr:`n_prefill`) / :attr:`prefill_seconds`."""
        s = self.prefill_seconds
        return self.n_prefill / s if s > 0 and self.n_prefill > 0 else float("nan")

    @property
    def generation_seconds(self) -> float:
        """Seconds from the end of prefill to the end of the call (in a batch: to the step where this
        sequence ended, ``marks["finished"]``)."""
        end = self.marks.get("finished", self.timings["wall"]["seconds"])
        return end - self.marks["prefill_done"]

    @property
    def tokens_per_s(self) -> float:
        """Generation throughput: committed tokens / :attr:`generation_seconds`."""
        s = self.generation_seconds
        return self.n_generated / s if s > 0 else float("nan")

    @property
    def step_timings(self) -> dict[str, float]:
        """Seconds per stage after prefill, i.e. over the decode steps: ``{stage: seconds}`` with
        ``other`` = :attr:`generation_seconds` − Σ stages (Python glue between them)."""
        base = self.stage_marks.get("prefill_done", {})
        out = {k: v["seconds"] - base.get(k, 0.0) for k, v in self.timings.items() if k not in ("wall", "other")}
        out["other"] = self.generation_seconds - sum(out.values())
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: text, tokens, counts, settings, statistics, timings and throughput."""
        return {"text": self.text, "tokens": self.tokens, "finish_reason": self.finish_reason,
                "n_prompt": self.n_prompt, "n_reused": self.n_reused, "n_prefill": self.n_prefill,
                "n_generated": self.n_generated, "drafter": self.drafter,
                "n_max": self.n_max, "n_max_auto": self.n_max_auto, "verify": self.verify,
                "sync_stages": self.sync_stages,
                "sampling": {"temperature": self.sampling.temperature, "top_k": self.sampling.top_k,
                             "top_p": self.sampling.top_p, "min_p": self.sampling.min_p, "seed": self.sampling.seed},
                "stats": self.stats.as_dict(), "timings": self.timings,
                "prompt_tokens_per_s": self.prompt_tokens_per_s, "tokens_per_s": self.tokens_per_s}

    def report(self) -> str:
        """The timing + acceptance table (per-stage ms, % of wall, ms per step, throughput)."""
        t = self.timings
        wall = t["wall"]["seconds"]
        steps = max(1, self.stats.n_steps)
        n_max = f"auto (≤ {self.n_max}, mean {self.stats.mean_draft_length:.2f})" if self.n_max_auto else self.n_max
        lines = [f"drafter={self.drafter or 'none'}  n_max={n_max}  verify={self.verify}  "
                 f"sync_stages={self.sync_stages}  finish={self.finish_reason}",
                 f"prompt {self.n_prompt} tok" + (f" ({self.n_reused} reused)" if self.n_reused else "")
                 + f"   generated {len(self.tokens)} tok"
                 + (f" (+{self.n_generated - len(self.tokens)} EOS/stop)"
                    if self.n_generated > len(self.tokens) else "")
                 + f"   steps {self.stats.n_steps}",
                 f"{'stage':<13}{'ms':>10}{'% wall':>9}{'calls':>8}{'ms/step':>10}"]
        for name in STAGES + ("other",):  # noqa: RUF005
            st = t.get(name, {"seconds": 0.0, "count": 0})
            if name != "other" and st["count"] == 0:
                continue
            ms = st["seconds"] * 1e3
            lines.append(f"{name:<13}{ms:>10.2f}{100 * st['seconds'] / wall if wall else 0:>8.1f}%"
                         f"{st['count']:>8}{ms / steps:>10.3f}")
        lines.append(f"{'wall':<13}{wall * 1e3:>10.2f}{100.0:>8.1f}%")
        s = self.stats
        pps = self.prompt_tokens_per_s
        lines.append(f"prompt {'–' if self.n_prefill < 1 else f'{pps:,.1f}'} tok/s   "
                     f"generation {self.tokens_per_s:,.1f} tok/s")
        if s.n_drafted:
            per_pos = " ".join(f"{x:.2f}" for x in s.accepted_per_position)
            lines.append(f"drafted {s.n_drafted}  accepted {s.n_accepted}  acceptance {100 * s.acceptance_rate:.1f}%  "
                         f"τ {s.mean_accepted_length:.2f}")
            lines.append(f"acceptance per position: {per_pos}")
        return "\n".join(lines)


__all__ = ["GenerationResult"]
