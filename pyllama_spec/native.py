"""llama.cpp's own reference programs (built with ``-C cmake.define.PYLLAMA_SPEC_NATIVE_TOOLS=ON``),
to compare our loop against: ``llama-speculative-simple``, ``llama-completion``, ``llama-simple``."""
from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._bin import find_program
from .errors import PyllamaSpecError
from .speculative.drafters import Drafter


@dataclass
class NativeRun:
    """Output of one native run: ``stdout`` bytes, counters parsed from its log, seconds.

    ``steps``: ``(n_accepted, n_drafted)`` per verify step of ``llama-speculative-simple`` (its
    ``-v`` log). With ``verbose=True`` also, from llama.cpp's debug log: ``drafts`` — per draft
    call, the top candidate ``(token, p)`` at each draft position (``p`` after the drafter's
    top-10 sampler, printed with 3 decimals) — and ``accepted``: the accepted count of each verify step.

    ``decode_tokens_per_s``: generation speed by the wall clock after the prompt, sampling and the
    program's own work between decodes included — what our ``GenerationResult.tokens_per_s``
    measures. ``eval_tokens_per_s`` (``llama-completion`` only): llama.cpp's ``eval time`` figure,
    which counts only the time from each decode's start to its synchronisation
    (``llama_context::synchronize``) and so leaves out sampling and everything the host does
    between decodes; it is higher than the wall rate (by 2 % on a 2-core CPU, more where a decode is
    fast, as on a GPU) and is not comparable with a wall-clock rate.
    """
    stdout: bytes
    stderr: str
    n_drafted: int | None = None
    n_accept: int | None = None
    n_predict: int | None = None
    decode_tokens_per_s: float | None = None
    eval_tokens_per_s: float | None = None
    steps: list = field(default_factory=list)
    drafts: list | None = None
    accepted: list | None = None


def _num(pattern: str, text: str, cast: Callable[[str], Any] = int) -> Any:
    m = re.search(pattern, text)
    return cast(m.group(1)) if m else None


_CANDIDATE = re.compile(r"draft candidate\s+0, pos\s+(\d+):\s+(-?\d+) \(\s*([-\d.]+)\)")
_ACCEPTED = re.compile(r"accepted (\d+)/(\d+) draft tokens")


def _parse_drafts(err: str) -> tuple[list, list]:
    """Each draft call's top candidates ``[(token, p), ...]`` and each step's accepted count, from ``-v``."""
    drafts: list[list[tuple[int, float]]] = []
    accepted: list[int] = []
    last = -1
    for line in err.splitlines():
        m = _CANDIDATE.search(line)
        if m:
            pos = int(m.group(1))
            if pos <= last or not drafts:  # a new draft call (DSpark's anchor-first blocks start at 1)
                drafts.append([])
            last = pos
            drafts[-1].append((int(m.group(2)), float(m.group(3))))
            continue
        m = _ACCEPTED.search(line)
        if m:
            accepted.append(int(m.group(1)))
    return drafts, accepted


def _run(cmd: list[str], name: str, done: str, timeout: float, attempts: int = 3) -> subprocess.CompletedProcess:
    """Run a program whose log must contain ``done`` (a regex of its last summary lines).

    llama.cpp's programs log through a worker thread that is never joined at exit (common/log.cpp,
    ``common_log_main``; llama.cpp issue 22142), so on a loaded machine the tail of stdout and of
    the log can be lost even with exit status 0. Such a cut run is run again (the runs are
    deterministic: greedy, seed 0).
    """
    for _ in range(attempts):
        r = subprocess.run(cmd, capture_output=True, timeout=timeout)
        err = r.stderr.decode("utf-8", "replace")
        if r.returncode != 0:
            raise PyllamaSpecError(f"{name} failed (rc {r.returncode}): {err[-2000:]}")
        if re.search(done, err):
            return r
    raise PyllamaSpecError(f"{name} exited without its final log lines {attempts} times (its log thread was "
                       f"cut at exit): {err[-2000:]}")


