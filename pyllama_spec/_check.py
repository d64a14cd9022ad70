"""Argument checks shared by every public function: one wording, one rule (``errors.py``).

A wrong type raises :class:`~pyllama_spec.InvalidTypeError` (a ``TypeError``), a wrong value
:class:`~pyllama_spec.InvalidArgumentError` (a ``ValueError``); the message names the argument,
what is accepted, and what was received. ``bool`` is refused where an int or a float is meant
(``True`` is an ``int`` to Python, never a token count to us); numpy integers and floats are
accepted as ints and floats.
"""
from __future__ import annotations

import numbers
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal, overload

import numpy as np

from .errors import InvalidArgumentError, InvalidTypeError


def _got(value: object) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


@overload
def check_int(name: str, value: object, *, min: int | None = ..., max: int | None = ...,
              none_ok: Literal[False] = ..., what: str = ...) -> int: ...
@overload
def check_int(name: str, value: object, *, min: int | None = ..., max: int | None = ...,
              none_ok: bool = ..., what: str = ...) -> int | None: ...
def check_int(name: str, value: object, *, min: int | None = None, max: int | None = None,
              none_ok: bool = False, what: str = "") -> int | None:
    """``value`` as an int in ``[min, max]`` (None allowed when ``none_ok``).

    Raises:
        InvalidTypeError: not an int (a bool is not one).
        InvalidArgumentError: outside ``[min, max]``.
    """
    if value is None and none_ok:
        return None
    if what:
        allowed = what
    elif min is not None and max is not None:
        allowed = f"an int in [{min}, {max}]"
    elif min is not None:
        allowed = f"an int ≥ {min}"
    elif max is not None:
        allowed = f"an int ≤ {max}"
    else:
        allowed = "an int"
    if none_ok and not what:
        allowed += " or None"
    if not _is_int(value):
        raise InvalidTypeError(f"{name} must be {allowed}, got {_got(value)}")
    v = int(value)  # type: ignore[call-overload]
    if (min is not None and v < min) or (max is not None and v > max):
        raise InvalidArgumentError(f"{name} must be {allowed}, got {v}")
    return v


def check_float(name: str, value: object, *, min: float | None = None, max: float | None = None,
                min_open: bool = False, max_open: bool = False, what: str = "") -> float:
    """``value`` as a finite float within the bounds (``*_open``: the bound itself is excluded).

    Raises:
        InvalidTypeError: not a real number (a bool is not one).
        InvalidArgumentError: NaN, infinite or out of bounds.
    """
    lo = "(" if min_open else "["
    hi = ")" if max_open else "]"
    allowed = what or (f"a number in {lo}{min if min is not None else '-inf'}, "
                       f"{max if max is not None else 'inf'}{hi}")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise InvalidTypeError(f"{name} must be {allowed}, got {_got(value)}")
    v = float(value)
    bad = not np.isfinite(v)
    if min is not None:
        bad = bad or v < min or (min_open and v == min)
    if max is not None:
        bad = bad or v > max or (max_open and v == max)
    if bad:
        raise InvalidArgumentError(f"{name} must be {allowed}, got {v!r}")
    return v


def check_bool(name: str, value: object) -> bool:
    """``value`` as a bool (``True``/``False``, numpy bools too).

    Raises:
        InvalidTypeError: anything else (``1``, ``"yes"``, None).
    """
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidTypeError(f"{name} must be True or False, got {_got(value)}")
    return bool(value)


def check_choice(name: str, value: object, choices: Sequence[object]) -> object:
    """``value`` if it is one of ``choices`` (compared with ``==``, types too: ``1`` is not ``True``).

    Raises:
        InvalidTypeError: ``value`` has none of the choices' types.
        InvalidArgumentError: not one of them.
    """
    for c in choices:
        if type(value) is type(c) and value == c:
            return value
    exc = InvalidArgumentError if any(type(value) is type(c) for c in choices) else InvalidTypeError
    raise exc(f"{name} must be one of {', '.join(repr(c) for c in choices)}, got {_got(value)}")


@overload
def check_str(name: str, value: object, *, none_ok: Literal[False] = ..., nonempty: bool = ...) -> str: ...
@overload
def check_str(name: str, value: object, *, none_ok: bool = ..., nonempty: bool = ...) -> str | None: ...
def check_str(name: str, value: object, *, none_ok: bool = False, nonempty: bool = False) -> str | None:
    """``value`` as a str (None allowed when ``none_ok``).

    Raises:
        InvalidTypeError: not a str.
        InvalidArgumentError: empty while ``nonempty``.
    """
    if value is None and none_ok:
        return None
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name} must be a str{' or None' if none_ok else ''}, got {_got(value)}")
    if nonempty and not value:
        raise InvalidArgumentError(f"{name} must be a non-empty str")
    return value


def check_path(name: str, value: object) -> Path:
    """``value`` (a str or ``os.PathLike``) as a Path.

    Raises:
        InvalidTypeError: anything else.
    """
    if not isinstance(value, (str, os.PathLike)):
        raise InvalidTypeError(f"{name} must be a path (str or os.PathLike), got {_got(value)}")
    return Path(value)


def check_str_list(name: str, value: object, *, nonempty_items: bool = True) -> list[str]:
    """A str or an iterable of str as a list (None → ``[]``).

    Raises:
        InvalidTypeError: not a str, None or an iterable of str (the offending item is named).
        InvalidArgumentError: an empty string among them (while ``nonempty_items``).
    """
    if value is None:
        return []
    if isinstance(value, str):
        items: list[object] = [value]
    elif isinstance(value, (bytes, bytearray)) or not isinstance(value, Iterable):
        raise InvalidTypeError(f"{name} must be a str or a list of str, got {_got(value)}")
    else:
        items = list(value)
    for i, s in enumerate(items):
        if not isinstance(s, str):
            raise InvalidTypeError(f"{name} must be a str or a list of str; item {i} is {_got(s)}")
        if nonempty_items and not s:
            raise InvalidArgumentError(f"{name}: item {i} is an empty string (it would match everywhere)")
    return items  # type: ignore[return-value]


def check_token_ids(name: str, value: object, n_vocab: int, *, nonempty: bool = False) -> list[int]:
    """An iterable of token ids (Python or numpy ints) as a list of int, each in ``[0, n_vocab)``.

    Raises:
        InvalidTypeError: not an iterable of ints (a str, floats or bools are not token ids).
        InvalidArgumentError: an id outside the vocabulary, or empty while ``nonempty``.
    """
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or not np.issubdtype(value.dtype, np.integer):
            raise InvalidTypeError(f"{name} must be a 1-D array or list of int token ids, got an array of "
                                   f"shape {value.shape} and dtype {value.dtype}")
        ids = [int(t) for t in value]
    elif isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Iterable):
        raise InvalidTypeError(f"{name} must be a list of int token ids, got {_got(value)}")
    else:
        ids = []
        for i, t in enumerate(value):
            if not _is_int(t):
                raise InvalidTypeError(f"{name} must be a list of int token ids; item {i} is {_got(t)}")
            ids.append(int(t))
    if nonempty and not ids:
        raise InvalidArgumentError(f"{name} is empty: give at least one token id")
    bad = [t for t in ids if not 0 <= t < n_vocab]
    if bad:
        raise InvalidArgumentError(f"{name} holds ids outside the vocabulary [0, {n_vocab}): {bad[:5]}")
    return ids


__all__ = ["check_bool", "check_choice", "check_float", "check_int", "check_path", "check_str",
           "check_str_list", "check_token_ids"]
