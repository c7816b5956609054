"""GBNF grammars: our own parser (syntax check with sentences) and a character matcher.

llama.cpp constrains sampling with GBNF grammars (``src/llama-grammar.cpp``). When its
parser meets an error it only prints to stderr and returns NULL, and a token the grammar
rejects in ``llama_sampler_accept`` throws across the C API, which aborts the process. So
QuantDesk parses every grammar itself first, following llama.cpp's syntax rules exactly
(rule names are ``[a-zA-Z0-9-]+``, ``#`` comments, newlines end a rule except inside
parentheses, the escapes ``\\x \\u \\U \\t \\r \\n \\\\ \\" \\[ \\] \\-``, ``.``, ``* + ?
{m} {m,} {m,n}``), and turns errors into sentences a user can act on. It reads every
grammar *as* llama.cpp does, not just with its syntax: what a repetition repeats, the
repetition limits, duplicate rules and left recursion follow ``llama_grammar_parser``
(see :class:`_Parser`), because fast-forward trusts our matcher to agree with llama.cpp's
sampler token by token. tests/models/test_structured_gbnf_llama.py checks that on 1,000
generated grammars against llama.cpp itself.

The parsed grammar also drives :class:`GrammarMatcher`, a character-level pushdown
recogniser built like llama.cpp's: a set of *stacks*, each a tuple of frames
``(alternative id, position of the next element)``, finished frames dropped as llama.cpp
drops them; a stack whose top is a character set is *ready*, an empty stack has
completed the root rule. Guided fast-forward asks it which characters
are the only possible continuation (see :mod:`models.structured.fast_forward`).

Token references (``<[123]>``, ``<think>``) need a vocabulary; QuantDesk grammars do not
use them, so the parser refuses them with a sentence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Optional, Sequence, Union

from app.core.errors import QuantDeskError

MAX_CODEPOINT = 0x10FFFF
MAX_REPETITIONS = 2000  # llama.cpp's MAX_REPETITION_THRESHOLD
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

    def representative(self) -> Optional[int]:
        """One code point the set admits, preferring plain letters and digits; ``None`` if none."""
        for c in (ord("a"), ord("0"), ord("A")):
            if self.matches(c):
                return c
        if not self.negated:
            starts = [lo for lo, hi in self.ranges if lo <= hi and lo <= MAX_CODEPOINT]
            return min(starts) if starts else None
        for c in (0x20, 0):
            while c <= MAX_CODEPOINT:
                if 0xD800 <= c <= 0xDFFF:
                    c = 0xE000
                covering = [hi for lo, hi in self.ranges if lo <= c <= hi]
                if not covering:
                    return c
                c = max(covering) + 1
        return None

    def single(self) -> Optional[int]:
        """The one code point this set admits, or ``None`` when it admits several."""
        if not self.negated and len(self.ranges) == 1 and self.ranges[0][0] == self.ranges[0][1] \
                and self.ranges[0][0] <= MAX_CODEPOINT:
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


_SPACE = re.compile(r"(?:[ \t]|#[^\r\n]*)*")
_SPACE_NEWLINE = re.compile(r"(?:[ \t\r\n]|#[^\r\n]*)*")
_NAME = re.compile(r"[a-zA-Z0-9-]*")
_PLAIN = re.compile(r'[^"\\]*')


@lru_cache(maxsize=4096)
def _single(code: int) -> CharSet:
    return CharSet(((code, code),))


def _is_word_char(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "-")


class _Parser:
    """Recursive descent over GBNF text, step for step as ``llama_grammar_parser`` reads it.

    Facts carried over from llama.cpp's ``src/llama-grammar.cpp`` (they decide which texts
    a grammar allows, so they must be the same here):

    - a repetition applies to the whole last *symbol*: a quoted literal (``"ab"*`` repeats
      ``ab``), a class, a group, a rule name, ``.``, or what an earlier repetition built
      (``"a"{2}*`` repeats ``aa``). An empty literal or class (``""``, ``[]``, ``[^]``)
      and ``x{0}`` leave no symbol, so a repetition right after them is an error;
    - ``{m,n}`` becomes ``m`` copies and ``n - m`` nested optional rules; ``m`` above 2000
      is an error, ``n`` above 2000 means no maximum, and the product of nested repetition
      counts must stay below 2000;
    - inside ``{...}`` and between elements, newlines are spaces only inside parentheses;
    - a rule defined twice keeps its last definition;
    - the text ends at a NUL character (it crosses the C API as a C string).

    Generated rule names contain ``_``, which user rule names cannot, so they never clash.
    """

    ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}
    HEX_SIZES = {"x": 2, "u": 4, "U": 8}

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.grammar = Grammar()
        self.defined_at: dict[str, int] = {}
        self.referenced_at: dict[str, int] = {}
        self.symbols: set[str] = set()  # llama.cpp's symbol_ids: names seen and generated

    def fail(self, problem: str, pos: Optional[int] = None) -> GbnfSyntaxError:
        return GbnfSyntaxError(self.text, self.pos if pos is None else pos, problem)

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.text[i] if i < len(self.text) else ""

    def skip_space(self, newline_ok: bool) -> None:
        self.pos = (_SPACE_NEWLINE if newline_ok else _SPACE).match(self.text, self.pos).end()

    def name(self) -> str:
        start = self.pos
        self.pos = _NAME.match(self.text, self.pos).end()
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

    def new_rule(self, base: str) -> str:
        name = f"{base}_{len(self.symbols)}"
        self.symbols.add(name)
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
        last = 0          # where the last symbol starts in ``items`` (llama.cpp's last_sym_start)
        prev_rules = 1    # rules the last symbol stands for (llama.cpp's n_prev_rules)
        while True:
            c = self.peek()
            start = self.pos
            if c == '"':
                self.pos += 1
                last, prev_rules = len(items), 1
                while self.peek() != '"':
                    if not self.peek():
                        raise self.fail("the quoted literal that starts here is never closed", start)
                    plain = _PLAIN.match(self.text, self.pos).end()
                    if plain > self.pos:
                        items.extend(_single(ord(c)) for c in self.text[self.pos:plain])
                        self.pos = plain
                        continue
                    code = self.char()
                    items.append(_single(code))
                self.pos += 1
            elif c == "[":
                self.pos += 1
                negated = self.peek() == "^"
                self.pos += negated
                last, prev_rules = len(items), 1
                ranges = []
                while self.peek() != "]":
                    if not self.peek():
                        raise self.fail("the character class that starts here is never closed", start)
                    lo = self.char()
                    hi = lo
                    if self.peek() == "-" and self.peek(1) != "]":
                        if not self.peek(1):
                            raise self.fail("the character class that starts here is never closed", start)
                        self.pos += 1
                        hi = self.char()
                    ranges.append((lo, hi))
                self.pos += 1
                if ranges:  # llama.cpp writes no element at all for [] and [^]
                    items.append(CharSet(tuple(ranges), negated))
            elif c == ".":
                self.pos += 1
                last, prev_rules = len(items), 1
                items.append(CharSet(((0, MAX_CODEPOINT),)))
            elif c and _is_word_char(c):
                ref = self.name()
                self.referenced_at.setdefault(ref, start)
                self.symbols.add(ref)
                last, prev_rules = len(items), 1
                items.append(ref)
            elif c == "(":
                self.pos += 1
                self.skip_space(True)
                before = len(self.symbols)
                group = self.new_rule(rule)
                self.grammar.rules[group] = self.alternatives(rule, True)
                prev_rules = max(1, len(self.symbols) - before)
                if self.peek() != ")":
                    raise self.fail("a ')' was expected to close the group opened at column "
                                    f"{start - (self.text.rfind(chr(10), 0, start) + 1) + 1}")
                self.pos += 1
                last = len(items)
                items.append(group)
            elif c in ("*", "+", "?", "{"):
                if last == len(items):
                    raise self.fail(f"'{c}' must follow something to repeat", start)
                low, high = self.repetition_bounds(nested)
                prev_rules = self.repeat(rule, items, last, low, high, prev_rules, start)
                continue
            elif c in ("<", "!"):
                raise self.fail("token references (<...>) are not supported in QuantDesk grammars")
            else:
                break
            self.skip_space(nested)
        return tuple(items)

    def repetition_bounds(self, nested: bool) -> tuple[int, Optional[int]]:
        c = self.peek()
        self.pos += 1
        self.skip_space(nested)
        if c != "{":
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        if not (self.peek().isdigit() and self.peek().isascii()):
            raise self.fail("a whole number was expected after '{'")
        low = self.integer()
        self.skip_space(nested)
        high: Optional[int] = low
        if self.peek() == ",":
            self.pos += 1
            self.skip_space(nested)
            high = self.integer() if self.peek().isdigit() and self.peek().isascii() else None
            self.skip_space(nested)
            if self.peek() != "}":
                raise self.fail("a '}' was expected to close the repetition")
        elif self.peek() != "}":
            raise self.fail("a ',' or '}' was expected in the repetition")
        self.pos += 1
        self.skip_space(nested)
        if low > MAX_REPETITIONS:
            raise self.fail(f"a repetition of more than {MAX_REPETITIONS} is not allowed")
        if high is not None and high > MAX_REPETITIONS:
            high = None  # llama.cpp reads a maximum above the limit as no maximum
        if high is not None and high < low:
            raise self.fail(f"the repetition {{{low},{high}}} has its maximum below its minimum")
        return low, high

    def integer(self) -> int:
        start = self.pos
        while self.peek().isdigit() and self.peek().isascii():
            self.pos += 1
        if start == self.pos:
            raise self.fail("a whole number was expected")
        value = int(self.text[start:self.pos])
        if value >= 1 << 64:
            raise self.fail("the repetition count is too large", start)
        return value

    def repeat(self, rule: str, items: list[Element], last: int, low: int, high: Optional[int],
               prev_rules: int, at: int) -> int:
        """Rewrite ``items[last:]`` repeated ``low``..``high`` times, as llama.cpp does:
        ``S{m,n}`` is ``S`` m times then ``S'(n-m)`` with ``S'(x) ::= S S'(x-1) |``; no
        maximum gives ``S' ::= S S' |``. Returns the new symbol's rule count."""
        unit = tuple(items[last:])
        total = high if high is not None and high > 0 else (low if low > 0 else 1)
        if prev_rules * total >= MAX_REPETITIONS:
            raise self.fail("the repetitions nested here multiply to 2000 or more copies, more "
                            "than llama.cpp allows; repeat fewer times or simplify", at)
        del items[last:]
        items.extend(unit * low)
        optional = 1 if high is None else high - low
        previous = None
        for i in range(optional):
            name = self.new_rule(rule)
            tail = (name,) if high is None else ((previous,) if i > 0 else ())
            self.grammar.rules[name] = [unit + tail, ()]
            previous = name
        if optional > 0:
            items.append(previous)
        return prev_rules * total

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
            self.symbols.add(name)
            self.defined_at[name] = start  # a later definition replaces an earlier one
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
    """Rules that can match the empty text (a fixed point over the alternatives)."""
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


