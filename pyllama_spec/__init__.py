"""pyllama_spec: speculative decoding over llama.cpp, with the loop in Python.

Layers (each module has one job):

* ``_native/`` + ``_ffi``: the cffi declarations and the compiled extension.
* ``backend``, ``model``, ``vocab``, ``context``, ``batch``, ``memory``: thin wrappers that own
  llama.cpp objects and hand out numpy views.
* ``speculative/``: sampling and verification math, statistics, stage timing, drafters, the loop.
* ``generator``: :class:`Generator`, the entry point (``batching``: its ``generate_batch``;
  ``cache_reuse``: the caches kept between calls); ``cli``: the ``pyllama-spec`` command.
* ``study``: :func:`bakeoff`, drafters compared over a sweep, with tables, plots and a cost model.
* ``placement`` (devices, splits) and ``rpc`` (layers on other machines).
* ``assets`` (SmolLM2 and the shipped drafter), ``fixtures`` (tiny test models), ``native``
  (llama.cpp's reference programs), ``pairing`` (drafter/target checks) are attributes of the
  package; ``train`` (needs torch) is imported on first use: ``pyllama_spec.train``.
"""
import importlib as _importlib
from types import ModuleType as _ModuleType

from . import assets, drafter_fixtures, fixtures, native, pairing, speculative  # noqa: F401  (ps.assets, ...)
from ._ffi import LLAMA_CPP_COMMIT
from ._version import __version__
from .backend import cpu_name, set_llama_log_level, supports_gpu_offload, system_info
from .batching import BatchPiece, BatchResult, BatchStream
from .cache_reuse import ConversationState
from .context import Context
from .errors import (
    ClosedError,
    ContextError,
    DecodeAbortedError,
    DecodeError,
    DrafterMismatchError,
    InvalidArgumentError,
    InvalidBatchError,
    InvalidTypeError,
    KVCacheFullError,
    ModelLoadError,
    ModelNotFoundError,
    NotGGUFError,
    PromptTooLongError,
    PyllamaSpecError,
    TruncatedGGUFError,
    UnsupportedError,
)
from .generator import Generator, TextStream
from .memory import Memory
from .model import Model
from .placement import Placement, devices
from .speculative.config import SpecConfig
from .speculative.drafters import Draft, Drafter, create_drafter, drafter_kinds, register_drafter
from .speculative.report import GenerationResult
from .speculative.sampling import SamplingParams
from .speculative.stats import SpecStats
from .study import bakeoff
from .vocab import Vocab

__all__ = [
    "LLAMA_CPP_COMMIT", "BatchPiece", "BatchResult", "BatchStream", "ClosedError", "Context", "ContextError",
    "ConversationState", "DecodeAbortedError", "DecodeError", "Draft", "Drafter", "DrafterMismatchError",
    "GenerationResult", "Generator", "InvalidArgumentError", "InvalidBatchError", "InvalidTypeError",
    "KVCacheFullError", "Memory", "Model", "ModelLoadError", "ModelNotFoundError", "NotGGUFError", "Placement",
    "PromptTooLongError", "PyllamaSpecError", "SamplingParams", "SpecConfig", "SpecStats", "TextStream",
    "TruncatedGGUFError", "UnsupportedError", "Vocab", "__version__", "bakeoff", "cpu_name", "create_drafter",
    "devices", "drafter_kinds", "register_drafter", "set_llama_log_level", "supports_gpu_offload", "system_info",
]

#: submodules imported on first attribute access (they pull in heavy optional dependencies)
_LAZY = ("train",)


def __getattr__(name: str) -> _ModuleType:
    if name in _LAZY:
        return _importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
