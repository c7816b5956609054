"""JSON Schema → GBNF, our GBNF parser and matcher, and the validator (no model needed).

Oracles: Python's arithmetic for integer ranges, Python's ``re`` for patterns, ``json``
for what is JSON, and the validator for what a schema allows. llama.cpp's own verdict
on the grammars is in test_structured_generation.py (it needs a vocabulary).
"""

from __future__ import annotations

import itertools
import json
import re

import pytest

from app.core.errors import QuantDeskError
from models.structured import (GbnfSyntaxError, GrammarMatcher, constraint_for_any_json,
                               constraint_for_gbnf, constraint_for_schema, parse_gbnf,
                               schema_to_grammar, validation_errors)
from models.structured.numeric_ranges import integer_range
from models.structured.regex_grammar import pattern_to_gbnf
from tests.models.structured_schemas import SUPPORTED, UNSUPPORTED


def accepts(gbnf: str, text: str) -> bool:
    """Whether the grammar's language contains exactly ``text``."""
    matcher = GrammarMatcher(parse_gbnf(gbnf))
    try:
        matcher.feed(text)
    except ValueError:
        return False
    return matcher.can_end


@pytest.mark.parametrize("lo,hi", [(0, 0), (5, 123), (-20, 7), (None, -3), (17, None), (None, None),
                                   (-100, -10), (1, 99), (0, 1000), (-999, 999)])
def test_integer_ranges_are_exact(lo, hi):
    grammar = f"root ::= {integer_range(lo, hi)}\n"
    wrong = [n for n in range(-1100, 1100)
             if accepts(grammar, str(n)) != ((lo is None or n >= lo) and (hi is None or n <= hi))]
    assert wrong == []
    assert not any(accepts(grammar, s) for s in ("01", "-0", "007", "+5", ""))


@pytest.mark.parametrize("pattern,alphabet", [
    ("^[A-Z]{2}-[0-9]{3,4}$", "AZ-09"),
    ("^(ab|c)+d?$", "abcd"),
    (r"^\d\d?$", "05a"),
    ("x[^y]", "xyz"),
    (r"^a.c$", "abc\""),
])
def test_patterns_match_what_python_re_matches(pattern, alphabet):
    grammar = f'root ::= "\\"" {pattern_to_gbnf(pattern)} "\\""\n'
    for length in range(0, 6):
        for chars in itertools.product(alphabet, repeat=length):
            s = "".join(chars)
            matches = re.search(pattern, s) is not None
            # The grammar never writes a raw quote where a class or '.' stands (narrower
            # than the regex, still valid), so only the "accepted implies matches" half
            # holds for strings with quotes.
            if '"' in s:
                assert not accepts(grammar, json.dumps(s)) or matches, s
            else:
                assert accepts(grammar, json.dumps(s)) == matches, s


def test_supported_schemas_convert_without_reports_and_parse():
    assert len(SUPPORTED) >= 20
    for name, (_, schema) in SUPPORTED.items():
        converted = schema_to_grammar(schema)
        assert converted.unsupported == [], name
        parse_gbnf(converted.gbnf)


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_features_are_reported_with_pointer_and_refused(name):
    schema, pointers = UNSUPPORTED[name]
    reported = schema_to_grammar(schema).unsupported
    assert set(pointers) <= {f.pointer for f in reported}
    assert all(f.message.endswith(".") and len(f.message.split()) > 4 for f in reported)
    with pytest.raises(QuantDeskError) as caught:
        constraint_for_schema(schema)
    assert pointers[0] in str(caught.value)
    allowed = constraint_for_schema(schema, allow_unsupported=True)
    assert allowed.unsupported and allowed.gbnf.startswith("root ::=")


def test_grammar_accepts_valid_and_rejects_invalid_instances():
    schema = SUPPORTED["array-of-objects"][1]
    gbnf = schema_to_grammar(schema).gbnf
    good = {"items": [{"name": "milk", "qty": 2}, {"name": "eggs", "qty": 12}]}
    bad = [{"items": []}, {"items": [{"name": "x", "qty": 0}]}, {"items": [{"qty": 1, "name": "x"}]},
           {"items": [{"name": "a", "qty": 1}] * 4}, {"items": [{"name": "a", "qty": 1}], "x": 1}]
    assert accepts(gbnf, json.dumps(good, separators=(",", ":")))
    assert validation_errors(good, schema) == []
    for value in bad:
        assert not accepts(gbnf, json.dumps(value, separators=(",", ":"))), value


def test_additional_properties_never_repeat_a_declared_key():
    schema = SUPPORTED["additional-properties"][1]
    gbnf = schema_to_grammar(schema).gbnf
    assert accepts(gbnf, '{"game":"chess","ann":3,"gam":1,"games":2}')
    assert not accepts(gbnf, '{"game":"chess","game":3}')
    assert not accepts(gbnf, '{"game":"chess","bob":11}')


def test_formats_in_grammar_pass_the_validator():
    schema = SUPPORTED["datetime-uuid"][1]
    value = {"id": "123e4567-e89b-12d3-a456-426614174000", "timestamp": "2024-05-03T14:30:00Z"}
    text = json.dumps(value, separators=(",", ":"))
    assert accepts(schema_to_grammar(schema).gbnf, text)
    assert validation_errors(value, schema) == []
    assert validation_errors({**value, "id": "not-a-uuid"}, schema)


