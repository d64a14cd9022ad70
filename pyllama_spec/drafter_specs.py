"""Drafter arguments written as text — the CLI's ``-d`` and the bake-off's ``drafters=[...]`` —
turned into :class:`~pyllama_spec.Generator` drafter specs; one parser, so both read them alike,
and a bare file-reading kind (``-d dflash``) turned into the drafter shipped for the target."""
from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from .assets import FILE_KINDS, shipped_drafter
from .speculative.drafters import _REGISTRY, drafter_kinds


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


def canonical_kind(kind: str) -> str:
    """A registered drafter name or alias (``"dflash"``) → its llama.cpp kind (``"draft-dflash"``);
    any other string is returned as it is."""
    cls = _REGISTRY.get(kind)
    return cls.kind if cls is not None else kind


def with_shipped_drafters(target: str | os.PathLike, specs: dict) -> dict:
    """``specs`` (``{name: Generator drafter spec}``) with every bare kind that needs a file (a
    spec that is just ``"dflash"``, ``"draft-eagle3"``, ... ) replaced by the drafter of that kind
    shipped for ``target`` (:func:`pyllama_spec.assets.shipped_drafter`); other specs are kept as they are.

    Raises:
        ModelNotFoundError: such a kind has no shipped drafter for ``target`` (the message says what ships).
    """
    out = dict(specs)
    for n, spec in specs.items():
        kind = n if spec is None else spec
        if isinstance(kind, str) and not os.path.exists(kind) and canonical_kind(kind) in FILE_KINDS:
            out[n] = os.fspath(shipped_drafter(target, canonical_kind(kind)))
    return out


__all__ = ["parse_drafter_specs", "canonical_kind", "with_shipped_drafters"]
