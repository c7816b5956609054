"""The schema policy and the grammars llguidance compiles, judged on text (no model).

Grammars are run over a text's bytes (:func:`models.structured.guidance.grammar_accepts`);
values are judged by ``jsonschema`` (tests/models/structured_oracle.py) under the draft
the schema declares.
"""

from __future__ import annotations

import json
import re

import pytest

from models.foundation.errors import QuantDeskError
from models.structured import (constraint_for_any_json, constraint_for_gbnf,
                               constraint_for_schema, plan_schema, validation_errors)
from models.structured.guidance import grammar_accepts
from tests.models.structured_schemas import ENFORCED, SUPPORTED, UNCHECKED, UNSUPPORTED


def compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def test_supported_schemas_have_no_problems():
    assert len(SUPPORTED) >= 20
    for name, (_, schema) in SUPPORTED.items():
        assert plan_schema(schema).problems == [], name


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unenforced_keywords_are_named_with_their_pointer_and_refused_when_strict(name):
    schema, pointers = UNSUPPORTED[name]
    problems = plan_schema(schema).problems
    assert set(pointers) <= {p.pointer for p in problems}
    assert all(p.message.endswith(".") and len(p.message.split()) > 4 for p in problems)
    with pytest.raises(QuantDeskError, match="cannot enforce") as caught:
        constraint_for_schema(schema)
    assert all(pointer in caught.value.what for pointer in pointers)
    allowed = constraint_for_schema(schema, allow_unsupported=True)
    assert {p.pointer for p in allowed.not_enforced} >= set(pointers)


@pytest.mark.parametrize("name", sorted(UNCHECKED))
def test_parts_nobody_can_read_are_named_and_the_rest_still_generates(name):
    schema, pointer = UNCHECKED[name]
    with pytest.raises(QuantDeskError, match=re.escape(pointer)):
        constraint_for_schema(schema)
    allowed = constraint_for_schema(schema, allow_unsupported=True)
    assert [p.pointer for p in allowed.not_enforced] == [pointer]
    assert "neither" in allowed.not_enforced[0].message


@pytest.mark.parametrize("name", sorted(ENFORCED))
def test_keywords_once_refused_are_now_enforced_exactly(name):
    assert plan_schema(ENFORCED[name]).problems == []


@pytest.mark.parametrize("name,good,bad", [
    ("multiple-of", ["0", "15", "-5"], ["3", "5.5"]),
    ("fractional-bound", ["0.5", "3"], ["0.4", "-1"]),
    ("exclusive-number", ["0.1", "7"], ["0", "-0.5"]),
    ("draft-04", ['{"radius":0.5}'], ['{"radius":0}', '{"radius":-1}', "{}"]),
    ("draft-07-tuple", ['[1,"a"]', "[1]", "[]"], ['[1,"a",2]', '["a"]']),
    ("pattern-properties", ['{"x-a":1}', '{"b":"s"}'], ['{"x-a":"s"}']),
    ("length-and-pattern", ['"abc"'], ['"abcdefghi"', '"ab1"']),
    ("annotations", ['{"a":"z"}', "{}"], ['{"a":1}']),
    ("disjoint-oneof-const", ['{"kind":"a","x":1}', '{"kind":"b"}'], ['{"kind":"c"}', "{}"]),
    ("dependent-required", ['{"a":1,"b":2}', '{"b":2}', "{}"], ['{"a":1}']),
    ("unique-enum-items", ['["x","z"]', "[]", '["x","y","z"]'], ['["x","x"]', '["w"]']),
])
def test_enforced_grammars_accept_valid_and_refuse_invalid_values(name, good, bad):
    from tests.models.structured_oracle import oracle_valid_in_its_draft as oracle_valid

    schema = ENFORCED[name]
    grammar = plan_schema(schema).grammar
    for text in good:
        assert oracle_valid(schema, json.loads(text)), text
        assert grammar_accepts(grammar, text), text
    for text in bad:
        assert not oracle_valid(schema, json.loads(text)), text
        assert not grammar_accepts(grammar, text), text


def test_annotations_and_unknown_formats_are_ignored_not_refused():
    constraint = constraint_for_schema(ENFORCED["annotations"])  # strict: nothing to refuse
    assert constraint.not_enforced == ()
    assert constraint.check('{"a":"anything"}') == {"a": "anything"}


def test_grammar_accepts_valid_and_rejects_invalid_instances():
    schema = SUPPORTED["array-of-objects"][1]
    grammar = plan_schema(schema).grammar
    good = {"items": [{"name": "milk", "qty": 2}, {"name": "eggs", "qty": 12}]}
    bad = [{"items": []}, {"items": [{"name": "x", "qty": 0}]}, {"items": [{"name": "a", "qty": 1}] * 4}]
    assert grammar_accepts(grammar, compact(good)) and validation_errors(good, schema) == []
    assert not grammar_accepts(grammar, json.dumps(good))  # compact JSON only
    for value in bad:
        assert validation_errors(value, schema) != [], value
        assert not grammar_accepts(grammar, compact(value)), value


