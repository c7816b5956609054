"""Structured output through the engine (``ChatOptions.response_format``), real SmolLM2.

Oracles: llama-cpp-python's own ``create_chat_completion`` (greedy) under llguidance's
whole-vocabulary mask on every token, for the text of a reply sampled check-first; the schema
itself for every reply (validated here again, independently of the engine's verdict);
and the engine's plain decoding for what a cancelled or follow-up turn leaves behind.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from models.engine import ChatOptions
from models.foundation.errors import QuantDeskError
from models.structured import constraint_for_schema, validation_errors
from tests.conftest import REPO_ROOT
from tests.models.conftest import raw_greedy_reply
from tests.models.structured_schemas import SUPPORTED, UNSUPPORTED

pytestmark = pytest.mark.smollm2

PERSON_TASK, PERSON = SUPPORTED["person"]
ASK = [{"role": "user", "content": PERSON_TASK + " Reply with JSON."}]


def schema_options(schema=PERSON, **extra) -> ChatOptions:
    values = dict(temperature=0.0, max_tokens=80, response_format="json_schema", schema=schema)
    return ChatOptions(**{**values, **extra})


def test_schema_reply_is_valid_and_sampled_replies_equal_llama_cpp_python(smollm2_engine,
                                                                          smollm2_gguf):
    plain = smollm2_engine.chat(ASK, schema_options(fast_forward=False)).wait()
    assert plain.stats.valid is True and plain.stats.validation_error == ""
    assert validation_errors(json.loads(plain.text), PERSON) == []
    assert plain.value == json.loads(plain.text)
    assert plain.stats.forced_tokens == 0 and plain.stop_reason == "stop"
    oracle = raw_greedy_reply(smollm2_gguf, ASK, 80, constraint_for_schema(PERSON).grammar)
    assert plain.text == oracle["text"]

    fast = smollm2_engine.chat(ASK, schema_options()).wait()
    assert fast.stats.valid is True and validation_errors(fast.value, PERSON) == []
    assert fast.stats.forced_tokens > 0
    assert fast.stats.tokens_per_pass > plain.stats.tokens_per_pass


def test_any_json_and_grammar_modes(smollm2_engine):
    reply = smollm2_engine.chat(ASK, ChatOptions(temperature=0.0, max_tokens=60,
                                                 response_format="json")).wait()
    assert reply.stats.valid is True
    json.loads(reply.text)  # any JSON value
    yes_no = ChatOptions(temperature=0.0, max_tokens=8, response_format="grammar",
                         grammar='root ::= "yes" | "no"')
    question = [{"role": "user", "content": "Is Paris in France? Answer yes or no."}]
    reply = smollm2_engine.chat(question, yes_no).wait()
    assert reply.text in ("yes", "no") and reply.value == reply.text and reply.stats.valid


def test_a_reply_near_the_token_limit_is_closed_and_flagged(smollm2_engine):
    task, schema = SUPPORTED["array-of-objects"]
    reply = smollm2_engine.chat([{"role": "user", "content": task}],
                                schema_options(schema, max_tokens=18)).wait()
    assert reply.stats.valid is True, reply.stats.validation_error
    assert reply.stats.closed_at_budget
    assert validation_errors(json.loads(reply.text), schema) == []


def test_unsupported_schema_and_bad_grammar_are_refused_before_generating(smollm2_engine):
    pid = smollm2_engine.pid
    name = next(iter(UNSUPPORTED))
    schema, pointers = UNSUPPORTED[name]
    with pytest.raises(QuantDeskError, match="cannot enforce") as caught:
        smollm2_engine.chat(ASK, schema_options(schema))
    assert all(pointer in caught.value.what for pointer in pointers)
    with pytest.raises(QuantDeskError, match="The grammar has an error"):
        smollm2_engine.chat(ASK, ChatOptions(response_format="grammar", grammar='root ::= "a'))
    with pytest.raises(QuantDeskError, match="needs a schema"):
        smollm2_engine.chat(ASK, ChatOptions(response_format="json_schema"))
    with pytest.raises(QuantDeskError, match="cannot be combined"):
        smollm2_engine.chat(ASK, schema_options(speculative="draft_model"))
    with pytest.raises(QuantDeskError, match="response format"):
        smollm2_engine.chat(ASK, ChatOptions(response_format="xml"))
    # A malformed schema is refused even "anyway".
    with pytest.raises(QuantDeskError, match="cannot be used: at /\\$ref"):
        smollm2_engine.chat(ASK, schema_options({"$ref": "#/$defs/absent"},
                                                allow_unsupported=True))
    assert smollm2_engine.pid == pid  # nothing reached (or upset) the engine
    # Generating anyway (a request without strict); the reply is still judged by the whole
    # schema, and the stats say what was not enforced.
    anyway = smollm2_engine.chat(ASK, schema_options(schema, allow_unsupported=True)).wait()
    assert anyway.stats.valid == (validation_errors(json.loads(anyway.text), schema) == [])
    assert [p["pointer"] for p in anyway.stats.not_enforced] == pointers


def test_cancel_keeps_the_partial_reply_and_says_it_is_not_valid(smollm2_engine):
    task, schema = SUPPORTED["recursive-ref"]
    options = ChatOptions(temperature=0.0, max_tokens=400, response_format="json_schema",
                          schema=schema, fast_forward=False)
    reply = smollm2_engine.chat([{"role": "user", "content": task}], options)
    pieces = []
    for piece in reply:
        pieces.append(piece)
        if len(pieces) == 5:
            threading.Thread(target=smollm2_engine.cancel).start()
    assert reply.stop_reason == "cancelled"
    assert reply.text == "".join(pieces) and reply.text.startswith("{")
    assert reply.stats.valid is False and "not complete JSON" in reply.stats.validation_error
    with pytest.raises(QuantDeskError, match="not valid structured output"):
        reply.value
    # The engine goes on, and the cache it kept is consistent: the same greedy reply again.
    again = smollm2_engine.chat(ASK, schema_options(fast_forward=False)).wait()
    fresh = smollm2_engine.chat(ASK, schema_options(fast_forward=False)).wait()
    assert again.text == fresh.text and again.stats.valid


def test_structured_turns_reuse_the_conversation_cache(smollm2_engine):
    first = smollm2_engine.chat(ASK, schema_options(), conversation_id="json-chat").wait()
    follow = ASK + [{"role": "assistant", "content": first.text},
                    {"role": "user", "content": "Now a person named Bob who is 51."}]
    second = smollm2_engine.chat(follow, schema_options(), conversation_id="json-chat").wait()
    assert second.stats.valid
    assert second.stats.prompt_tokens_reused >= first.stats.prompt_tokens


def test_cli_chat_with_a_schema_file(smollm2_gguf, tmp_path):
    schema_file = tmp_path / "person.json"
    schema_file.write_text(json.dumps(PERSON))
    command = [sys.executable, "-m", "app.cli", "chat", str(smollm2_gguf), "--threads", "2",
               "--ctx", "1024", "--temperature", "0", "--max-tokens", "80"]
    result = subprocess.run(command + ["--schema", str(schema_file)], input=ASK[0]["content"] + "\n",
                            capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    line = next(l for l in result.stdout.splitlines() if "{" in l)
    assert validation_errors(json.loads(line[line.index("{"):]), PERSON) == []
    assert ", valid]" in result.stderr
    assert "not enforced" not in result.stderr  # the grammar enforces the whole schema
    assert "Note: at /, only the properties the schema lists are generated" in result.stderr
    schema_file.write_text("{not json")
    result = subprocess.run(command + ["--schema", str(schema_file)], input="", capture_output=True,
                            text=True, timeout=300, cwd=REPO_ROOT)
    assert result.returncode != 0
    assert "is not valid JSON (line 1, column 2" in result.stderr
    assert "Traceback" not in result.stderr


def test_forced_text_split_inside_characters_comes_out_whole(smollm2_engine):
    """SmolLM2's byte-level vocabulary splits CJK characters and emoji into several tokens;
    forced tokens are llguidance's (token-level), the text decoder holds partial bytes."""
    for fast_forward in (True, False):
        reply = smollm2_engine.chat(ASK, ChatOptions(
            temperature=0.0, max_tokens=30, response_format="grammar",
            grammar='root ::= "北京市" ("!" | "🙂")', fast_forward=fast_forward)).wait()
        assert reply.text in ("北京市!", "北京市🙂") and reply.stats.valid, reply.text
        assert (reply.stats.forced_tokens > 0) == fast_forward


def test_sampled_replies_under_masks_keep_to_the_grammar(smollm2_engine):
    """Temperature sampling: every masked pick must take a token the grammar allows (the
    chain's top-k reorders the token array; the mask must still meet its tokens)."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"},
                                               "when": {"type": "string", "format": "date"}},
              "required": ["n", "when"]}
    masked = 0
    for seed in range(6):
        reply = smollm2_engine.chat(ASK, schema_options(schema, temperature=0.9, seed=seed,
                                                        max_tokens=60)).wait()
        assert reply.stats.valid is True, (reply.text, reply.stats.validation_error)
        masked += reply.stats.completion_tokens - reply.stats.forced_tokens
    assert masked > 20
