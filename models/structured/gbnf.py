"""GBNF grammars: our own parser (syntax check with sentences) and a character matcher.

llama.cpp constrains sampling with GBNF grammars (``src/llama-grammar.cpp``). When its
parser meets an error it only prints to stderr and returns NULL, and a token the grammar
rejects in ``llama_sampler_accept`` throws across the C API, which aborts the process. So
QuantDesk parses every grammar itself first, following llama.cpp's syntax rules exactly
(rule names are ``[a-zA-Z0-9-]+``, ``#`` comments, newlines end a rule except inside
parentheses, the escapes ``\\x \\u \\U \\t \\r \\n \\\\ \\" \\[ \\] \\-``, ``.``, ``* + ?
{m} {m,} {m,n}``), and turns errors into sentences a user can act on.

The parsed grammar also drives :class:`GrammarMatcher`, a character-level pushdown
recogniser built like llama.cpp's: a set of *stacks*, each a tuple of frames
``(alternative id, position)``; a stack whose top is a character set is *ready*, an
empty stack has completed the root rule. Guided fast-forward asks it which characters
are the only possible continuation (see :mod:`models.structured.fast_forward`).

Token references (``<[123]>``, ``<think>``) need a vocabulary; QuantDesk grammars do not
use them, so the parser refuses them with a sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence, Union

from app.core.errors import QuantDeskError

MAX_CODEPOINT = 0x10FFFF
GBNF_HELP = ("See llama.cpp's grammars/README.md for the GBNF syntax: rule ::= alternatives, "
             "quoted literals, [character classes], ( groups ), * + ? {m,n}.")


@dataclass(frozen=True)
class CharSet:
    """One character element: inclusive code point ranges, possibly negated (``[^...]``)."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False

    def matches(self, ch: int) -> bool:
        inside = any(lo <= ch <= hi for lo, hi in self.ranges)
        return inside != self.negated

    def representative(self) -> int:
        """One code point the set admits, preferring plain letters and digits."""
        for c in (ord("a"), ord("0"), ord("A")):
            if self.matches(c):
                return c
        if not self.negated:
            return self.ranges[0][0]
        return next(c for c in range(0x20, MAX_CODEPOINT + 1) if self.matches(c))

    def single(self) -> Optional[int]:
        """The one code point this set admits, or ``None`` when it admits several."""
        if not self.negated and len(self.ranges) == 1 and self.ranges[0][0] == self.ranges[0][1]:
            return self.ranges[0][0]
        return None


Element = Union[CharSet, str]  # a str is a reference to a rule by name


@dataclass
class Grammar:
    """A parsed grammar: each rule name maps to its alternatives (sequences of elements)."""

    rules: dict[str, list[tuple[Element, ...]]] = field(default_factory=dict)
    root: str = "root"


class GbnfSyntaxError(QuantDeskError):
    """A grammar that llama.cpp would reject, explained with its line and column."""

    def __init__(self, text: str, pos: int, problem: str) -> None:
        line = text.count("\n", 0, pos) + 1
        column = pos - (text.rfind("\n", 0, pos) + 1) + 1
        self.line, self.column = line, column
        super().__init__(f"The grammar has an error on line {line}, column {column}: {problem}.",
                         GBNF_HELP)


def _is_word_char(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "-")


