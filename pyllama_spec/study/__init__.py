"""The drafter bake-off: which drafter, at which draft length, pays on this model and machine — and why.

* ``prompts``: the prompt sets (built-in coding chat and mixed set, or JSON lines);
* ``sweep``: the configurations and the runner (multi-turn chats, llama.cpp's programs with ``native``);
* ``summary``: records → pooled points → a cost model per drafter (``speculative/costmodel.py``);
* ``report`` / ``plots``: results.csv, REPORT.md and the PNGs;
* ``bakeoff``: :func:`bakeoff`, the whole thing (``pyllama-spec bakeoff`` on the command line).
"""
from .bakeoff import SCHEMA, bakeoff, write_outputs
from .prompts import Conversation, load_prompts

__all__ = ["bakeoff", "write_outputs", "load_prompts", "Conversation", "SCHEMA"]