def run_speculative_simple(target: str | os.PathLike, drafter: str | os.PathLike | None, prompt: str, *,
                           n_max: int | None = None, n_predict: int, n_ctx: int = 4096, n_gpu_layers: int = 99,
                           spec_type: str = "draft-dflash", p_min: float | None = None,
                           extra: Sequence[object] = (), verbose: bool = False, timeout: float = 600) -> NativeRun:
    """Run ``llama-speculative-simple`` greedily (``--temp 0``, no repacking) and parse its counters.

    The program prints the prompt then the generated pieces (special tokens rendered) on stdout
    and may generate up to one block past ``n_predict`` (when no budget is left it still drafts
    a full block): compare outputs as prefixes, or run ours under :class:`NativeLoopRules`, or
    compare counters only for runs that end at an end-of-generation token (then both loops make
    the same steps).

    Args:
        target: the target ``.gguf``.
        drafter: the draft ``.gguf`` (``-md``), or None for kinds without one (``draft-mtp`` on
            the target's own MTP layers; the n-gram family: pass ``spec_type=d.native_type,
            extra=d.native_args()``).
        n_max: ``--spec-draft-n-max`` (model drafters), or None to leave llama.cpp's default.
        spec_type: llama.cpp's ``--spec-type`` (``draft-simple``, ``draft-eagle3``, ``draft-mtp``,
            ``draft-dflash``, ``draft-dspark``, ``ngram-simple``, ...).
        p_min: ``--spec-draft-p-min`` (None: the program's default, 0).
        extra: more command-line options.
        verbose: run with ``-v``: fills ``steps`` with ``(n_accepted, n_drafted)`` per verify step,
            and ``drafts`` / ``accepted`` with each draft call's candidates.

    Raises:
        PyllamaSpecError: the program failed, or every rerun lost the end of its log.
    """
    cmd = [str(find_program("llama-speculative-simple")), "-m", str(target), "--spec-type", spec_type,
           "-n", str(n_predict), "-p", prompt, "--temp", "0", "-c", str(n_ctx), "-nr", "-ngl", str(n_gpu_layers),
           "--seed", "0"]
    if drafter is not None:
        cmd += ["-md", str(drafter), "-ngld", str(n_gpu_layers)]
    if n_max is not None:
        cmd += ["--spec-draft-n-max", str(n_max)]
    if p_min is not None:
        cmd += ["--spec-draft-p-min", str(p_min)]
    cmd += [*(["-v"] if verbose else []), *(str(x) for x in extra)]
    # our build flushes the program's log before it exits (vendor/patches/0005-speculative-simple-flush-log);
    # _run still reruns a cut run, for builds without it
    r = _run(cmd, "llama-speculative-simple", r"total time\s*=", timeout)
    err = r.stderr.decode("utf-8", "replace")
    drafts, accepted = _parse_drafts(err) if verbose else (None, None)
    steps = [(int(a), int(d)) for a, d in _ACCEPTED.findall(err)]
    return NativeRun(stdout=r.stdout, stderr=err, steps=steps, n_drafted=_num(r"n_drafted\s*=\s*(\d+)", err),
                     n_accept=_num(r"n_accept\s*=\s*(\d+)", err), n_predict=_num(r"n_predict\s*=\s*(\d+)", err),
                     decode_tokens_per_s=_num(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+)", err,
                                              float), drafts=drafts, accepted=accepted)