class _Parser:
    """Recursive descent over GBNF text; groups and repetitions become generated rules."""

    ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}
    HEX_SIZES = {"x": 2, "u": 4, "U": 8}

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.grammar = Grammar()
        self.defined_at: dict[str, int] = {}
        self.referenced_at: dict[str, int] = {}
        self.generated = 0

    def fail(self, problem: str, pos: Optional[int] = None) -> GbnfSyntaxError:
        return GbnfSyntaxError(self.text, self.pos if pos is None else pos, problem)

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.text[i] if i < len(self.text) else ""

    def skip_space(self, newline_ok: bool) -> None:
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c == "#":
                while self.pos < len(self.text) and self.text[self.pos] not in "\r\n":
                    self.pos += 1
            elif c in " \t" or (newline_ok and c in "\r\n"):
                self.pos += 1
            else:
                break

    def name(self) -> str:
        start = self.pos
        while _is_word_char(self.peek()):
            self.pos += 1
        if self.pos == start:
            shown = self.peek() or "the end of the text"
            raise self.fail(f"a rule name (letters, digits, '-') was expected, not {shown!r}")
        return self.text[start:self.pos]

    def char(self) -> int:
        c = self.peek()
        if not c:
            raise self.fail("the text ends inside a literal or character class")
        if c != "\\":
            self.pos += 1
            return ord(c)
        kind = self.peek(1)
        if kind in self.HEX_SIZES:
            digits = self.text[self.pos + 2:self.pos + 2 + self.HEX_SIZES[kind]]
            if len(digits) != self.HEX_SIZES[kind] or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.fail(f"\\{kind} must be followed by {self.HEX_SIZES[kind]} hex digits")
            self.pos += 2 + len(digits)
            return int(digits, 16)
        if kind in self.ESCAPES:
            self.pos += 2
            return ord(self.ESCAPES[kind])
        raise self.fail(f"unknown escape \\{kind}")

    def new_rule(self, base: str, alternatives: list[tuple[Element, ...]]) -> str:
        self.generated += 1
        name = f"{base}-{self.generated}"
        self.grammar.rules[name] = alternatives
        return name

    def alternatives(self, rule: str, nested: bool) -> list[tuple[Element, ...]]:
        alts = [self.sequence(rule, nested)]
        while self.peek() == "|":
            self.pos += 1
            self.skip_space(True)
            alts.append(self.sequence(rule, nested))
        return alts

    def sequence(self, rule: str, nested: bool) -> tuple[Element, ...]:
        items: list[Element] = []
        while True:
            c = self.peek()
            start = self.pos
            if c == '"':
                self.pos += 1
                while self.peek() != '"':
                    if not self.peek():
                        raise self.fail("the quoted literal that starts here is never closed", start)
                    code = self.char()
                    items.append(CharSet(((code, code),)))
                self.pos += 1
            elif c == "[":
                self.pos += 1
                negated = self.peek() == "^"
                self.pos += negated
                ranges = []
                while self.peek() != "]":
                    if not self.peek():
                        raise self.fail("the character class that starts here is never closed", start)
                    lo = self.char()
                    hi = lo
                    if self.peek() == "-" and self.peek(1) not in ("]", ""):
                        self.pos += 1
                        hi = self.char()
                    ranges.append((lo, hi))
                self.pos += 1
                items.append(CharSet(tuple(ranges), negated))
            elif c == ".":
                self.pos += 1
                items.append(CharSet(((0, MAX_CODEPOINT),)))
            elif c and _is_word_char(c):
                ref = self.name()
                self.referenced_at.setdefault(ref, start)
                items.append(ref)
            elif c == "(":
                self.pos += 1
                self.skip_space(True)
                inner = self.alternatives(rule, True)
                if self.peek() != ")":
                    raise self.fail("a ')' was expected to close the group opened at column "
                                    f"{start - (self.text.rfind(chr(10), 0, start) + 1) + 1}")
                self.pos += 1
                items.append(self.new_rule(rule, inner))
            elif c in ("*", "+", "?", "{"):
                if not items:
                    raise self.fail(f"'{c}' must follow something to repeat")
                low, high = self.repetition_bounds()
                items.append(self.repeat(rule, items.pop(), low, high))
            elif c in ("<", "!"):
                raise self.fail("token references (<...>) are not supported in QuantDesk grammars")
            else:
                break
            self.skip_space(nested)
        return tuple(items)

    def repetition_bounds(self) -> tuple[int, Optional[int]]:
        c = self.peek()
        self.pos += 1
        if c != "{":
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        self.skip_space(True)
        low = self.integer()
        high: Optional[int] = low
        self.skip_space(True)
        if self.peek() == ",":
            self.pos += 1
            self.skip_space(True)
            high = self.integer() if self.peek().isdigit() else None
            self.skip_space(True)
        if self.peek() != "}":
            raise self.fail("a '}' was expected to close the repetition")
        self.pos += 1
        if high is not None and high < low:
            raise self.fail(f"the repetition {{{low},{high}}} has its maximum below its minimum")
        return low, high

    def integer(self) -> int:
        start = self.pos
        while self.peek().isdigit() and self.peek().isascii():
            self.pos += 1
        if start == self.pos:
            raise self.fail("a whole number was expected")
        return int(self.text[start:self.pos])

    def repeat(self, rule: str, item: Element, low: int, high: Optional[int]) -> str:
        """``item{low,high}`` as rules: ``low`` copies, then nested optional ones or a star."""
        if high is None:
            star = f"{rule}-{self.generated + 1}"
            self.new_rule(rule, [(item, star), ()])
            tail: tuple[Element, ...] = (star,)
        else:
            tail = ()
            for _ in range(high - low):
                tail = (self.new_rule(rule, [(item,) + tail, ()]),)
        return self.new_rule(rule, [(item,) * low + tail])

    def parse(self) -> Grammar:
        self.skip_space(True)
        while self.pos < len(self.text):
            start = self.pos
            name = self.name()
            self.skip_space(False)
            if not self.text.startswith("::=", self.pos):
                raise self.fail(f"'::=' was expected after the rule name {name!r}")
            self.pos += 3
            self.skip_space(True)
            if name in self.defined_at:
                raise self.fail(f"the rule {name!r} is defined twice", start)
            self.defined_at[name] = start
            self.grammar.rules[name] = self.alternatives(name, False)
            if self.peek() not in ("\n", "\r", ""):
                raise self.fail(f"unexpected {self.peek()!r}; a rule ends at the end of its line")
            self.skip_space(True)
        for ref, at in self.referenced_at.items():
            if ref not in self.defined_at:
                raise self.fail(f"the rule {ref!r} is used but never defined", at)
        if "root" not in self.defined_at:
            raise self.fail("there is no rule named 'root', where generation starts", 0)
        return self.grammar


