"""The text of a test module as canary planting reads and edits it, and the few readers of its
syntax tree every planting module shares.

:class:`Source` keeps the module's bytes round-trippable (its encoding, a UTF-8 BOM, CRLF or CR
line endings) and maps syntax-tree positions (UTF-8 byte columns) to offsets in the text, so a
canary is made by editing the real test's own text at a constant's offsets
(:mod:`bench_assets.runner.canary_plant`, whose docstring holds the rules).
"""

import ast
import functools
import io
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

Func = ast.FunctionDef | ast.AsyncFunctionDef
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@dataclass
class Source:
    """A module's text, decoded so that encoding it again gives back its bytes exactly."""

    text: str
    encoding: str
    lines: list[str]
    starts: list[int]
    newline: str

    @classmethod
    def decode(cls, source: bytes) -> "Source | None":
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
            text = source.decode(encoding)
            if text.encode(encoding) != source:
                return None
        except (SyntaxError, LookupError, UnicodeError):
            return None
        lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", text)
        starts, at = [], 0
        for line in lines:
            starts.append(at)
            at += len(line)
        ends = re.findall(r"\r\n|\r|\n", text)
        newline = max(("\n", "\r\n", "\r"), key=ends.count) if ends else "\n"
        return cls(text, encoding, lines, starts, newline)

    @functools.cached_property
    def comment_lines(self) -> frozenset[int]:
        """Lines that hold a comment and nothing else (none when the text does not tokenize)."""
        found: set[int] = set()
        other: set[int] = set()
        skip = (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
        try:
            for tok in tokenize.generate_tokens(io.StringIO(self.text, newline=None).readline):
                if tok.type == tokenize.COMMENT:
                    found.add(tok.start[0])
                elif tok.type not in skip:
                    other.update(range(tok.start[0], tok.end[0] + 1))
        except (SyntaxError, tokenize.TokenError, ValueError):
            return frozenset()
        return frozenset(found - other)

    def encode(self, text: str) -> bytes | None:
        try:
            return text.encode(self.encoding)
        except UnicodeError:
            return None

    def line(self, lineno: int) -> str:
        """Line ``lineno`` (1-based) without its ending; empty past the end."""
        if not 1 <= lineno <= len(self.lines):
            return ""
        return self.lines[lineno - 1].rstrip("\r\n")

    def pos(self, lineno: int, col: int) -> int:
        """Index in :attr:`text` of ast position (1-based line, UTF-8 byte column)."""
        line = self.line(lineno)
        return self.starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        n: Any = node
        return self.pos(n.lineno, n.col_offset), self.pos(n.end_lineno, n.end_col_offset)

    def segment(self, node: ast.AST) -> str:
        a, b = self.span(node)
        return self.text[a:b]

    def starts_line(self, node: ast.AST, *, decorator: bool = False) -> bool:
        """Nothing but indentation (and the ``@`` of a decorator) before ``node`` on its line."""
        n: Any = node
        before = self.text[self.starts[n.lineno - 1] : self.pos(n.lineno, n.col_offset)]
        return re.fullmatch(r"[ \t\f]*@[ \t\f]*" if decorator else r"[ \t\f]*", before) is not None

    def ends_line(self, node: ast.AST) -> bool:
        """Nothing but blanks or a comment after ``node`` on its last line."""
        n: Any = node
        line = self.line(n.end_lineno)
        after = line[len(line.encode("utf-8")[: n.end_col_offset].decode("utf-8")) :].strip()
        return after == "" or after.startswith("#")


def walk_scope(node: ast.AST) -> Iterable[ast.AST]:
    """``node`` and its descendants, not entering nested functions, lambdas or classes."""
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, _SCOPES):
            yield from walk_scope(child)


def contains(node: ast.AST, kinds: tuple[type, ...]) -> bool:
    """``node`` holds a node of ``kinds`` in its own scope (see :func:`walk_scope`)."""
    return any(isinstance(n, kinds) for n in walk_scope(node))


def body_limit(node: Func) -> int:
    """Index of the first body statement that holds a ``return`` (the body's length if none)."""
    return next((i for i, s in enumerate(node.body) if contains(s, (ast.Return,))), len(node.body))


def name_words(name: str) -> list[str]:
    """The words of a test's name, lower case (``test_lastPage_empty``: last, page, empty)."""
    words = []
    for part in name.split("_"):
        for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+", part):
            w = w.lower()
            if re.fullmatch(r"[a-z][a-z0-9]*", w) and w not in ("test", "tests"):
                words.append(w)
    return words
