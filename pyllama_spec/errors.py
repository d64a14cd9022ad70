"""Exceptions raised by pyllama_spec.

Every error that llama.cpp reports through a return code, and every input that
would make llama.cpp abort the process, becomes one of these; the objects
involved stay usable afterwards::

    PyllamaSpecError
    ├── InvalidArgumentError          (also ValueError)         a bad argument: names it and the allowed values
    │   └── InvalidTypeError          (also TypeError)          an argument of the wrong type
    ├── ClosedError                   (also ValueError)         using a Model/Context after close()
    ├── ModelLoadError
    │   ├── ModelNotFoundError        (also FileNotFoundError)  wrong path
    │   ├── NotGGUFError              (also ValueError)         not a GGUF file
    │   └── TruncatedGGUFError        (also ValueError)         file shorter than its tensors
    ├── ContextError                                           context creation / parameters
    ├── DecodeError                                            llama_decode / llama_process failed
    │   ├── KVCacheFullError          rc 1: no KV slot (grow n_ctx or shrink the batch)
    │   ├── InvalidBatchError         rc -1 (also ValueError): malformed batch
    │   └── DecodeAbortedError        rc 2: aborted by the abort callback
    ├── PromptTooLongError            (also ValueError)         prompt does not fit n_ctx
    ├── DrafterMismatchError          (also ValueError)         drafter built for another target
    └── UnsupportedError              a feature this build, model or CPU lacks

The rule, in every module: a wrong argument *type* raises :class:`InvalidTypeError`, a
wrong *value* :class:`InvalidArgumentError` (both name the argument, what is allowed and
what was received; ``_check.py`` writes them); something the model, the build or the CPU
cannot do raises :class:`UnsupportedError`; a failure reported by llama.cpp raises
:class:`ModelLoadError`, :class:`ContextError` or :class:`DecodeError`. Nothing else leaves
the library, so ``except PyllamaSpecError`` catches every error it raises (the CLI does, and
exits with status 2 and one line).
"""
from __future__ import annotations

from ._logring import recent_reason


class PyllamaSpecError(Exception):
    """Base class of every exception raised by pyllama_spec."""


class InvalidArgumentError(PyllamaSpecError, ValueError):
    """An argument is out of range or malformed; the message names it and what is allowed."""


class InvalidTypeError(InvalidArgumentError, TypeError):
    """An argument has the wrong type (e.g. a bool where an int is meant, a str where a list of
    str is); the message names it, the accepted types and what was received."""


class NoOutputError(InvalidArgumentError, IndexError):
    """A row of the last decode that produced no output (logits / embeddings) was read."""


class ClosedError(PyllamaSpecError, ValueError):
    """The Model, Context or Generator was closed; create a new one."""


class ModelLoadError(PyllamaSpecError):
    """llama.cpp could not load a model file."""


class ModelNotFoundError(ModelLoadError, FileNotFoundError):
    """The model path does not exist or is not a file."""


class NotGGUFError(ModelLoadError, ValueError):
    """The file exists but does not start with the GGUF magic."""


class TruncatedGGUFError(ModelLoadError, ValueError):
    """The GGUF header promises more tensor data than the file holds (an interrupted download)."""


class ContextError(PyllamaSpecError):
    """llama.cpp could not create a context (or a resource of one) with these parameters; the
    message quotes llama.cpp's reason. Out-of-range parameters raise InvalidArgumentError first."""


class DecodeError(PyllamaSpecError):
    """``llama_decode`` / ``llama_process`` returned an error code.

    Attributes:
        rc: the return code of llama.cpp.
    """

    def __init__(self, message: str, rc: int):
        super().__init__(message)
        self.rc = rc


class KVCacheFullError(DecodeError):
    """No free KV-cache slot for the batch (rc 1): increase ``n_ctx`` or remove positions first."""


class InvalidBatchError(DecodeError, ValueError):
    """llama.cpp rejected the batch (rc -1): positions, sequence ids or tokens are invalid."""


class DecodeAbortedError(DecodeError):
    """The decode was aborted (rc 2); processed ubatches stay in the KV cache."""


class PromptTooLongError(PyllamaSpecError, ValueError):
    """The prompt (plus what must be generated) does not fit in the context."""


class DrafterMismatchError(PyllamaSpecError, ValueError):
    """A drafter's metadata does not fit the target (hidden size, layers, vocabulary)."""


class UnsupportedError(PyllamaSpecError):
    """The model or this build lacks a feature that was asked for."""


def check_decode(rc: int, what: str) -> None:
    """Map a ``llama_decode``/``llama_process`` return code to an exception.

    Args:
        rc: the return code (0 = success).
        what: a short description of the call, used in the message.

    Raises:
        KVCacheFullError: rc == 1.
        DecodeAbortedError: rc == 2.
        InvalidBatchError: rc == -1.
        DecodeError: any other non-zero rc.
    """
    if rc == 0:
        return
    reason = recent_reason()
    if reason:
        what = f"{what} [llama.cpp: {reason}]"
    if rc == 1:
        raise KVCacheFullError(
            f"{what}: no KV-cache slot for the batch (rc 1); create the context with a larger n_ctx "
            "or remove positions with Memory.seq_rm", rc)
    if rc == 2:
        raise DecodeAbortedError(f"{what}: aborted (rc 2)", rc)
    if rc == -1:
        raise InvalidBatchError(f"{what}: llama.cpp rejected the batch as invalid (rc -1)", rc)
    raise DecodeError(f"{what}: llama.cpp failed with rc {rc}", rc)


__all__ = [
    "PyllamaSpecError", "InvalidArgumentError", "InvalidTypeError", "NoOutputError", "ClosedError", "ModelLoadError",
    "ModelNotFoundError", "NotGGUFError", "TruncatedGGUFError",
    "ContextError", "DecodeError", "KVCacheFullError", "InvalidBatchError", "DecodeAbortedError",
    "PromptTooLongError", "DrafterMismatchError", "UnsupportedError", "check_decode",
]
