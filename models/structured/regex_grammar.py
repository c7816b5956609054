"""A JSON Schema ``pattern`` (a regular expression subset) as a GBNF expression.

Supported: literals, escaped metacharacters, ``\\d \\w \\s \\D \\W \\S``, ``.``, character
classes with ranges and negation, groups ``( )`` and ``(?: )``, alternation ``|``, the
quantifiers ``* + ? {m} {m,} {m,n}``, and ``^``/``$`` at the ends. JSON Schema patterns
are unanchored searches, so a side without an anchor may have any characters.

The grammar produces the *JSON text* of the string, so characters JSON must escape
(``"``, ``\\``, control characters) are written as their escapes, and classes never
produce them raw. Anything else (back references, look-arounds, ``\\b``, lazy
quantifiers) raises :class:`UnsupportedPattern`, so the caller reports it instead of
generating an unconstrained string.
"""

from __future__ import annotations

import json

# Characters a JSON string may hold without escaping, as a GBNF class body fragment.
PLAIN_CHAR = r'[^"\\\x7F\x00-\x1F]'
# \s keeps only the space: tabs and newlines would need JSON escapes inside a class.
CLASS_ESCAPES = {"d": "0-9", "w": "a-zA-Z0-9_", "s": " "}
SPECIAL_IN_GBNF_CLASS = set('\\]^-"[')


class UnsupportedPattern(ValueError):
    """A regular expression feature outside the subset the grammar can express."""


def _gbnf_class_char(c: str) -> str:
    if c in SPECIAL_IN_GBNF_CLASS or not c.isprintable() or ord(c) < 0x20:
        return f"\\x{ord(c):02X}" if ord(c) < 0x100 else f"\\u{ord(c):04X}"
    return c


def _json_literal(c: str) -> str:
    """A GBNF literal for one decoded character, written as JSON would write it."""
    encoded = json.dumps(c)[1:-1]
    return '"' + encoded.replace("\\", "\\\\").replace('"', '\\"') + '"'


class _RegexToGbnf:
    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0

    def peek(self) -> str:
        return self.p[self.i] if self.i < len(self.p) else ""

    def alternation(self) -> str:
        branches = [self.concatenation()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.concatenation())
        return branches[0] if len(branches) == 1 else "(" + " | ".join(branches) + ")"

    def concatenation(self) -> str:
        items = []
        while self.peek() not in ("", "|", ")"):
            atom = self.atom()
            items.append(self.quantified(atom))
        return "(" + " ".join(items) + ")" if items else '""'

    def quantified(self, atom: str) -> str:
        c = self.peek()
        if c in ("*", "+", "?"):
            self.i += 1
            suffix = c
        elif c == "{" and self._looks_like_count():
            end = self.p.index("}", self.i)
            body = self.p[self.i + 1:end].replace(" ", "")
            self.i = end + 1
            suffix = "{" + body + "}"
        else:
            return atom
        if self.peek() in ("?", "+"):
            raise UnsupportedPattern("lazy or possessive quantifiers")
        return atom + suffix

    def _looks_like_count(self) -> bool:
        end = self.p.find("}", self.i)
        body = self.p[self.i + 1:end] if end > 0 else ""
        parts = body.split(",")
        return end > 0 and 1 <= len(parts) <= 2 and parts[0].isdigit() and (
            len(parts) == 1 or parts[1] == "" or parts[1].isdigit())

    def atom(self) -> str:
        c = self.peek()
        self.i += 1
        if c == "(":
            if self.p.startswith("?:", self.i):
                self.i += 2
            elif self.peek() == "?":
                raise UnsupportedPattern("look-around or named groups")
            inner = self.alternation()
            if self.peek() != ")":
                raise UnsupportedPattern("an unclosed group")
            self.i += 1
            return "(" + inner + ")"
        if c == "[":
            return self.char_class()
        if c == ".":
            return PLAIN_CHAR
        if c == "\\":
            e = self.peek()
            self.i += 1
            if e.lower() in CLASS_ESCAPES:
                negate = "^" if e.isupper() else ""
                extra = '"\\\\\\x7F\\x00-\\x1F' if negate else ""
                return f"[{negate}{CLASS_ESCAPES[e.lower()]}{extra}]"
            if e in "ntr":
                return _json_literal({"n": "\n", "t": "\t", "r": "\r"}[e])
            if e and not e.isalnum():
                return _json_literal(e)
            raise UnsupportedPattern(f"the escape \\{e}")
        if c in ("^", "$"):
            raise UnsupportedPattern(f"'{c}' anywhere but at the ends")
        if c in ("*", "+", "?", "{", ")"):
            raise UnsupportedPattern(f"a misplaced '{c}'")
        return _json_literal(c)

    def char_class(self) -> str:
        negated = self.peek() == "^"
        self.i += negated
        body = []
        first = True
        while first or self.peek() != "]":
            first = False
            if not self.peek():
                raise UnsupportedPattern("an unclosed character class")
            lo = self.class_char(body)
            if lo is None:
                continue
            if self.peek() == "-" and self.i + 1 < len(self.p) and self.p[self.i + 1] != "]":
                self.i += 1
                hi = self.class_char(body)
                if hi is None:
                    raise UnsupportedPattern("a range ending in a class escape")
                body.append(_gbnf_class_char(lo) + "-" + _gbnf_class_char(hi))
            else:
                body.append(_gbnf_class_char(lo))
        self.i += 1
        if negated:
            # A negated class must still never produce a raw quote, backslash or control.
            return "[^" + "".join(body) + '"\\\\\\x7F\\x00-\\x1F]'
        kept = [part for part in body if part not in ("\\x22", "\\x5C")]
        if not kept:
            raise UnsupportedPattern("a class of only quote or backslash characters")
        return "[" + "".join(kept) + "]"

    def class_char(self, body: list[str]):
        """One class member; class escapes like ``\\d`` are appended to ``body`` directly."""
        c = self.peek()
        self.i += 1
        if c != "\\":
            return c
        e = self.peek()
        self.i += 1
        if e.lower() in CLASS_ESCAPES and e.islower():
            body.append(CLASS_ESCAPES[e])
            return None
        if e in "ntr":
            return {"n": "\n", "t": "\t", "r": "\r"}[e]
        if e and not e.isalnum():
            return e
        raise UnsupportedPattern(f"the class escape \\{e}")


def pattern_to_gbnf(pattern: str) -> str:
    """The GBNF expression for the JSON text of strings matching ``pattern`` (unquoted).

    Raises:
        UnsupportedPattern: the pattern uses a feature outside the supported subset.
    """
    body = pattern
    anchored_start = body.startswith("^")
    anchored_end = body.endswith("$") and not body.endswith("\\$")
    body = body[1 if anchored_start else 0:len(body) - 1 if anchored_end else len(body)]
    converter = _RegexToGbnf(body)
    expression = converter.alternation()
    if converter.i != len(body):
        raise UnsupportedPattern(f"an unexpected {body[converter.i]!r}")
    any_chars = f"{PLAIN_CHAR}*"
    return " ".join(part for part in (
        "" if anchored_start else any_chars, expression, "" if anchored_end else any_chars) if part)
