"""``Vocab``: tokenizer and special tokens of a model (borrowed from its ``Model``)."""
from __future__ import annotations

import codecs
from typing import TYPE_CHECKING, Any

from ._check import check_bool, check_int, check_str, check_token_ids
from ._ffi import ffi, lib
from ._locks import locked
from .errors import ClosedError

if TYPE_CHECKING:
    import threading
    from collections.abc import Iterable

    from .model import Model


# enum llama_vocab_type, in llama.h's order
_VOCAB_KINDS = {0: "none", 1: "spm", 2: "bpe", 3: "wpm", 4: "ugm", 5: "rwkv", 6: "plamo2"}


class Vocab:
    """The vocabulary of a :class:`~pyllama_spec.Model` (valid while the model is open).

    Token ids are Python ints; special tokens that a model lacks are ``None``. Calls share the
    model's lock (``_locks.py``).
    """

    def __init__(self, model: Model, ptr: Any) -> None:
        self._model = model  # keeps the llama_model alive
        self._raw = ptr
        self.n_tokens: int = lib.llama_vocab_n_tokens(ptr)
        self._piece_cache: dict[tuple[int, bool], bytes] = {}
        self._eog_cache: dict[int, bool] = {}  # (is_eog: each token's answer, asked twice a generated token)

    @property
    def _lock(self) -> threading.RLock:
        return self._model._lock

    @property
    def _ptr(self) -> Any:
        if self._model._ptr is None:
            raise ClosedError(f"the model {self._model.path.name} is closed: its vocabulary is gone")
        return self._raw

    @staticmethod
    def _special(tok: int) -> int | None:
        return None if tok < 0 else int(tok)

    @property
    @locked
    def bos(self) -> int | None:
        return self._special(lib.llama_vocab_bos(self._ptr))

    @property
    @locked
    def eos(self) -> int | None:
        return self._special(lib.llama_vocab_eos(self._ptr))

    @property
    @locked
    def eot(self) -> int | None:
        return self._special(lib.llama_vocab_eot(self._ptr))

    @property
    @locked
    def nl(self) -> int | None:
        return self._special(lib.llama_vocab_nl(self._ptr))

    @property
    @locked
    def pad(self) -> int | None:
        return self._special(lib.llama_vocab_pad(self._ptr))

    @property
    @locked
    def mask(self) -> int | None:
        """The mask token (``tokenizer.ggml.mask_token_id``) that DFlash drafters fill blocks with."""
        return self._special(lib.llama_vocab_mask(self._ptr))

    @property
    @locked
    def add_bos(self) -> bool:
        """Whether tokenize(add_special=True) prepends BOS."""
        return bool(lib.llama_vocab_get_add_bos(self._ptr))

    @property
    @locked
    def add_eos(self) -> bool:
        """Whether tokenize(add_special=True) appends EOS."""
        return bool(lib.llama_vocab_get_add_eos(self._ptr))

    @property
    @locked
    def kind(self) -> str:
        """The tokenizer family: ``"spm"``, ``"bpe"``, ``"wpm"``, ``"ugm"``, ``"rwkv"``, ``"plamo2"``
        or ``"none"`` (``llama_vocab_type``)."""
        t = int(lib.llama_vocab_type(self._ptr))
        return _VOCAB_KINDS.get(t, f"type {t}")

    @locked
    def raw_text(self, token: int) -> bytes:
        """The vocabulary entry of ``token`` as stored, undecoded (for exact comparisons)."""
        self._check(token)
        return bytes(ffi.string(lib.llama_vocab_get_text(self._ptr, token)))

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, EOT, ...)."""
        # asked twice a generated token (the loop and the detokenizer): a token's answer is kept, as its piece is —
        # a locked call into llama.cpp was ~1.5 µs of a SmolLM2 token's ~73 µs of Python (RESULTS.md 13.11)
        eog = self._eog_cache.get(token)
        if eog is None:
            with self._lock:
                eog = bool(lib.llama_vocab_is_eog(self._ptr, token))  # a set lookup in llama.cpp: any id is safe
            self._eog_cache[token] = eog
        return eog

    @locked
    def is_control(self, token: int) -> bool:
        """True for control tokens (BOS, <|im_start|>, ...)."""
        self._check(token)  # llama.cpp indexes with .at(): an unknown id would terminate the process
        return bool(lib.llama_vocab_is_control(self._ptr, token))

    @locked
    def text(self, token: int) -> str:
        """The raw vocabulary entry of ``token`` (as stored, e.g. with 'Ġ' for spaces)."""
        self._check(token)
        return ffi.string(lib.llama_vocab_get_text(self._ptr, token)).decode("utf-8", "replace")

    def _check(self, token: int) -> int:
        return check_int("token", token, min=0, max=self.n_tokens - 1,
                         what=f"a token id in [0, {self.n_tokens}) (outside the vocabulary otherwise)")

    @locked
    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Text → token ids.

        Args:
            add_special: add BOS/EOS as the model's tokenizer configuration says.
            parse_special: turn special-token text such as ``<|im_start|>`` into the special token
                (use for chat-template output); otherwise it is tokenized as plain text.

        Raises:
            InvalidTypeError: ``text`` is not a str, or a flag is not a bool.
        """
        check_str("text", text)
        add_special, parse_special = check_bool("add_special", add_special), check_bool("parse_special", parse_special)
        raw = text.encode("utf-8")
        n_max = len(raw) + 8
        while True:
            buf = ffi.new("llama_token[]", n_max)
            n = lib.llama_tokenize(self._ptr, raw, len(raw), buf, n_max, add_special, parse_special)
            if n >= 0:
                return list(ffi.unpack(buf, n))
            if n == -(2**31):
                from .errors import InvalidArgumentError
                raise InvalidArgumentError("text too long to tokenize (token count overflows int32)")
            n_max = -n

    @locked
    def token_to_piece(self, token: int, *, special: bool = False) -> bytes:
        """The bytes one token decodes to (may be part of a UTF-8 character).

        Args:
            special: render special tokens (e.g. ``<|im_end|>``) instead of dropping them.
        """
        key = (token, special)
        piece = self._piece_cache.get(key)
        if piece is not None:
            return piece
        self._check(token)
        special = check_bool("special", special)
        size = 32
        while True:
            buf = ffi.new("char[]", size)
            n = lib.llama_token_to_piece(self._ptr, token, buf, size, 0, special)
            if n >= 0:
                piece = ffi.unpack(buf, n)
                self._piece_cache[key] = piece
                return piece
            size = -n

    def tokens_covering(self, tokens: list[int], n_chars: int, *, special: bool = False) -> list[int]:
        """The shortest prefix of ``tokens`` whose text (pieces decoded incrementally, as a stream
        shows them) reaches ``n_chars`` characters: where a stop string cut the text, the tokens to keep."""
        if n_chars == 0:
            return []
        dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        length = 0
        for i, t in enumerate(tokens):
            length += len(dec.decode(self.token_to_piece(t, special=special)))
            if length >= n_chars:
                return tokens[:i + 1]
        return tokens

    @locked
    def detokenize(self, tokens: Iterable[int], *, remove_special: bool = False,
                   unparse_special: bool = False) -> str:
        """Token ids → text (invalid UTF-8 at the ends is replaced).

        Args:
            remove_special: drop a leading BOS / trailing EOS.
            unparse_special: render special tokens as their text.

        Raises:
            InvalidTypeError: ``tokens`` is not a list of ints.
            InvalidArgumentError: an id outside the vocabulary.
        """
        toks = check_token_ids("tokens", tokens, self.n_tokens)
        remove_special = check_bool("remove_special", remove_special)
        unparse_special = check_bool("unparse_special", unparse_special)
        arr = ffi.new("llama_token[]", toks)
        size = max(16, 8 * len(toks))
        while True:
            buf = ffi.new("char[]", size)
            n = lib.llama_detokenize(self._ptr, arr, len(toks), buf, size, remove_special, unparse_special)
            if n >= 0:
                return ffi.unpack(buf, n).decode("utf-8", "replace")
            size = -n


__all__ = ["Vocab"]