class NativeLoopRules(Drafter):
    """Wraps a drafter so that our loop drafts as ``llama-speculative-simple`` does near the end
    of a generation, and reports the counters that program would print.

    The native program cuts a draft to ``min(n_ctx - n_past - 2, n_predict - n_generated - 1)``
    tokens but not at all when that is ≤ 0 (``common_speculative_draft`` cuts only for
    ``n_max > 0``), and stops only once more than ``n_predict`` tokens are generated (or at an
    EOS), so its last steps verify whole drafts. Run ours with this wrapper, ``n_max`` ≥ the
    drafter's longest draft and ``max_tokens ≥ n_predict + 1 + n_max``; :meth:`counters` then
    gives the native ``n_predict``, ``n_drafted`` and ``n_accept`` from our steps.

    Args:
        inner: the drafter (its ``kind`` and capabilities are forwarded).
        n_prompt: prompt tokens (the native program's ``inp.size()``).
        n_predict: the native ``-n``.
        n_ctx: the native ``-c``.
    """

    def __init__(self, inner: Drafter, *, n_prompt: int, n_predict: int, n_ctx: int):
        super().__init__(inner.target)
        self.inner = inner
        self.kind = inner.kind  # type: ignore[misc]  # the wrapper answers as the drafter it wraps
        self.target_layer_ids = inner.target_layer_ids
        self.supports_rejection = inner.supports_rejection  # type: ignore[misc]
        self.n_max_limit = self.n_max_default = inner.n_max_limit
        self.n_prompt, self.n_predict, self.n_ctx = n_prompt, n_predict, n_ctx
        self.steps: list[tuple[int, int]] = []  # (drafted, accepted) per verify step

    def begin(self, prompt: list[int], n_keep: int = 0) -> None:
        self.steps = []  # (cached_prefix() is 0: the native program starts cold, so n_keep is always 0)
        self.inner.begin(prompt)

    def observe(self, tokens, positions, n_commit, timer):
        self.inner.observe(tokens, positions, n_commit, timer)

    def propose(self, last_token, n_past, n_max, sp, rng, timer):
        d = self.inner.propose(last_token, n_past, n_max, sp, rng, timer)
        n_generated = n_past - (self.n_prompt - 1)
        limit = min(self.n_ctx - n_past - 2, self.n_predict - n_generated - 1)
        if limit > 0 and len(d.tokens) > limit:
            d = d.prefix(limit)
        return d

    def on_trim(self, n_proposed, n_kept):
        self.inner.on_trim(n_proposed, n_kept)

    def on_accept(self, n_drafted, n_accepted):
        self.steps.append((n_drafted, n_accepted))
        self.inner.on_accept(n_drafted, n_accepted)

    def rollback(self, n_past):
        self.inner.rollback(n_past)

    def memory_report(self):
        return self.inner.memory_report()

    def counters(self, n_committed: int, eos: bool) -> dict:
        """The native counters for our run that committed ``n_committed`` tokens
        (``GenerationResult.n_committed``; ``eos``: it ended at an EOS, the last of them):
        ``{"n_predict", "n_drafted", "n_accept"}``.

        One rule differs at an EOS: when the target agrees with a draft token that is an EOS and
        more draft tokens follow, llama.cpp stops accepting there and counts the EOS as the
        target's own token (``common_sampler_sample_and_accept_n``), while our loop's stats count
        every matching draft token of the block (it cuts the output at the EOS all the same).
        The native count is applied to that last step here.
        """
        n_pred = n_drafted = n_acc = 0
        for d, a in self.steps:
            if eos and n_pred + a + 1 >= n_committed:  # the step that committed the EOS
                j = n_committed - n_pred - 1           # its index in the step's tokens
                if j < a and j + 1 < d:                # an accepted draft token, not the last draft
                    a = j
            n_pred += a + 1
            n_drafted += d
            n_acc += a
            if n_pred > self.n_predict or (eos and n_pred >= n_committed):
                break
        return {"n_predict": n_pred, "n_drafted": n_drafted, "n_accept": n_acc}


def run_completion(model: str | os.PathLike, prompt: str, *, n_predict: int, n_ctx: int = 4096,
                   n_gpu_layers: int = 99, extra: Sequence[str] = (), timeout: float = 600) -> NativeRun:
    """Run ``llama-completion`` greedily without chat mode; ``stdout`` holds only the generated text.

    It prefills the whole prompt in one batch, where our loop (and ``llama-speculative-simple``) decodes all but
    its last token and then that token alone: with an f16 KV cache and flash attention the last prompt row's
    K/V, and so later logits, differ by ~0.05–0.2, enough to flip a near-tie (2026-12-06, CPU: a gap of 0.01
    at the 12th token of a held-out prompt). Its tokens equal ours up to such near-ties; with ``extra=["-fa",
    "off", "-ctk", "f32", "-ctv", "f32"]`` and our context made so too, both prefills give the same logits."""
    cmd = [str(find_program("llama-completion")), "-m", str(model), "-p", prompt, "-n", str(n_predict),
           "--temp", "0", "-nr", "-no-cnv", "--no-display-prompt", "-c", str(n_ctx), "-ngl", str(n_gpu_layers),
           "--seed", "0", *extra]
    r = _run(cmd, "llama-completion", r"total time\s*=", timeout)
    err = r.stderr.decode("utf-8", "replace")
    return NativeRun(stdout=r.stdout, stderr=err, decode_tokens_per_s=_completion_wall_rate(err),
                     eval_tokens_per_s=_num(r"print:\s+eval time =.*?([\d.]+) tokens per second", err, float))


def _completion_wall_rate(log: str) -> float | None:
    """Decodes per second of wall time after the prompt, from ``llama-completion``'s perf lines:
    ``eval time = … / N runs`` over ``total time − prompt eval time`` (the total runs from the
    perf reset after the warm-up to the end, so it holds the prompt, the decodes, sampling and the
    program's work between them)."""
    runs = _num(r"print:\s+eval time =\s+[\d.]+ ms /\s+(\d+) runs", log)
    total = _num(r"print:\s+total time =\s+([\d.]+) ms", log, float)
    prompt = _num(r"print:\s+prompt eval time =\s+([\d.]+) ms", log, float)
    if not runs or total is None or prompt is None or total <= prompt:
        return None
    return runs / ((total - prompt) / 1000.0)


__all__ = ["find_program", "run_speculative_simple", "run_completion", "NativeRun", "NativeLoopRules"]