def _nullable_rules(grammar: Grammar) -> set[str]:
    nullable: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, alts in grammar.rules.items():
            if name not in nullable and any(all(isinstance(e, str) and e in nullable for e in alt)
                                            for alt in alts):
                nullable.add(name)
                changed = True
    return nullable


def _check_left_recursion(grammar: Grammar, text: str) -> None:
    """llama.cpp refuses left-recursive grammars (they would loop forever); so do we."""
    nullable = _nullable_rules(grammar)
    firsts = {name: set() for name in grammar.rules}
    for name, alts in grammar.rules.items():
        for alt in alts:
            for element in alt:
                if isinstance(element, CharSet):
                    break
                firsts[name].add(element)
                if element not in nullable:
                    break
    for start in grammar.rules:
        seen, todo = set(), list(firsts[start])
        while todo:
            name = todo.pop()
            if name == start:
                shown = start.split("-")[0]
                raise GbnfSyntaxError(text, text.find(shown) if shown in text else 0,
                                      f"the rule {shown!r} is left-recursive (it can reach "
                                      "itself before reading a character), which llama.cpp refuses")
            if name not in seen:
                seen.add(name)
                todo.extend(firsts[name])


def parse_gbnf(text: str) -> Grammar:
    """Parse GBNF text as llama.cpp would, or raise :class:`GbnfSyntaxError` (a sentence)."""
    if not text.strip():
        raise QuantDeskError("The grammar is empty.", GBNF_HELP)
    grammar = _Parser(text).parse()
    _check_left_recursion(grammar, text)
    return grammar


Frame = tuple[int, int]       # (alternative id, position inside it)
Stack = tuple[Frame, ...]     # bottom … top