def _llama_left_recursion(grammar: Grammar, written_empty_only: bool = True) -> Optional[str]:
    """llama.cpp's own check (``llama_grammar_detect_left_recursion``): a rule that reaches
    itself through leftmost references, where a reference is passed over only if its rule
    has a *written* empty alternative. Returns the first such rule in definition order.
    With ``written_empty_only=False``, rules that match nothing only indirectly are passed
    over too (any leftmost loop at all)."""
    if written_empty_only:
        may_be_empty = {name: any(not alt for alt in alts) for name, alts in grammar.rules.items()}
    else:
        may_be_empty = dict.fromkeys(grammar.rules, False)
        may_be_empty.update(dict.fromkeys(_nullable_rules(grammar), True))
    done: set[str] = set()
    in_progress: set[str] = set()

    def visit(name: str) -> bool:
        if name in in_progress:
            return True
        if name in done:  # explored before without finding a loop: nothing new to find
            return False
        in_progress.add(name)
        for alt in grammar.rules[name]:
            for element in alt:
                if isinstance(element, CharSet):
                    break
                if visit(element):
                    return True
                if not may_be_empty[element]:
                    break
        in_progress.discard(name)
        done.add(name)
        return False

    for name in grammar.rules:
        if visit(name):
            return name
    return None