def test_any_json_mode_accepts_compact_json_and_nothing_else():
    gbnf = constraint_for_any_json().gbnf
    for value in ({"a": [1, -2.5, 3e10, None, True]}, [], "x\\\"y", 0, {"": {"k": [{}]}}):
        assert accepts(gbnf, json.dumps(value, separators=(",", ":")))
    for text in ("{a:1}", "[1,]", "01", '"\n"', "tru"):
        assert not accepts(gbnf, text)


def test_forced_text_follows_keys_punctuation_and_enum_tails():
    gbnf = schema_to_grammar({"type": "object", "properties": {
        "city": {"enum": ["Paris", "Berlin"]}, "n": {"type": "integer"}},
        "required": ["city", "n"]}).gbnf
    matcher = GrammarMatcher(parse_gbnf(gbnf))
    assert matcher.forced_text() == '{"city":"'
    matcher.feed('{"city":"B')
    assert matcher.forced_text() == 'erlin","n":'
    matcher.feed('erlin","n":7')
    assert matcher.forced_text() == "" and not matcher.can_end
    matcher.feed("}")
    assert matcher.must_end


@pytest.mark.parametrize("text,line,column,words", [
    ('root ::= "a"\nfoo ::= bar\n', 2, 9, "never defined"),
    ('root ::= "abc\n', 1, 10, "never closed"),
    ("root ::= [a-z\n", 1, 10, "never closed"),
    ('root ::= ("a" | "b"\n', 2, 1, "')' was expected"),
    ('root = "a"\n', 1, 6, "'::=' was expected"),
    ('root ::= "\\q"\n', 1, 11, "unknown escape"),
    ('start ::= "a"\n', 1, 1, "no rule named 'root'"),
    ('root ::= root "a" | "b"\n', 1, 1, "left-recursive"),
    ('root ::= "a"{3,1}\n', 1, 18, "maximum below its minimum"),
    ('root ::= * "a"\n', 1, 10, "must follow something"),
])
def test_gbnf_errors_are_sentences_with_line_and_column(text, line, column, words):
    with pytest.raises(GbnfSyntaxError) as caught:
        constraint_for_gbnf(text)
    message = str(caught.value)
    assert (caught.value.line, caught.value.column) == (line, column), message
    assert words in message and message.startswith("The grammar has an error on line")


def test_valid_gbnf_passes_through_unchanged():
    text = 'root ::= answer ("," answer)*   # a list\nanswer ::= "yes" | "no" | [0-9]{1,3}\n'
    constraint = constraint_for_gbnf(text)
    assert constraint.gbnf == text and constraint.check("yes,42") == "yes,42"
    assert accepts(text, "yes,no,123") and not accepts(text, "yes,1234")


def test_validator_explains_each_problem_in_a_sentence():
    schema = SUPPORTED["nested-address"][1]
    value = {"shop": "x" * 31, "address": {"street": "Main", "zip": "1234"}}
    problems = validation_errors(value, schema)
    assert any("shop" in p and "maximum 30" in p for p in problems)
    assert any("lacks the required property 'city'" in p for p in problems)
    assert any("zip" in p and "pattern" in p for p in problems)
    with pytest.raises(QuantDeskError, match="not complete JSON"):
        constraint_for_schema(schema).check('{"shop":"a","addr')


@pytest.mark.parametrize("name", ["array-of-objects", "recursive-ref", "any-json", "datetime-uuid",
                                  "additional-properties", "nested-address", "bounded-numbers"])
def test_shortest_completion_closes_any_prefix_into_a_valid_value(name):
    schema = SUPPORTED[name][1]
    examples = {
        "array-of-objects": {"items": [{"name": "milk", "qty": 2}, {"name": "egg", "qty": 12}]},
        "recursive-ref": {"name": "Ann", "children": [{"name": "Bo", "children": []}]},
        "any-json": {"cat": {"name": "F", "tags": [1, -2.5, None, True], "x": {}}},
        "datetime-uuid": {"id": "123e4567-e89b-12d3-a456-426614174000",
                          "timestamp": "2024-05-03T14:30:00Z"},
        "additional-properties": {"game": "chess", "ann": 3, "bob": 10},
        "nested-address": {"shop": "B", "address": {"street": "Main 1", "city": "Berlin",
                                                    "zip": "10115"}},
        "bounded-numbers": {"celsius": -12.5, "humidity": 0.25},
    }
    text = json.dumps(examples[name], separators=(",", ":"))
    grammar = parse_gbnf(schema_to_grammar(schema).gbnf)
    for cut in range(len(text)):
        matcher = GrammarMatcher(grammar)
        matcher.feed(text[:cut])
        completed = text[:cut] + matcher.shortest_completion()
        assert validation_errors(json.loads(completed), schema) == [], completed


@pytest.mark.parametrize("lo,hi", [(-50, 60), (0, 1), (-5, -2), (3, None), (None, 0), (-1, 1),
                                   (None, -3), (-2, None)])
def test_number_bounds_are_sound_and_complete_for_plain_decimals(lo, hi):
    gbnf = schema_to_grammar({"type": "number", "minimum": lo, "maximum": hi}
                             if lo is not None and hi is not None else
                             {"type": "number", "minimum": lo} if lo is not None else
                             {"type": "number", "maximum": hi}).gbnf
    candidates = [f"{sign}{whole}{frac}" for sign in ("", "-") for whole in (0, 1, 2, 3, 5, 49, 50, 51, 60, 61, 100)
                  for frac in ("", ".0", ".00", ".5", ".01", ".99")]
    for text in candidates:
        value = float(text)
        inside = (lo is None or value >= lo) and (hi is None or value <= hi)
        if accepts(gbnf, text):
            assert inside, text
        elif inside:
            assert text.startswith("-0") and value == 0 or text == "-0", text  # narrowing only
