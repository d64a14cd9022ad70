"""Per-stage wall-clock timing of the speculative loop.

Stages never nest; ``other`` is whatever the wall time holds beyond them (Python glue).
With ``sync=True`` the stage that queued GPU work waits for it (``llama_synchronize``)
before its clock stops, so GPU time is charged to the stage that caused it; with
``sync=False`` the loop runs free and GPU time lands wherever the next read blocks
(typically ``accept`` or ``draft_sample``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

# "plan": n_max="auto"'s own decisions (how many tokens to ask for, which prefix to verify), on the host; timed
# apart since 2026-12-06 so that auto's cost shows as a stage instead of inside "other" (RESULTS.md 19.4)
STAGES = ("tokenize", "prefill", "plan", "extract", "inject", "draft", "draft_sample", "verify", "accept",
          "rollback", "detokenize")


@dataclass
class StageTime:
    """Total seconds and number of calls of one stage."""
    seconds: float = 0.0
    count: int = 0


@dataclass
class StageTimer:
    """Accumulates seconds per stage; use ``with timer("verify", ctx): ...``."""
    sync: bool = True
    stages: dict = field(default_factory=lambda: {s: StageTime() for s in STAGES})
    wall: float = 0.0
    marks: dict = field(default_factory=dict)
    #: per mark, each stage's seconds at that moment (to split prefill from the decode steps)
    stage_marks: dict = field(default_factory=dict)
    _t0: float = 0.0
    _name: str = ""
    _ctx: Any = None

    def __call__(self, name: str, ctx: Any = None) -> StageTimer:
        """Time stage ``name``; with ``ctx`` (a Context) and ``sync``, wait for its queued GPU work at the end."""
        self._name, self._ctx = name, ctx
        return self

    def __enter__(self) -> StageTimer:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.sync and self._ctx is not None:
            self._ctx.synchronize()
        st = self.stages.get(self._name)
        if st is None:  # (not setdefault: that builds a StageTime every call, 3 a plain token)
            st = self.stages[self._name] = StageTime()
        st.seconds += time.perf_counter() - self._t0
        st.count += 1

    def start_wall(self) -> None:
        self._wall0 = time.perf_counter()

    def mark(self, name: str) -> None:
        """Remember the seconds since :meth:`start_wall` under ``name`` (e.g. the end of prefill)."""
        self.marks[name] = time.perf_counter() - self._wall0
        self.stage_marks[name] = {k: v.seconds for k, v in self.stages.items()}

    def stop_wall(self) -> None:
        self.wall = time.perf_counter() - self._wall0

    def as_dict(self) -> dict:
        """``{stage: {"seconds", "count"}}`` plus ``wall`` and ``other`` (= wall − Σ stages), in seconds."""
        out = {k: {"seconds": v.seconds, "count": v.count} for k, v in self.stages.items()}
        staged = sum(v.seconds for v in self.stages.values())
        out["wall"] = {"seconds": self.wall, "count": 1}
        out["other"] = {"seconds": self.wall - staged, "count": 1}
        return out


__all__ = ["StageTimer", "StageTime", "STAGES"]