def _growing_left_recursion(grammar: Grammar) -> Optional[str]:
    """A rule reachable from root that reaches itself before reading a character (through
    rules that can match nothing) with something left to match after the loop: expanding
    it grows the stack forever, so llama.cpp would hang (its own check, above, misses loops
    through rules that are empty only indirectly). Loops in tail position are harmless:
    llama.cpp drops finished frames, and its seen-set stops them."""
    if _llama_left_recursion(grammar, written_empty_only=False) is None:
        return None  # no leftmost loop at all (the usual case): nothing can grow
    nullable = _nullable_rules(grammar)
    edges: dict[str, list[tuple[str, bool]]] = {name: [] for name in grammar.rules}
    for name, alts in grammar.rules.items():
        for alt in alts:
            for i, element in enumerate(alt):
                if isinstance(element, CharSet):
                    break
                edges[name].append((element, i + 1 < len(alt)))
                if element not in nullable:
                    break

    def reaches(a: str, b: str) -> bool:
        seen, todo = {a}, [a]
        while todo:
            name = todo.pop()
            if name == b:
                return True
            for target, _ in edges[name]:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return False

    reachable, todo = set(), [grammar.root]
    while todo:
        name = todo.pop()
        if name not in reachable:
            reachable.add(name)
            todo.extend(e for alt in grammar.rules[name] for e in alt if isinstance(e, str))
    for name in grammar.rules:
        if name in reachable and any(grows and reaches(target, name) for target, grows in edges[name]):
            return name
    return None


