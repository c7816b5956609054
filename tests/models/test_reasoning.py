"""Reasoning and answer told apart in a stream, and the thinking switch of real templates.

The templates are the published ones of Qwen3 (a thinking switch, ``enable_thinking``) and
DeepSeek-R1-Distill (a generation prompt that opens ``<think>`` itself), in
``tests/models/templates``; the rendering oracle is transformers' own
``apply_chat_template`` renderer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from models.engine.chat_template import render_chat, template_variables
from models.engine.options import ChatOptions, validate_options
from models.engine.reasoning import (REASONING_FIELD, ReasoningSplitter, prompt_opens_reasoning,
                                     reply_opens_reasoning, split_reasoning, thinking_template)

TEMPLATES = Path(__file__).parent / "templates"
QWEN3 = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text(encoding="utf-8")
R1_DISTILL = (TEMPLATES / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja").read_text(encoding="utf-8")

THOUGHT = ("The user asks for 17 × 23. 17 × 20 = 340 and 17 × 3 = 51, so 391.\n\n"
           "Check: 391 / 17 = 23. A `<code>` tag and a stray < sign stay in the thinking.")
ANSWER = "17 × 23 = **391**.\n\n```python\nprint(17 * 23)  # </div> is not a tag of ours\n```\n"
# A recorded Qwen3 reply, as the engine streams it: the model opens <think> itself.
QWEN3_REPLY = f"<think>\n{THOUGHT}\n</think>\n\n{ANSWER}"
# The same from DeepSeek-R1-Distill, whose prompt already ended with "<think>\n".
R1_REPLY = f"{THOUGHT}\n</think>\n\n{ANSWER}"


def stream(text: str, size: int, opened: bool = False) -> tuple[ReasoningSplitter, str, str]:
    """Feed ``text`` in pieces of ``size`` characters; the streamed parts, joined."""
    splitter = ReasoningSplitter(opened)
    parts = [splitter.feed(text[i:i + size]) for i in range(0, len(text), size)]
    parts.append(splitter.finish())
    return splitter, "".join(r for r, _ in parts), "".join(a for _, a in parts)


@pytest.mark.parametrize("reply, opened", [(QWEN3_REPLY, False), (R1_REPLY, True)])
def test_a_reasoning_reply_splits_the_same_in_pieces_of_every_size(reply, opened):
    for size in range(1, len(reply) + 1):
        splitter, reasoning, answer = stream(reply, size, opened)
        assert reasoning.strip() == THOUGHT, size
        assert answer == ANSWER, size
        assert (splitter.reasoning, splitter.answer) == (THOUGHT, ANSWER)
        assert not splitter.thinking and splitter.had_reasoning
    assert split_reasoning(reply, opened) == (THOUGHT, ANSWER)


def test_nothing_of_a_tag_reaches_the_answer_or_reasoning_while_it_is_split():
    splitter = ReasoningSplitter()
    assert splitter.feed("  <th") == ("", "")  # may still be <think>
    assert splitter.feed("ink>\nStep") == ("Step", "")
    assert splitter.thinking
    assert splitter.feed(" one.</thi") == (" one.", "")  # "</thi" held back
    assert splitter.feed("nk>\n") == ("", "")
    assert not splitter.thinking
    assert splitter.feed("\nDone.") == ("", "Done.")
    assert splitter.finish() == ("", "")
    assert (splitter.reasoning, splitter.answer) == ("Step one.", "Done.")


@pytest.mark.parametrize("text", [
    "Paris.", "  Paris, with leading spaces.\n", "<b>bold</b> and </think> later is text",
    "<thin is not a tag", "<", "", "\n\n", "a < b and c </ d", "<thinking>not ours</thinking>",
])
def test_replies_that_do_not_reason_are_unchanged(text):
    for size in range(1, max(len(text), 1) + 1):
        splitter, reasoning, answer = stream(text, size)
        assert (reasoning, answer) == ("", text), size
        assert splitter.reasoning_pieces == 0 and not splitter.had_reasoning
        assert splitter.seconds is None


def test_a_reply_cut_off_while_thinking_is_all_reasoning():
    for opened, text in ((False, "<think>\nLet me count: 1, 2, 3, </thi"), (True, "Let me count: 1, 2, 3, </thi")):
        for size in (1, 3, 7, 100):
            splitter, reasoning, answer = stream(text, size, opened)
            assert answer == "" and splitter.answer == ""
            assert splitter.reasoning == "Let me count: 1, 2, 3, </thi"
            assert splitter.seconds is not None  # ended with the reply


def test_thinking_time_and_pieces():
    now = [100.0]
    splitter = ReasoningSplitter(clock=lambda: now[0])
    for piece, at in (("<think>", 100.0), ("\nHmm", 101.5), (", yes.", 104.0), ("</think>", 112.0),
                      ("\n\n", 112.1), ("Yes", 112.2), (".", 112.3)):
        now[0] = at
        splitter.feed(piece)
    splitter.finish()
    assert splitter.seconds == pytest.approx(12.0)
    assert splitter.reasoning_pieces == 4  # <think>, \nHmm, ", yes.", </think>
    assert (splitter.reasoning, splitter.answer) == ("Hmm, yes.", "Yes.")


def test_opened_reasoning_tolerates_a_model_that_writes_think_again():
    assert split_reasoning("<think>\nSo.\n</think>\n\nOK", opened=True) == ("So.", "OK")


def test_prompt_opens_reasoning():
    assert prompt_opens_reasoning("<｜Assistant｜><think>\n")
    assert not prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not prompt_opens_reasoning("<|im_start|>assistant\n")


# -- templates -------------------------------------------------------------------------

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 17 × 23?"},
    {"role": "assistant", "content": ANSWER, REASONING_FIELD: THOUGHT},
    {"role": "user", "content": "And 17 × 24?"},
]


def oracle(template: str, messages: list[dict], **variables) -> str:
    """transformers' own rendering (what ``apply_chat_template`` produces)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(conversations=[messages], chat_template=template,
                                        add_generation_prompt=True, **variables)
    return rendered[0]


