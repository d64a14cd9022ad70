"""Prompt sets of the bake-off: conversations of one or more user turns.

Sources (``load_prompts(spec)``):

* ``builtin:coding-chat`` — two four-turn programming chats (an inventory class in Python, a
  CSV report in TypeScript), in the spirit of the study's four-turn JavaScript task;
* ``builtin:mixed`` — eight two-turn chats: code (SQL, Go), prose, maths, and summarising a
  given text;
* a JSON-lines file, one conversation per line, any of::

      {"id": "...", "system": "...", "turns": ["first question", "follow-up", ...]}
      {"messages": [{"role": "system", ...}, {"role": "user", ...}, {"role": "assistant", ...}, ...]}
      {"prompt": "plain text, sent without the chat template"}

  With ``messages`` each user message is one turn; assistant messages given in the file are not
  used — the bake-off feeds the model's own answers back as history, as a chat does.

The built-in sets ship as package data (``pyllama_spec/data/prompts/*.jsonl``); they were written
for this benchmark, not taken from the training templates of ``pyllama_spec.train.data``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError

BUILTIN = ("coding-chat", "mixed")


@dataclass
class Conversation:
    """One conversation: user turns answered one after another.

    Attributes:
        id: a name for tables.
        turns: the user messages, in order (at least one).
        system: a system message, or None.
        raw: send ``turns[0]`` as plain text without the chat template (single turn only).
    """
    id: str
    turns: list = field(default_factory=list)
    system: str | None = None
    raw: bool = False

    def messages(self, answers: list) -> list:
        """The chat for turn ``len(answers) + 1``: system, then (user, assistant) pairs, then the user turn."""
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        for q, a in zip(self.turns, answers):
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        msgs.append({"role": "user", "content": self.turns[len(answers)]})
        return msgs


def _parse(obj: Any, where: str) -> Conversation:
    if not isinstance(obj, dict):
        raise InvalidArgumentError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    cid = str(obj.get("id", where))
    if "turns" in obj:
        turns = obj["turns"]
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t for t in turns):
            raise InvalidArgumentError(f"{where}: 'turns' must be a non-empty list of non-empty strings")
        return Conversation(cid, list(turns), obj.get("system"))
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not all(isinstance(m, dict) and "role" in m and "content" in m for m in msgs):
            raise InvalidArgumentError(f"{where}: 'messages' must be a list of {{'role', 'content'}} objects")
        system = next((m["content"] for m in msgs if m["role"] == "system"), None)
        turns = [m["content"] for m in msgs if m["role"] == "user"]
        if not turns:
            raise InvalidArgumentError(f"{where}: 'messages' holds no user message")
        return Conversation(cid, turns, system)
    if "prompt" in obj:
        if not isinstance(obj["prompt"], str) or not obj["prompt"]:
            raise InvalidArgumentError(f"{where}: 'prompt' must be a non-empty string")
        return Conversation(cid, [obj["prompt"]], raw=True)
    raise InvalidArgumentError(f"{where}: a line needs 'turns', 'messages' or 'prompt' (keys: {sorted(obj)})")


def parse_jsonl(text: str, source: str = "prompts") -> list[Conversation]:
    """Conversations from JSON-lines text (blank lines skipped).

    Raises:
        InvalidArgumentError: a line that is not JSON or not one of the shapes above (named by line).
    """
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidArgumentError(f"{source}:{i}: not JSON ({exc.msg})") from None
        out.append(_parse(obj, f"{source}:{i}"))
    if not out:
        raise InvalidArgumentError(f"{source} holds no conversation")
    return out


def load_prompts(spec: Any) -> list[Conversation]:
    """``"builtin:NAME"``, a ``.jsonl`` path, or a list of :class:`Conversation` / strings (one turn each).

    Raises:
        InvalidArgumentError: unknown built-in set or malformed file; FileNotFoundError: no such file.
    """
    if isinstance(spec, (list, tuple)):
        return [c if isinstance(c, Conversation) else Conversation(f"p{i}", [str(c)]) for i, c in enumerate(spec)]
    spec = str(spec)
    if spec.startswith("builtin:"):
        name = spec.split(":", 1)[1]
        if name not in BUILTIN:
            raise InvalidArgumentError(f"unknown built-in prompt set {name!r}; known: "
                                       + ", ".join(f"builtin:{b}" for b in BUILTIN))
        text = (resources.files("pyllama_spec") / "data" / "prompts" / f"{name}.jsonl").read_text("utf-8")
        return parse_jsonl(text, spec)
    path = Path(spec)
    if not path.is_file():
        raise FileNotFoundError(f"prompt file {spec!r} does not exist (or use builtin:{' / builtin:'.join(BUILTIN)})")
    return parse_jsonl(path.read_text("utf-8"), path.name)


__all__ = ["Conversation", "load_prompts", "parse_jsonl", "BUILTIN"]
