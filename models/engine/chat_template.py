"""Turning a conversation into the prompt text a model was trained on.

A GGUF converted from a Hugging Face model carries the model's own Jinja chat template
(``tokenizer.chat_template``). We render it the way ``transformers`` does
(``apply_chat_template``): an :class:`~jinja2.sandbox.ImmutableSandboxedEnvironment` —
templates come from downloaded files, so they must not reach Python objects or mutate
the messages — with ``trim_blocks``/``lstrip_blocks``, the ``loopcontrols`` extension, a
``tojson`` filter that keeps non-ASCII text, and the globals templates call:
``raise_exception`` and ``strftime_now``. ``{% generation %}`` blocks (used by HF for
training masks) render their body. A thinking choice is passed as the template's own
switch variable (``enable_thinking=False`` for Qwen3; see :mod:`models.engine.reasoning`).

Models without a template get a preset (:data:`PRESETS`): ChatML, Llama-3, Gemma, Phi-3
or Mistral, guessed from the architecture and the tokens the vocabulary has.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Optional, Sequence

from models.foundation.errors import QuantDeskError


@dataclass(frozen=True)
class ChatPreset:
    """A built-in chat format for models whose GGUF has no template.

    Attributes:
        name: Shown to the user ("ChatML").
        template: A Jinja template in the same dialect as the models' own.
        stop: Strings that end a reply in this format (in case the vocabulary does not
            mark the end-of-turn token as end-of-generation).
        marker_tokens: Tokens whose presence in a vocabulary suggests this format.
    """

    name: str
    template: str
    stop: tuple[str, ...]
    marker_tokens: tuple[str, ...] = ()


PRESETS: dict[str, ChatPreset] = {
    "chatml": ChatPreset(
        "ChatML",
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        ("<|im_end|>",), ("<|im_start|>",)),
    "llama3": ChatPreset(
        "Llama-3",
        "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}"
        "<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
        "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
        "{% endif %}",
        ("<|eot_id|>",), ("<|start_header_id|>",)),
    "gemma": ChatPreset(
        "Gemma",
        # Gemma has no system role: the system text opens the first user turn.
        "{{ bos_token }}{% set ns = namespace(system='') %}{% for m in messages %}"
        "{% if m['role'] == 'system' %}{% set ns.system = m['content'] + '\n\n' %}{% else %}"
        "<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
        "{{ ns.system }}{{ m['content'] | trim }}<end_of_turn>\n{% set ns.system = '' %}"
        "{% endif %}{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}",
        ("<end_of_turn>",), ("<start_of_turn>",)),
    "phi3": ChatPreset(
        "Phi-3",
        "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}",
        ("<|end|>",), ("<|assistant|>",)),
    "mistral": ChatPreset(
        "Mistral",
        "{{ bos_token }}{% set ns = namespace(system='') %}{% for m in messages %}"
        "{% if m['role'] == 'system' %}{% set ns.system = m['content'] + '\n\n' %}"
        "{% elif m['role'] == 'user' %}[INST] {{ ns.system }}{{ m['content'] }} [/INST]"
        "{% set ns.system = '' %}{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}"
        "{% endfor %}",
        (), ("[INST]",)),
}

_ARCHITECTURE_PRESETS = {"gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma",
                         "phi3": "phi3", "mistral": "mistral"}


def guess_preset(architecture: str, has_token: Any) -> ChatPreset:
    """The preset for a model without a template.

    Args:
        architecture: ``general.architecture`` of the model.
        has_token: ``has_token(text) -> bool``: whether the vocabulary has a token.
    """
    for key, preset in PRESETS.items():
        if preset.marker_tokens and all(has_token(t) for t in preset.marker_tokens):
            return preset
    return PRESETS[_ARCHITECTURE_PRESETS.get(architecture, "chatml")]


def _raise_exception(message: str) -> None:
    from jinja2.exceptions import TemplateError

    raise TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: Optional[int] = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    # transformers renders JSON without escaping non-ASCII text; the default filter would.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


@lru_cache(maxsize=8)
def _compile(template: str):
    return _environment().from_string(template)


@lru_cache(maxsize=1)
def _environment():
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationBlock(jinja2.ext.Extension):
        """HF's ``{% generation %}…{% endgeneration %}`` renders its body unchanged."""

        tags = {"generation"}

        def parse(self, parser):
            parser.stream.skip(1)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[GenerationBlock, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@lru_cache(maxsize=8)
def template_variables(template: str) -> frozenset[str]:
    """The variables a template reads that it does not set itself (``messages``,
    ``add_generation_prompt``, ``enable_thinking``…): what a caller may pass it.

    Raises:
        QuantDeskError: The template does not parse.
    """
    import jinja2
    from jinja2 import meta

    try:
        return frozenset(meta.find_undeclared_variables(_environment().parse(template)))
    except jinja2.TemplateError as exc:
        raise _template_error(exc) from exc


def render_chat(
    template: str,
    messages: Sequence[dict],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    thinking: Optional[bool] = None,
    **extra: Any,
) -> str:
    """Render ``messages`` with a Jinja chat template.

    Args:
        thinking: Turn a reasoning model's thinking on or off through the template's
            switch (``enable_thinking``…); ``None`` leaves the template's default, and a
            template without a switch ignores it.
        extra: More template variables (``tools``…).

    Raises:
        QuantDeskError: The template is broken or refuses the conversation (e.g. a
            model that requires user and assistant turns to alternate).
    """
    if thinking is not None:
        from models.engine.reasoning import thinking_template

        extra = {**thinking_template(template).variables(thinking), **extra}
    return render_with(template, messages, dict(extra, bos_token=bos_token, eos_token=eos_token,
                                                add_generation_prompt=add_generation_prompt))


def render_with(template: str, messages: Sequence[dict], variables: dict) -> str:
    """Render ``messages`` with exactly ``variables`` (a template variable may share a
    name with one of :func:`render_chat`'s arguments, ``thinking`` say).

    Raises:
        QuantDeskError: As :func:`render_chat`.
    """
    import jinja2

    try:
        return _compile(template).render(messages=list(messages), **variables)
    except jinja2.TemplateError as exc:
        raise _template_error(exc) from exc


def _template_error(exc: Exception) -> QuantDeskError:
    return QuantDeskError(
        f"The model's chat template could not format this conversation: {exc}.",
        "Edit the conversation (many models need user and assistant turns to "
        "alternate), or choose a chat format preset in the model's settings.")