def parse_gbnf(text: str) -> Grammar:
    """Parse GBNF text as llama.cpp would, or raise :class:`GbnfSyntaxError` (a sentence).

    Accepts exactly the grammars llama.cpp accepts, except three kinds it would hang on or
    that QuantDesk does not use: token references (``<...>``), ``{m,n}`` with ``n < m``,
    and left recursion that grows the stack forever (:func:`_growing_left_recursion`).
    """
    text = text.split("\0", 1)[0]  # llama.cpp reads a C string
    if not text.strip():
        raise QuantDeskError("The grammar is empty.", GBNF_HELP)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise GbnfSyntaxError(text, exc.start, "the text is not valid Unicode (a lone surrogate)") from None
    parser = _Parser(text)
    grammar = parser.parse()
    for check in (_llama_left_recursion, _growing_left_recursion):
        name = check(grammar)
        if name is not None:
            shown = name.split("_")[0]
            raise GbnfSyntaxError(text, parser.defined_at.get(shown, 0),
                                  f"the rule {shown!r} is left-recursive (it can reach itself "
                                  "before reading a character), which llama.cpp refuses")
    return grammar


Frame = tuple[int, int]       # (alternative id, position of the next element in it)
Stack = tuple[Frame, ...]     # bottom … top


class GrammarMatcher:
    """Which texts a grammar allows, one character at a time, with llama.cpp's stacks.

    A stack lists, bottom to top, where each open rule continues; like llama.cpp's
    ``llama_grammar_advance_stack``, a frame whose alternative is finished is dropped at
    once (no frame ever points past its end) and expansion keeps a seen-set, so the same
    grammars terminate here as there, with the same stacks.

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
            [((alt, 0),) if self._alts[alt] else () for alt in self._rule_alts[grammar.root]])

    def _expand_all(self, stacks: Iterable[Stack]) -> frozenset[Stack]:
        """Expand rule references until every stack's top is a character set (or it is empty)."""
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
            element = self._alts[alt][pos]
            if isinstance(element, CharSet):
                done.add(stack)
                continue
            below = stack[:-1]
            if pos + 1 < len(self._alts[alt]):
                below += ((alt, pos + 1),)
            for sub in self._rule_alts[element]:
                todo.append(below + ((sub, 0),) if self._alts[sub] else below)
        return frozenset(done)

    def _advance(self, stacks: frozenset[Stack], ch: int) -> frozenset[Stack]:
        moved = []
        for stack in stacks:
            if stack:
                alt, pos = stack[-1]
                if self._alts[alt][pos].matches(ch):
                    moved.append(stack[:-1] + ((alt, pos + 1),) if pos + 1 < len(self._alts[alt])
                                 else stack[:-1])
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
            if isinstance(element, CharSet):
                code = element.representative()
                part = None if code is None else chr(code)
            else:
                part = best[element]
            if part is None:
                return None
            parts.append(part)
        return "".join(parts)

    def shortest_completion(self) -> Optional[str]:
        """The shortest text that completes the grammar from here (``None``: none exists).

        For each ready stack, the completion is the rest of every frame from the top down,
        each element at its shortest; the shortest over the stacks
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
            for alt, pos in reversed(stack):
                rest = self._concat_shortest(self._alts[alt][pos:], best)
                if rest is None:
                    break
                parts.append(rest)
            else:
                text = "".join(parts)
                if found is None or (len(text), text) < (len(found), found):
                    found = text
        return found
