"""llama.cpp's own reference programs (built with ``-C cmake.define.PYLLAMA_SPEC_NATIVE_TOOLS=ON``),
to compare our loop against: ``llama-speculative-simple``, ``llama-completion``, ``llama-simple``."""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UnsupportedError


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
    """Output of one native run: ``stdout`` bytes, counters parsed from its log, seconds, and
    (``llama-speculative-simple``) ``steps``: ``(n_accepted, n_drafted)`` per verify step."""
    stdout: bytes
    stderr: str
    n_drafted: int | None = None
    n_accept: int | None = None
    n_predict: int | None = None
    decode_tokens_per_s: float | None = None
    steps: list = field(default_factory=list)


def _num(pattern: str, text: str, cast=int):
    m = re.search(pattern, text)
    return cast(m.group(1)) if m else None


def run_speculative_simple(target, drafter, prompt: str, *, n_max: int, n_predict: int, n_ctx: int = 4096,
                           n_gpu_layers: int = 99, spec_type: str = "draft-dflash", p_min: float | None = None,
                           verbose: bool = False, extra=(), timeout: float = 600, attempts: int = 8) -> NativeRun:
    """Run ``llama-speculative-simple`` greedily (``--temp 0``, no repacking) and parse its counters.

    Args:
        drafter: the draft ``.gguf`` (``-md``), or None for kinds without one (``draft-mtp`` on
            the target's own MTP layers).
        spec_type: llama.cpp's ``--spec-type`` (``draft-simple``, ``draft-eagle3``, ``draft-mtp``,
            ``draft-dflash``, ``draft-dspark``, ...).
        p_min: ``--spec-draft-p-min`` (None: the program's default, 0).
        verbose: run with ``-v`` and fill ``steps`` with ``(n_accepted, n_drafted)`` per verify
            step. llama.cpp's logger writes from a thread that the program does not wait for at
            exit, so under load the last lines of a verbose run can be lost: use for debugging.

    The program prints the prompt then the generated pieces (special tokens rendered) on stdout
    and may generate up to one block past ``n_predict`` (when no budget is left it still drafts
    a full block): compare outputs as prefixes, and counters only for runs that end at an
    end-of-generation token (then both loops make the same steps).

    llama.cpp's logger prints from a thread that ``main`` does not wait for: on a busy machine
    the program can exit (status 0) before the thread has printed the end of the output, the
    counters included. A run without its final counters is therefore repeated (up to
    ``attempts`` times); everything before the counters is complete when they are present,
    since the logger prints in order.

    Raises:
        RuntimeError: the program failed, or every attempt lost its output.
    """
    cmd = [str(find_program("llama-speculative-simple")), "-m", str(target)]
    if drafter is not None:
        cmd += ["-md", str(drafter), "-ngld", str(n_gpu_layers)]
    cmd += ["--spec-type", spec_type, "--spec-draft-n-max", str(n_max), "-n", str(n_predict), "-p", prompt,
            "--temp", "0", "-c", str(n_ctx), "-nr", "-ngl", str(n_gpu_layers), "--seed", "0"]
    if p_min is not None:
        cmd += ["--spec-draft-p-min", str(p_min)]
    if verbose:
        cmd.append("-v")
    cmd += list(extra)
    for _attempt in range(attempts):
        r = subprocess.run(cmd, capture_output=True, timeout=timeout)
        err = r.stderr.decode("utf-8", "replace")
        if r.returncode != 0:
            raise RuntimeError(f"llama-speculative-simple failed (rc {r.returncode}): {err[-2000:]}")
        if re.search(r"n_accept\s*=", err):
            break
    else:
        raise RuntimeError(f"llama-speculative-simple lost the end of its output in {attempts} runs (its logger "
                           "thread is not waited for at exit; the machine is too busy): try again")
    steps = [(int(a), int(d)) for a, d in re.findall(r"accepted (\d+)/(\d+) draft tokens", err)]
    return NativeRun(stdout=r.stdout, stderr=err, steps=steps, n_drafted=_num(r"n_drafted\s*=\s*(\d+)", err),
                     n_accept=_num(r"n_accept\s*=\s*(\d+)", err), n_predict=_num(r"n_predict\s*=\s*(\d+)", err),
                     decode_tokens_per_s=_num(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+)", err,
                                              float))


def run_completion(model, prompt: str, *, n_predict: int, n_ctx: int = 4096, n_gpu_layers: int = 99,
                   extra=(), timeout: float = 600) -> NativeRun:
    """Run ``llama-completion`` greedily without chat mode; ``stdout`` holds only the generated text."""
    cmd = [str(find_program("llama-completion")), "-m", str(model), "-p", prompt, "-n", str(n_predict),
           "--temp", "0", "-nr", "-no-cnv", "--no-display-prompt", "-c", str(n_ctx), "-ngl", str(n_gpu_layers),
           "--seed", "0", *extra]
    r = subprocess.run(cmd, capture_output=True, timeout=timeout)
    err = r.stderr.decode("utf-8", "replace")
    if r.returncode != 0:
        raise RuntimeError(f"llama-completion failed (rc {r.returncode}): {err[-2000:]}")
    return NativeRun(stdout=r.stdout, stderr=err,
                     decode_tokens_per_s=_num(r"print:\s+eval time =.*?([\d.]+) tokens per second", err, float))


__all__ = ["find_program", "run_speculative_simple", "run_completion", "NativeRun"]
