"""``GenerationResult``: what ``Generator.generate`` returns, and its human-readable report."""
from __future__ import annotations

from dataclasses import dataclass, field

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
        marks: seconds since the call began at ``prefill_start`` and ``prefill_done``.
        drafter: the drafter's name (None for plain decoding).
        n_max: draft block size used; verify: the verification rule; sync_stages: whether stage
            boundaries synchronized the backend.
        n_committed: tokens the loop committed (``tokens`` plus an EOS or the tokens cut by a stop
            string); what tokens/s counts.
        extra: anything a caller wants to keep with the result.
        stage_marks: per mark, each stage's seconds at that moment (:attr:`step_timings` uses it).
        n_max_auto: ``n_max="auto"`` chose each step's draft length (``n_max`` is then the ceiling
            and ``stats.draft_lengths`` the choices).
    """
    text: str
    tokens: list
    finish_reason: str
    prompt_tokens: list
    stats: SpecStats
    timings: dict
    drafter: str | None = None
    n_max: int = 0
    verify: str = "match"
    sync_stages: bool = True
    n_committed: int = 0
    extra: dict = field(default_factory=dict)
    marks: dict = field(default_factory=dict)
    stage_marks: dict = field(default_factory=dict)
    n_max_auto: bool = False

    @property
    def n_prompt(self) -> int:
        return len(self.prompt_tokens)

    @property
    def n_generated(self) -> int:
        """Tokens committed by the loop (the EOS token included when there was one)."""
        return self.n_committed or len(self.tokens)

    @property
    def prefill_seconds(self) -> float:
        """Seconds of the prefill phase (target prefill + the drafter's feature injection)."""
        return self.marks["prefill_done"] - self.marks["prefill_start"]

    @property
    def prompt_tokens_per_s(self) -> float:
        """Prefill throughput: prompt tokens (all but the last) / :attr:`prefill_seconds`."""
        s = self.prefill_seconds
        return (self.n_prompt - 1) / s if s > 0 and self.n_prompt > 1 else float("nan")

    @property
    def generation_seconds(self) -> float:
        """Seconds from the end of prefill to the end of the call."""
        return self.timings["wall"]["seconds"] - self.marks["prefill_done"]

    @property
    def tokens_per_s(self) -> float:
        """Generation throughput: committed tokens / :attr:`generation_seconds`."""
        s = self.generation_seconds
        return self.n_generated / s if s > 0 else float("nan")

    @property
    def step_timings(self) -> dict:
        """Seconds per stage after prefill, i.e. over the decode steps: ``{stage: seconds}`` with
        ``other`` = :attr:`generation_seconds` − Σ stages (Python glue between them)."""
        base = self.stage_marks.get("prefill_done", {})
        out = {k: v["seconds"] - base.get(k, 0.0) for k, v in self.timings.items() if k not in ("wall", "other")}
        out["other"] = self.generation_seconds - sum(out.values())
        return out

    def as_dict(self) -> dict:
        return {"text": self.text, "tokens": self.tokens, "finish_reason": self.finish_reason,
                "n_prompt": self.n_prompt, "n_generated": self.n_generated, "drafter": self.drafter,
                "n_max": self.n_max, "n_max_auto": self.n_max_auto, "verify": self.verify, "sync_stages": self.sync_stages,
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
                 f"prompt {self.n_prompt} tok   generated {len(self.tokens)} tok"
                 + (f" (+{self.n_generated - len(self.tokens)} EOS/stop)" if self.n_generated > len(self.tokens) else "")
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
        lines.append(f"prompt {'–' if self.n_prompt < 2 else f'{pps:,.1f}'} tok/s   "
                     f"generation {self.tokens_per_s:,.1f} tok/s")
        if s.n_drafted:
            per_pos = " ".join(f"{x:.2f}" for x in s.accepted_per_position)
            lines.append(f"drafted {s.n_drafted}  accepted {s.n_accepted}  acceptance {100 * s.acceptance_rate:.1f}%  "
                         f"τ {s.mean_accepted_length:.2f}")
            lines.append(f"acceptance per position: {per_pos}")
        return "\n".join(lines)


__all__ = ["GenerationResult"]
