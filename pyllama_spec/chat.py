"""Chat templates: render ``messages`` with the model's Jinja template (as Hugging Face does),
passing extra template variables such as ``enable_thinking`` through."""
from __future__ import annotations

import functools
from typing import Any, NoReturn

import jinja2
import jinja2.sandbox

from .errors import InvalidArgumentError, UnsupportedError


def _raise(msg: str) -> NoReturn:
    raise jinja2.exceptions.TemplateError(msg)


@functools.lru_cache(maxsize=16)
def _compile(template: str) -> jinja2.Template:
    """The compiled template (compiling costs milliseconds; a chat renders one per turn)."""
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    return env.from_string(template)


def render_chat(template: str | None, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True,
                bos_token: str = "", eos_token: str = "", **template_kwargs: Any) -> str:
    """Render ``messages`` (``[{"role", "content"}]``) into a prompt string.

    Raises:
        UnsupportedError: the model has no chat template.
        ValueError: messages are malformed or the template rejects them.
    """
    if not template:
        raise UnsupportedError("the model has no chat template (tokenizer.chat_template); pass a prompt string")
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m and "content" in m
                                                 for m in messages):
        raise InvalidArgumentError("messages must be a list of {'role': ..., 'content': ...} dicts")
    try:
        return _compile(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                          bos_token=bos_token, eos_token=eos_token, **template_kwargs)
    except jinja2.exceptions.TemplateError as exc:
        raise InvalidArgumentError(f"the chat template rejected the messages: {exc}") from exc


__all__ = ["render_chat"]