class GrammarMatcher:
    """Which texts a grammar allows, one character at a time (llama.cpp's stack method).

    Args:
        grammar: A parsed grammar.
    """

    def __init__(self, grammar: Grammar) -> None:
        self._alts: list[tuple[Element, ...]] = []
        self._rule_alts: dict[str, list[int]] = {}
        for name, alts in grammar.rules.items():
            self._rule_alts[name] = []
            for alt in alts:
                self._rule_alts[name].append(len(self._alts))
                self._alts.append(alt)
        self._shortest: Optional[dict[str, Optional[str]]] = None
        self.stacks: frozenset[Stack] = self._expand_all(
            [((alt, 0),) for alt in self._rule_alts[grammar.root]])

    def _expand_all(self, stacks: Iterable[Stack]) -> frozenset[Stack]:
        """Advance every stack until its top is a character set (or it is empty)."""
        done: set[Stack] = set()
        todo, seen = list(stacks), set()
        while todo:
            stack = todo.pop()
            if stack in seen:
                continue
            seen.add(stack)
            if not stack:
                done.add(stack)
                continue
            alt, pos = stack[-1]
            elements = self._alts[alt]
            if pos == len(elements):
                below = stack[:-1]
                if below:
                    b_alt, b_pos = below[-1]
                    below = below[:-1] + ((b_alt, b_pos + 1),)
                todo.append(below)
                continue
            element = elements[pos]
            if isinstance(element, CharSet):
                done.add(stack)
            else:
                for sub in self._rule_alts[element]:
                    todo.append(stack + ((sub, 0),))
        return frozenset(done)

    def _advance(self, stacks: frozenset[Stack], ch: int) -> frozenset[Stack]:
        moved = []
        for stack in stacks:
            if stack:
                alt, pos = stack[-1]
                if self._alts[alt][pos].matches(ch):
                    moved.append(stack[:-1] + ((alt, pos + 1),))
        return self._expand_all(moved)

    def accepts_prefix(self, text: str) -> bool:
        """Whether ``text`` can still be continued (or ended) into a grammatical text."""
        stacks = self.stacks
        for c in text:
            stacks = self._advance(stacks, ord(c))
            if not stacks:
                return False
        return True

    def feed(self, text: str) -> None:
        """Consume generated text; raises ``ValueError`` if the grammar does not allow it."""
        for c in text:
            stacks = self._advance(self.stacks, ord(c))
            if not stacks:
                raise ValueError(f"the grammar does not allow {c!r} here")
            self.stacks = stacks

    @property
    def can_end(self) -> bool:
        """The text so far is a complete sentence of the grammar."""
        return () in self.stacks

    @property
    def must_end(self) -> bool:
        """Complete, and no character may follow."""
        return self.stacks == frozenset({()})

    def forced_text(self, limit: int = 256) -> str:
        """The characters that every continuation must start with (up to ``limit``).

        A character is forced when no stack can end here and every ready stack's top
        admits exactly that one code point. Matching them does not change ``self``.
        """
        out, stacks = [], self.stacks
        while len(out) < limit and () not in stacks:
            singles = {stack[-1] for stack in stacks}
            codes = {self._alts[alt][pos].single() for alt, pos in singles}
            if len(codes) != 1 or None in codes:
                break
            code = codes.pop()
            out.append(chr(code))
            stacks = self._advance(stacks, code)
        return "".join(out)

    def _shortest_texts(self) -> dict[str, Optional[str]]:
        """The shortest text of each rule (``None``: the rule never ends), computed once.

        A fixed point: a rule's shortest text is the shortest over its alternatives of
        the concatenation of their elements' shortest texts (a character set gives its
        representative character), repeated until nothing gets shorter.
        """
        if self._shortest is None:
            best: dict[str, Optional[str]] = {name: None for name in self._rule_alts}
            changed = True
            while changed:
                changed = False
                for name, alts in self._rule_alts.items():
                    for alt in alts:
                        text = self._concat_shortest(self._alts[alt], best)
                        if text is not None and (best[name] is None or len(text) < len(best[name])):
                            best[name], changed = text, True
            self._shortest = best
        return self._shortest

    @staticmethod
    def _concat_shortest(elements: Sequence[Element], best: dict[str, Optional[str]]) -> Optional[str]:
        parts = []
        for element in elements:
            part = chr(element.representative()) if isinstance(element, CharSet) else best[element]
            if part is None:
                return None
            parts.append(part)
        return "".join(parts)

    def shortest_completion(self) -> Optional[str]:
        """The shortest text that completes the grammar from here (``None``: none exists).

        For each ready stack, the completion is the rest of every frame from the top down
        (the top frame from its character set on, the frames below from after the rule
        they are expanding), each element at its shortest; the shortest over the stacks
        wins. String contents close at once and numbers get one digit. Used to close a
        reply properly when the token budget runs out; linear in the stacks' size, so it
        stays cheap in deeply nested JSON.
        """
        if () in self.stacks:
            return ""
        best = self._shortest_texts()
        found: Optional[str] = None
        for stack in self.stacks:
            parts = []
            for depth, (alt, pos) in enumerate(reversed(stack)):
                rest = self._concat_shortest(self._alts[alt][pos if depth == 0 else pos + 1:], best)
                if rest is None:
                    break
                parts.append(rest)
            else:
                text = "".join(parts)
                if found is None or (len(text), text) < (len(found), found):
                    found = text
        return found