def test_qwen3_template_has_a_switch_on_by_default_and_reads_reasoning():
    info = thinking_template(QWEN3)
    assert "enable_thinking" in template_variables(QWEN3)
    assert (info.switch, info.default_on, info.keeps_reasoning) == ("enable_thinking", True, True)


@pytest.mark.parametrize("thinking", [None, True, False])
def test_qwen3_template_rendered_both_ways_like_transformers(thinking):
    ours = render_chat(QWEN3, CONVERSATION, thinking=thinking)
    expected = oracle(QWEN3, CONVERSATION, **({} if thinking is None else {"enable_thinking": thinking}))
    assert ours == expected
    if thinking is False:  # answers at once: an empty, closed reasoning section
        assert ours.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    else:  # the model opens <think> itself
        assert ours.endswith("<|im_start|>assistant\n")
    assert not reply_opens_reasoning(QWEN3, CONVERSATION, thinking)
    # Past reasoning: Qwen3's template drops it for turns before the last user message.
    assert THOUGHT not in ours and ANSWER in ours


def test_qwen3_keeps_reasoning_of_turns_after_the_last_user_message():
    """A tool call's turn: the template reads the reasoning back, as Qwen3 was trained."""
    messages = CONVERSATION[:2] + [{"role": "assistant", "content": "Let me check.",
                                    REASONING_FIELD: THOUGHT},
                                   {"role": "tool", "content": "391"}]
    assert f"<think>\n{THOUGHT}\n</think>\n\nLet me check." in render_chat(QWEN3, messages)


def test_r1_distill_template_opens_the_reasoning_and_has_no_switch():
    info = thinking_template(R1_DISTILL)
    assert (info.switch, info.keeps_reasoning) == (None, False)
    assert reply_opens_reasoning(R1_DISTILL, CONVERSATION)
    assert render_chat(R1_DISTILL, CONVERSATION, thinking=False) == render_chat(R1_DISTILL, CONVERSATION)
    assert info.history_message("assistant", ANSWER, THOUGHT) == {"role": "assistant", "content": ANSWER}
    assert thinking_template(QWEN3).history_message("assistant", ANSWER, THOUGHT) == {
        "role": "assistant", "content": ANSWER, REASONING_FIELD: THOUGHT}


def test_templates_without_reasoning():
    from models.engine.chat_template import PRESETS

    for preset in PRESETS.values():
        info = thinking_template(preset.template)
        assert (info.switch, info.keeps_reasoning) == (None, False)
        assert not reply_opens_reasoning(preset.template, CONVERSATION)
    assert thinking_template(None).switch is None
    assert thinking_template("{% broken").switch is None


def test_thinking_option_is_checked():
    from models.foundation.errors import QuantDeskError

    for value in (None, True, False):
        assert ChatOptions.from_dict(ChatOptions(thinking=value).to_dict()).thinking is value
        validate_options(ChatOptions(thinking=value))
    with pytest.raises(QuantDeskError, match="thinking"):
        validate_options(ChatOptions(thinking="yes"))


def test_a_switch_that_is_off_by_default():
    """DeepSeek-V3.1's style: ``thinking`` must be given to think (the prompt then opens
    <think>); without it the template closes the section at once."""
    template = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"
                "{% if thinking is defined and thinking %}<think>{% else %}</think>{% endif %}")
    info = thinking_template(template)
    assert (info.switch, info.default_on, info.keeps_reasoning) == ("thinking", False, False)
    assert reply_opens_reasoning(template, CONVERSATION, True)
    assert not reply_opens_reasoning(template, CONVERSATION, None)
    assert not reply_opens_reasoning(template, CONVERSATION, False)
