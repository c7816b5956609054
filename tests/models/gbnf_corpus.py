"""Generated GBNF grammars and texts for differential tests against llama.cpp's parser.

Seeded ``random.Random`` (the same corpus everywhere). Grammars use every construct
QuantDesk's reader handles: multi-character and escaped literals (``\\x41``, ``\\u00e9``,
``\\"``), non-ASCII characters, classes with ranges and negation, empty literals and
classes, ``.``, groups over several lines, every repetition form (``* + ? {m} {m,}
{m,n}``) after every kind of symbol, repeated repetitions, comments, duplicate rule
definitions, llama.cpp's own left-recursion cases, its repetition limits; a third of them
get one random edit (a character deleted or inserted), which mostly makes syntax errors.

Recursion back to an earlier rule is only written after something that reads a
character, so no grammar loops before reading (llama.cpp would hang on such a grammar,
QuantDesk refuses it; it is tested on its own). Texts are walks through the grammar
(sampled with our matcher, then judged by both) and their near misses.
"""

from __future__ import annotations

import random
ALPHABET = ["a", "b", "c", "x", "é", "日", "-", " ", '"', "\n", "A", "1"]
LITERAL_CHARS = ["a", "b", "c", "x", "é", "日", "-", " ", "\\\"", "\\n", "\\x41", "\\u00e9", "1", "[", "]"]
CLASSES = ["[abc]", "[^a]", "[a-c]", "[^\"\\n]", "[x-x]", "[é日]", "[]", "[^]", "[a-]", "[\\x41-\\x43]",
           "[0-9]", "[^a-c1]"]
REPEATS = ["*", "+", "?", "{2}", "{0,2}", "{1,}", "{0}", "{1,3}", "{ 2 , }", "{3,3}", "{0,1}"]
EDIT_CHARS = list('"[](){}*+?|:=\n#-. ab')


class GrammarGenerator:
    """``case()`` returns one GBNF text; texts come from :func:`sample_texts`."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    def sequence(self, index: int, n_rules: int, depth: int, consumed: bool, nested: bool) -> str:
        r = self.r
        parts = []
        for _ in range(r.choice([0, 1, 1, 2, 2, 3, 4])):
            kind = r.choice(["lit", "lit", "lit", "class", "class", "dot", "group", "group", "ref", "ref"])
            reads = False
            if kind == "lit":
                text = "".join(r.choice(LITERAL_CHARS) for _ in range(r.choice([0, 1, 2, 2, 3])))
                item, reads = f'"{text}"', bool(text)
            elif kind == "class":
                item = r.choice(CLASSES)
                reads = item not in ("[]", "[^]")
            elif kind == "dot":
                item, reads = ".", True
            elif kind == "group" and depth < 2:
                sep = r.choice([" | ", "|", "\n  | "])
                alts = [self.sequence(index, n_rules, depth + 1, consumed, True)
                        for _ in range(r.choice([1, 2, 3]))]
                item = "(" + r.choice(["", " ", "\n "]) + sep.join(alts) + ")"
            else:
                targets = list(range(index + 1, n_rules)) + (list(range(0, index + 1)) if consumed else [])
                if not targets:
                    continue
                item = f"r{r.choice(targets)}"
            empty = item in ('""', "[]", "[^]")
            if r.random() < (0.03 if empty else 0.35):
                for _ in range(2 if r.random() < 0.1 else 1):
                    rep = r.choice(REPEATS)
                    item += rep
                    if rep in ("*", "?", "{0}", "{0,2}", "{0,1}"):
                        reads = False
            parts.append(item)
            consumed = consumed or reads
        return " ".join(parts) if parts else '""'

    def case(self) -> str:
        r = self.r
        n = r.choice([1, 2, 3, 4])
        lines = []
        if r.random() < 0.1:
            lines.append("# a comment line")
        for i in range(n):
            alts = [self.sequence(i, n, 0, False, False) for _ in range(r.choice([1, 1, 2, 3]))]
            name = "root" if i == 0 else f"r{i}"
            lines.append(f"{name} ::= " + " | ".join(alts) + r.choice(["", "", "  # note"]))
        text = "\n".join(lines).replace("r0", "root") + "\n"
        special = r.random()
        if special < 0.04:  # llama.cpp's own left-recursion check
            text += f'r{n} ::= r{n} "a" | ""\nroot2 ::= r{n}\n'
        elif special < 0.08:  # a rule defined twice: the last definition counts
            text += 'root ::= "z" | "a"{2}\n'
        elif special < 0.11:  # llama.cpp's repetition limits
            text = r.choice(['root ::= "a"{2001}\n', 'root ::= "a"{0,2001} "b"\n',
                             'root ::= (("a"{0,50}){0,50})\n', 'root ::= ("a"{0,30}){0,30}\n',
                             'root ::= "a"{1999}\n'])
        if r.random() < 0.3:  # one random edit
            at = r.randrange(len(text) + 1)
            if r.random() < 0.5 and at < len(text):
                text = text[:at] + text[at + 1:]
            else:
                text = text[:at] + r.choice(EDIT_CHARS) + text[at:]
        return text


def sample_texts(grammar, r: random.Random, count: int) -> list[str]:
    """Walks through ``grammar`` (our parse) and near misses of them."""
    from models.structured.gbnf import GrammarMatcher

    texts: list[str] = []
    for _ in range(count):
        matcher = GrammarMatcher(grammar)
        out = []
        for _ in range(r.choice([0, 2, 4, 6, 8])):
            if (matcher.can_end and r.random() < 0.3) or len(matcher.stacks) > 200:
                break
            options = [c for c in ALPHABET if matcher.accepts_prefix(c)]
            tops = [matcher._alts[a][p] for s in matcher.stacks if s for a, p in [s[-1]]]
            options += [chr(c) for c in (t.representative() for t in tops) if c is not None
                        and 0x20 <= c < 0xD800]
            if not options:
                break
            c = r.choice(options)
            try:
                matcher.feed(c)
            except ValueError:
                break
            out.append(c)
        text = "".join(out)
        texts.append(text)
        if text and r.random() < 0.6:
            i = r.randrange(len(text))
            texts.append(r.choice([text[:i] + text[i + 1:], text[:i] + r.choice(ALPHABET) + text[i:],
                                   text + text[i:i + 2], text[:i]]))
    return list(dict.fromkeys(texts))


def random_texts(r: random.Random, count: int) -> list[str]:
    return ["".join(r.choice(ALPHABET[:6]) for _ in range(r.choice([0, 1, 2, 3, 4])))
            for _ in range(count)]

