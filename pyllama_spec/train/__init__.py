"""Training a DFlash drafter for any GGUF target that llama.cpp can tap (``pip install .[train]``).

Pipeline (each step a module, each runnable on its own):

1. :mod:`.data` — prompts that need no download (templated instructions, source files on the
   machine), answered by the target itself at T = 0 (self-distillation), with a held-out split.
2. :mod:`.features` — the target's layer inputs at the drafter's target layers for every
   prompt+answer sequence, through our bindings (exactly what llama.cpp computes at inference),
   plus the target's token embedding and output head.
3. :mod:`.model` / :mod:`.trainer` — the DFlash drafter in PyTorch and its block-diffusion
   objective (arXiv 2602.06036, PyPI ``dflash``).
4. :mod:`.export` — an HF-format checkpoint (``DFlashDraftModel`` config with ``dflash_config``)
   and a GGUF that the pinned llama.cpp loads, with tokenizer metadata from the target's GGUF.
"""
