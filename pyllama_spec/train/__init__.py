"""Training drafters — DFlash, EAGLE-3 and classic draft models — for any GGUF target that
llama.cpp can tap, from the target's GGUF alone (``pip install .[train]``).

Pipeline (each step a module, each runnable on its own):

1. :mod:`.data` — prompts that need no download (templated instructions, source files on the
   machine), answered by the target itself at T = 0 (self-distillation), with a held-out split.
2. :mod:`.features` — the target's layer inputs at the drafter's target layers for every
   prompt+answer sequence, through our bindings (exactly what llama.cpp computes at inference),
   plus the target's token embedding and output head.
3. The models, each computing what llama.cpp's graph of that architecture computes:
   :mod:`.model` (DFlash, arXiv 2602.06036), :mod:`.eagle3` (EAGLE-3, arXiv 2503.01840),
   :mod:`.draft_lm` (a small causal LM of the target's architecture).
4. :mod:`.objectives` — what each kind learns and how its acceptance is measured;
   :mod:`.trainer` — the shared training loop and the loop-replay validation (held-out τ).
5. :mod:`.export` — GGUFs the pinned llama.cpp loads (``dflash``, ``eagle3``, ``llama``/``qwen3``),
   tokenizer metadata copied from the target's GGUF; DFlash also as an HF checkpoint.
6. :mod:`.pipeline` — all of it for one :class:`.config.TrainConfig`:
   ``python -m pyllama_spec.train target.gguf out/ --kind dflash|eagle3|draft``.

At scale (issue 20): :mod:`.prompts` — natural prompt sets (Magpie, code and docs on the machine,
seed topics, follow-ups; filtered, deduplicated, evaluation sets refused); :mod:`.regen` — answers
by the target in shards (transformers ``generate`` or our batched path); :mod:`.online` — DFlash
trained with the target's features computed inside each step (transformers, from the GGUF).
"""
from .config import KINDS, TrainConfig

__all__ = ["TrainConfig", "KINDS"]
