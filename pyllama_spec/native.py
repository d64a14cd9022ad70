"""llama.cpp's own reference programs (built with ``-C cmake.define.PYLLAMA_SPEC_NATIVE_TOOLS=ON``),
to compare our loop against: ``llama-speculative-simple``, ``llama-completion``, ``llama-simple``."""
from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import PyllamaSpecError, UnsupportedError


def find_program(name: str) -> Path:
    """Path of a reference program installed with the package.

    Raises:
        UnsupportedError: not built; reinstall with ``-C cmake.define.PYLLAMA_SPEC_NATIVE_TOOLS=ON``.
    """
    import pyllama_spec

    for d in pyllama_spec.__path__:
        p = Path(d) / "bin" / name
        if p.is_file() and os.access(p, os.X_OK):
            return p
    raise UnsupportedError(f"{name} is not installed: reinstall with "
                           "`pip install . -C cmake.define.PYLLAMA_SPEC_NATIVE_TOOLS=ON`")


@dataclass
class NativeRun:
    """Output of one native run: ``stdout`` bytes, counters parsed from its log, seconds.

    With ``verbose=True`` also, from llama.cpp's debug log: ``drafts`` — per draft call, the
    top candidate ``(token, p)`` at each draft position (``p`` after the drafter's top-10
    sampler, printed with 3 decimals) — and ``accepted``: the accepted count of each verify step.
    """
    stdout: bytes
    stderr: str
    n_drafted: int | None = None
    n_accept: int | None = None
    n_predict: int | None = None
    decode_tokens_per_s: float | None = None
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
    for line in err.splitlines():
        m = _CANDIDATE.search(line)
        if m:
            if int(m.group(1)) == 0:
                drafts.append([])
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


def run_speculative_simple(target: str | os.PathLike, drafter: str | os.PathLike, prompt: str, *, n_max: int,
                           n_predict: int, n_ctx: int = 4096, n_gpu_layers: int = 99,
                           spec_type: str = "draft-dflash", extra: Sequence[str] = (),
                           verbose: bool = False, timeout: float = 600) -> NativeRun:
    """Run ``llama-speculative-simple`` greedily (``--temp 0``, no repacking) and parse its counters.

    The program prints the prompt then the generated pieces (special tokens rendered) on stdout
    and may generate up to one block past ``n_predict``: compare outputs as prefixes.

    Args:
        spec_type: llama.cpp's ``--spec-type``: ``draft-dflash``, ``draft-eagle3``, ``draft-simple``, ...
        verbose: run with ``-v`` and parse each draft call's candidates (``NativeRun.drafts``).
    """
    cmd = [str(find_program("llama-speculative-simple")), "-m", str(target), "-md", str(drafter),
           "--spec-type", spec_type, "--spec-draft-n-max", str(n_max), "-n", str(n_predict), "-p", prompt,
           "--temp", "0", "-c", str(n_ctx), "-nr", "-ngl", str(n_gpu_layers), "-ngld", str(n_gpu_layers),
           "--seed", "0", *(["-v"] if verbose else []), *extra]
    r = _run(cmd, "llama-speculative-simple", r"total time\s*=", timeout)
    err = r.stderr.decode("utf-8", "replace")
    drafts, accepted = _parse_drafts(err) if verbose else (None, None)
    return NativeRun(stdout=r.stdout, stderr=err, n_drafted=_num(r"n_drafted\s*=\s*(\d+)", err),
                     n_accept=_num(r"n_accept\s*=\s*(\d+)", err), n_predict=_num(r"n_predict\s*=\s*(\d+)", err),
                     decode_tokens_per_s=_num(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+)", err,
                                              float), drafts=drafts, accepted=accepted)


def run_completion(model: str | os.PathLike, prompt: str, *, n_predict: int, n_ctx: int = 4096,
                   n_gpu_layers: int = 99, extra: Sequence[str] = (), timeout: float = 600) -> NativeRun:
    """Run ``llama-completion`` greedily without chat mode; ``stdout`` holds only the generated text."""
    cmd = [str(find_program("llama-completion")), "-m", str(model), "-p", prompt, "-n", str(n_predict),
           "--temp", "0", "-nr", "-no-cnv", "--no-display-prompt", "-c", str(n_ctx), "-ngl", str(n_gpu_layers),
           "--seed", "0", *extra]
    r = _run(cmd, "llama-completion", r"total time\s*=", timeout)
    err = r.stderr.decode("utf-8", "replace")
    return NativeRun(stdout=r.stdout, stderr=err,
                     decode_tokens_per_s=_num(r"print:\s+eval time =.*?([\d.]+) tokens per second", err, float))


__all__ = ["find_program", "run_speculative_simple", "run_completion", "NativeRun"]
