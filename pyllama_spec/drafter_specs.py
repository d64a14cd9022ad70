"""Drafter arguments written as text — the CLI's ``-d`` and the bake-off's ``drafters=[...]`` —
turned into :class:`~pyllama_spec.Generator` drafter specs; one parser, so both read them alike."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .speculative.drafters import drafter_kinds


def parse_drafter_specs(items: Iterable[str] | None) -> dict[str, Any]:
    """``-d`` values → ``{name: spec}`` for ``Generator(drafters=...)``.

    ``NAME`` (a kind without a file, e.g. ``mtp`` or ``ngram``) → ``"NAME"``; ``NAME=PATH`` (the
    file's architecture picks the kind) → ``"PATH"``; ``NAME=KIND:PATH`` (that kind, when ``KIND`` is
    a registered drafter kind) → ``(KIND, {"path": PATH})``. A later item of the same name wins.
    """
    out: dict[str, Any] = {}
    for item in items or []:
        name, _, spec = item.partition("=")
        kind, sep, path = spec.partition(":")
        if sep and kind in drafter_kinds():
            out[name] = (kind, {"path": path})
        else:
            out[name] = spec or name
    return out


__all__ = ["parse_drafter_specs"]