def test_any_json_mode_accepts_compact_json_and_nothing_else():
    grammar = constraint_for_any_json().grammar
    for value in ({"a": [1, -2.5, 3e10, None, True]}, [], "x\\\"y", 0, {"": {"k": [{}]}}):
        assert grammar_accepts(grammar, compact(value))
    for text in ("{a:1}", "[1,]", "01", '"\n"', "tru"):
        assert not grammar_accepts(grammar, text)


def test_forced_text_follows_keys_punctuation_and_enum_tails():
    from llguidance import LLMatcher

    from models.structured.guidance import _byte_tokenizer

    grammar = plan_schema({"type": "object", "properties": {
        "city": {"enum": ["Paris", "Berlin"]}, "n": {"type": "integer"}},
        "required": ["city", "n"], "additionalProperties": False}).grammar
    matcher = LLMatcher(_byte_tokenizer(), grammar, log_level=0)

    def feed(text: str) -> None:
        assert matcher.consume_tokens(list(text.encode()))

    assert matcher.compute_ff_bytes() == b'{"city":"'
    feed('{"city":"B')
    assert matcher.compute_ff_bytes() == b'erlin","n":'
    feed('erlin","n":7')
    assert matcher.compute_ff_bytes() == b"" and not matcher.is_accepting()
    feed("}")
    assert matcher.is_accepting() and matcher.is_stopped()


@pytest.mark.parametrize("text", [
    'root ::= "a"\nfoo ::= bar\n', 'root ::= "abc\n', "root ::= [a-z\n", 'root = "a"\n',
    'root ::= * "a"\n', 'start ::= "a"\n'])
def test_gbnf_errors_are_sentences_before_generating(text):
    with pytest.raises(QuantDeskError) as caught:
        constraint_for_gbnf(text)
    message = caught.value.what
    assert message.startswith("The grammar has an error") and message.endswith(".")


def test_valid_gbnf_is_compiled_and_enforced():
    text = 'root ::= answer ("," answer)*   # a list\nanswer ::= "yes" | "no" | [0-9]{1,3}\n'
    constraint = constraint_for_gbnf(text)
    assert constraint.check("yes,42") == "yes,42"
    assert grammar_accepts(constraint.grammar, "yes,no,123")
    assert not grammar_accepts(constraint.grammar, "yes,1234")


def test_validator_explains_each_problem_in_a_sentence():
    schema = SUPPORTED["nested-address"][1]
    value = {"shop": "x" * 31, "address": {"street": "Main", "zip": "1234"}}
    problems = validation_errors(value, schema)
    assert any("shop" in p and "maximum 30" in p for p in problems)
    assert any("lacks the required property 'city'" in p for p in problems)
    assert any("zip" in p and "pattern" in p for p in problems)
    with pytest.raises(QuantDeskError, match="not complete JSON"):
        constraint_for_schema(schema).check('{"shop":"a","addr')


@pytest.mark.parametrize("lo,hi", [(-50, 60), (0, 1), (-5, -2), (3, None), (None, 0), (-1, 1)])
def test_number_bounds_are_sound(lo, hi):
    schema = {"type": "number", **({"minimum": lo} if lo is not None else {}),
              **({"maximum": hi} if hi is not None else {})}
    grammar = plan_schema(schema).grammar
    candidates = [f"{sign}{whole}{frac}" for sign in ("", "-")
                  for whole in (0, 1, 2, 3, 5, 49, 50, 51, 60, 61, 100)
                  for frac in ("", ".0", ".5", ".01", ".99")]
    accepted = 0
    for text in candidates:
        value = float(text)
        inside = (lo is None or value >= lo) and (hi is None or value <= hi)
        if grammar_accepts(grammar, text):
            accepted += 1
            assert inside, text
    assert accepted > 5


def test_an_engine_library_that_cannot_load_is_a_sentence_not_a_traceback(monkeypatch):
    import builtins

    from models.structured import guidance

    real_import = builtins.__import__

    def broken(name, *args, **kwargs):
        if name.startswith("llguidance"):
            raise ImportError("DLL load failed while importing _lib: Module not found.")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", broken)
    with pytest.raises(QuantDeskError, match=r"structured-output engine \(llguidance\) could "
                                             r"not be loaded: DLL load failed"):
        constraint_for_gbnf('root ::= "yes"')
    monkeypatch.undo()
    assert guidance.gbnf_grammar('root ::= "yes"').startswith("%llguidance")
