"""Chat templates: our sandboxed rendering against llama-cpp-python's Jinja2ChatFormatter.

The oracle is llama-cpp-python's own renderer (``Jinja2ChatFormatter``, which follows
transformers' ``apply_chat_template``) on the same template and messages; the presets are
compared with llama-cpp-python's hand-written formats of the same names.
"""

from __future__ import annotations

import pytest
from llama_cpp import llama_chat_format

from models.engine.chat_template import PRESETS, guess_preset, render_chat
from models.engine.gguf_info import read_model_info
from models.foundation.errors import QuantDeskError

CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Ünïcödé, emoji 🚀, 中文 and \"quotes\"\nacross lines"}],
    [{"role": "user", "content": "  leading and trailing spaces  "},
     {"role": "assistant", "content": ""}, {"role": "user", "content": "{{ not a template }}"}],
]

# A template in the style of recent HF models: namespace, loop controls, tojson,
# strftime_now, raise_exception and a {% generation %} block.
RICH_TEMPLATE = (
    "{{ bos_token }}{% set ns = namespace(system='') %}"
    "{% for m in messages %}{% if m['role'] == 'system' %}{% set ns.system = m['content'] %}"
    "{% continue %}{% endif %}"
    "{% if m['role'] not in ['user', 'assistant'] %}{{ raise_exception('bad role') }}{% endif %}"
    "<|{{ m['role'] }}|>{% if loop.first and ns.system %}[{{ ns.system | tojson }}]{% endif %}\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] | trim }}{% endgeneration %}"
    "{% else %}{{ m['content'] | trim }}{% endif %}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    "{# date: {{ strftime_now('%Y') }} #}"
)


def oracle(template, messages, bos="<s>", eos="</s>"):
    formatter = llama_chat_format.Jinja2ChatFormatter(template=template, eos_token=eos,
                                                      bos_token=bos)
    return formatter(messages=messages).prompt


@pytest.mark.smollm2
@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_smollm2_gguf_template_renders_like_llama_cpp_python(smollm2_gguf, messages):
    template = read_model_info(smollm2_gguf).chat_template
    assert template and "<|im_start|>" in template
    ours = render_chat(template, messages, bos_token="<|im_start|>", eos_token="<|im_end|>")
    assert ours == oracle(template, messages, "<|im_start|>", "<|im_end|>")
    assert ours.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_rich_template_renders_like_llama_cpp_python(messages):
    ours = render_chat(RICH_TEMPLATE, messages, bos_token="<s>", eos_token="</s>")
    assert ours == oracle(RICH_TEMPLATE, messages)
    assert "\\u" not in ours  # tojson keeps non-ASCII text as it is, like transformers


def test_template_errors_become_a_sentence():
    with pytest.raises(QuantDeskError, match="bad role"):
        render_chat(RICH_TEMPLATE, [{"role": "tool", "content": "x"}])
    with pytest.raises(QuantDeskError, match="chat template"):
        render_chat("{% for m in messages %}", [{"role": "user", "content": "x"}])


@pytest.mark.parametrize("attack", [
    "{{ messages.append({'role': 'user', 'content': 'injected'}) }}",   # mutation
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",                    # escape to Python
    "{{ messages[0].update({'content': 'changed'}) }}",
])
def test_the_sandbox_refuses_what_a_hostile_template_tries(attack):
    messages = [{"role": "user", "content": "original"}]
    with pytest.raises(QuantDeskError):
        render_chat(attack, messages)
    assert messages == [{"role": "user", "content": "original"}]


@pytest.mark.parametrize("preset_key, reference", [
    ("chatml", llama_chat_format.format_chatml),
    ("llama3", llama_chat_format.format_llama3),
])
@pytest.mark.parametrize("messages", CONVERSATIONS[1:2])
def test_presets_match_llama_cpp_python_formats(preset_key, reference, messages):
    # (Without a system message llama-cpp-python's ChatML writes an empty system turn;
    # ours writes none, as HF ChatML templates without a default system prompt do.)
    preset = PRESETS[preset_key]
    # llama-cpp-python adds BOS when tokenizing; we render it (the engine then adds none).
    ours = render_chat(preset.template, messages, bos_token="", eos_token="")
    theirs = reference(messages=messages)
    assert ours == theirs.prompt
    assert theirs.stop in preset.stop or [theirs.stop] == list(preset.stop)


def test_gemma_preset_matches_llama_cpp_python_without_system_message():
    messages = CONVERSATIONS[0] + [{"role": "assistant", "content": "Hello"},
                                   {"role": "user", "content": "Bye"}]
    ours = render_chat(PRESETS["gemma"].template, messages, bos_token="")
    assert ours == llama_chat_format.format_gemma(messages=messages).prompt
    # With a system message, Gemma (which has no system role) gets it in the first turn.
    with_system = render_chat(PRESETS["gemma"].template, CONVERSATIONS[1], bos_token="")
    assert with_system.startswith("<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n")


def test_preset_guess_uses_vocabulary_markers_then_architecture():
    vocab = {"<|start_header_id|>", "<|eot_id|>"}
    assert guess_preset("llama", vocab.__contains__).name == "Llama-3"
    assert guess_preset("gemma2", set().__contains__).name == "Gemma"
    assert guess_preset("qwen2", {"<|im_start|>"}.__contains__).name == "ChatML"
    assert guess_preset("unknown", set().__contains__).name == "ChatML"
