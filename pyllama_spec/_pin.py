"""The llama.cpp this package is built against — the one place the pin is written.

``vendor/fetch_llama_cpp.py`` downloads and checks the source named here and applies
``PATCHES`` (files in ``vendor/patches/``, in this order); ``CMakeLists.txt`` reads this file
and bakes the tree's marker (commit + patch names) into the extension; ``_ffi.py`` compares
what the extension was built from with these values at import (cryptography's
``_verify_package_version`` is the model). Kept free of imports so that the build can read it.
"""

#: llama.cpp commit (the ``vendor/llama.cpp/`` folder of the sdist below).
LLAMA_CPP_COMMIT = "0c1e570"
#: the PyPI sdist that carries that tree, and its sha256.
SDIST_NAME = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
#: our patches to that tree, applied in this order (each file says why and what it measured).
PATCHES = (
    "0001-cuda-matmul-dispatch-env",
    "0002-keep-replaced-output-buffers",
    "0003-qwen2-layer-input-taps",
    "0004-gemma3-layer-input-taps",
    "0005-speculative-simple-flush-log",
    "0006-dflash-fused-inject",
    "0007-backend-greedy-rows",
    "0008-cuda-sbmm-small-batch-matmul",
    "0009-backend-greedy-all-rows",
    "0010-completion-flush-log",
    "0011-sampler-top-k-logprobs",
    "0012-cuda-top-k-small-k",
    "0013-cuda-fattn-vec-rows-env",
    "0014-sched-async-inputs",
    "0015-cuda-graph-key-by-shape",
    "0016-layer-taps-without-reserve",
    "0017-sampler-switch-without-reserve",
    "0018-cuda-graph-eager-capture",
)


def marker() -> str:
    """The text of ``vendor/llama.cpp/.pyllama_spec_commit`` for this pin: ``"<commit>"`` or
    ``"<commit>+<patch stem>+<patch stem>..."``; the extension reports the same string."""
    return "+".join((LLAMA_CPP_COMMIT, *PATCHES))
