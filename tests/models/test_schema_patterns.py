"""User patterns reach ``re`` without FutureWarning, matching what they matched before."""

from __future__ import annotations

import random
import re
import warnings

import pytest

from models.structured.schema_check import compile_pattern, unambiguous_pattern

WARNED = ["[[a-z]]", "[a-z--b]", "^[a-z&&[^aeiou]]+$", "[a~~b]", "[a||b]", "[!--b]", "[[-a]",
          r"[\x2d--]", r"[\u0041-\u005a--]", "[[]", "[[:alpha:]]+"]
UNCHANGED = ["[--b]", "[^[a]", "[]-a]", r"[\[\]]", "a--b||c", "[a-]", "[-a]", "[a[b]",
             "^(?:[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+)$", r"^\d{3}-\d{4}$"]
PROBES = [chr(c) for c in range(32, 127)] + ["", "ab", "a-b", "[]", "[a]"]


def python_reading(pattern: str):
    """What Python compiles ``pattern`` to today, its warnings silenced."""
    re.purge()  # a cached pattern would not warn again
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return re.compile(pattern)
        except re.error:
            return None


def assert_same_without_warning(pattern: str) -> None:
    original = python_reading(pattern)
    re.purge()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            rewritten = re.compile(unambiguous_pattern(pattern))
        except re.error:
            rewritten = None
    assert (original is None) == (rewritten is None), pattern
    if original is not None:
        for text in PROBES:
            assert bool(original.fullmatch(text)) == bool(rewritten.fullmatch(text)), (pattern, text)


@pytest.mark.parametrize("pattern", WARNED)
def test_patterns_python_warns_about_compile_without_warning_and_match_the_same(pattern):
    re.purge()
    with pytest.warns(FutureWarning):
        re.compile(pattern)  # the premise: Python does warn about this one
    assert unambiguous_pattern(pattern) != pattern
    assert_same_without_warning(pattern)
    re.purge()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compile_pattern(pattern, "/pattern")


@pytest.mark.parametrize("pattern", UNCHANGED)
def test_patterns_without_a_warning_are_left_as_written(pattern):
    assert unambiguous_pattern(pattern) == pattern


def test_random_patterns_of_class_characters_match_as_before():
    rnd = random.Random(41)
    alphabet = "ab[]-&~|^\\xz"
    for _ in range(3000):
        assert_same_without_warning("".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 8))))
