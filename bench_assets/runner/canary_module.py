"""What a test module holds, read for planting: its tests, which of them may be copied, the
literals a mutant may change in each, and the places a copy may go.

:class:`TestModule` reads one parsed test module; :class:`bench_assets.runner.canary_plant.Planter`
makes the canaries from that reading. What makes a test copyable and an ``assert`` a mutant's site
is the soundness rules of :mod:`bench_assets.runner.canary_plant`'s docstring.
"""

import ast
import builtins
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from bench_assets.runner.canary_literals import is_honest, is_literal, is_singleton
from bench_assets.runner.canary_source import Func, Source, body_limit, contains, name_words
from bench_assets.tasks.discovery import is_fixture, opts_out

_DECORATOR_OK = re.compile(
    r"(pytest\.)?mark\.\w+"
    r"|((unittest\.)?mock\.)?patch(\.object|\.dict|\.multiple)?\("
    r"|(hypothesis\.)?(given|settings|example)\("
)
_DEF = re.compile(r"(async\s+)?def\s+(\w+)")
_BUILTINS = frozenset(dir(builtins)) | {"__name__", "__file__", "__doc__"}


def _pytestmark(body: list[ast.stmt]) -> str:
    out = []
    for stmt in body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else []
        if isinstance(stmt, ast.AnnAssign):
            targets = [stmt.target]
        if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets):
            out.append(ast.unparse(stmt))
    return "\n".join(out)


def _marks_ok(text: str) -> bool:
    return not any(w in text for w in ("skip", "xfail", "expectedFailure", "marks="))


def _decorator_ok(dec: ast.expr) -> bool:
    text = ast.unparse(dec)
    return bool(_DECORATOR_OK.match(text)) and _marks_ok(text)


def _binds(node: ast.AST) -> set[str]:
    """Names a statement binds in the scope it runs in."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Lambda | ast.GeneratorExp | ast.ListComp | ast.SetComp | ast.DictComp):
        return set()
    if isinstance(node, ast.Import):
        return {a.asname or a.name.split(".")[0] for a in node.names}
    if isinstance(node, ast.ImportFrom):
        return {a.asname or a.name for a in node.names}
    out: set[str] = set()
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        out.add(node.id)
    if isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
        out.add(node.name)
    if isinstance(node, ast.MatchMapping) and node.rest:
        out.add(node.rest)
    for child in ast.iter_child_nodes(node):
        out |= _binds(child)
    return out


def _reads(exprs: Iterable[ast.AST]) -> set[str]:
    """Free names the expressions read (lambda parameters and comprehension targets left out)."""
    loaded: set[str] = set()
    local: set[str] = set()
    for e in exprs:
        for n in ast.walk(e):
            if isinstance(n, ast.Name):
                (loaded if isinstance(n.ctx, ast.Load) else local).add(n.id)
            elif isinstance(n, ast.arg):
                local.add(n.arg)
    return loaded - local


def _deftime_names(node: Func, lazy_annotations: bool) -> set[str]:
    a = node.args
    exprs: list[ast.AST] = [*node.decorator_list, *a.defaults]
    exprs += [d for d in a.kw_defaults if d is not None]
    if not lazy_annotations:
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
        exprs += [p.annotation for p in params if p is not None and p.annotation is not None]
        if node.returns is not None:
            exprs.append(node.returns)
    return _reads(exprs)


def avoid_name(entry: str) -> str:
    return entry.rsplit("::", 1)[-1].split("[", 1)[0]


@dataclass
class TestDef:
    node: Func
    cls: ast.ClassDef | None
    cls_index: int
    """Index of ``cls`` among the module's top-level classes (-1 at top level)."""
    first: int
    """First line (its first decorator)."""
    copyable: bool
    unittest: bool
    sites: list[ast.expr] = field(default_factory=list)
    """Literals a mutant may change."""


@dataclass
class Gap:
    cls: ast.ClassDef | None
    line: int
    """Insert before this line (1-based; one past the end appends)."""
    after: bool
    """After the container's last test: the blank lines go before the canary."""


class TestModule:
    """One test module's tests and the places a copy of one may go (see the module docstring)."""

    def __init__(self, rel: str, src: Source, tree: ast.Module, avoid: Collection[str]) -> None:
        self.rel = rel
        self.src = src
        self.tree = tree
        self.classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
        self.lazy_annotations = any(
            isinstance(s, ast.ImportFrom)
            and s.module == "__future__"
            and any(a.name == "annotations" for a in s.names)
            for s in tree.body
        )
        self.no_mutants = "xfail" in _pytestmark(tree.body)
        self.taken = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", src.text))
        self.taken |= {avoid_name(a) for a in avoid}
        bound = set().union(*(_binds(s) for s in tree.body)) if tree.body else set()
        star = any(
            isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)
            for n in ast.walk(tree)
        )
        self.len_ok = not star and "len" not in bound
        self._bound_cache: dict[int, dict[str, list[int]]] = {}
        self.tests: list[TestDef] = []
        self._collect()
        self.words = list(dict.fromkeys(w for t in self.tests for w in name_words(t.node.name)))

    # -- collection

    def _collect(self) -> None:
        for node in self.tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if node.name.startswith("test") and not is_fixture(node):
                    ok = not self._rebound(node, self.tree.body)
                    self.tests.append(self._test(node, None, -1, ok, False))
        subclassed = {
            ast.unparse(b).rsplit(".", 1)[-1]
            for c in ast.walk(self.tree)
            if isinstance(c, ast.ClassDef)
            for b in c.bases
        }
        for index, cls in enumerate(self.classes):
            unittest = any(ast.unparse(b).endswith("TestCase") for b in cls.bases)
            if not (cls.name.startswith("Test") or unittest) or opts_out(cls.body):
                continue
            if not unittest and any(
                isinstance(n, ast.FunctionDef) and n.name == "__init__" for n in cls.body
            ):
                continue
            ok = (
                cls.name not in subclassed
                and all(_decorator_ok(d) for d in cls.decorator_list)
                and _marks_ok(_pytestmark(cls.body))
            )
            if unittest:
                defined = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
                unittest = not defined & {"assertEqual", "assertEquals", "assertIs"}
            for node in cls.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    if node.name.startswith("test") and not is_fixture(node):
                        live = ok and not self._rebound(node, cls.body)
                        self.tests.append(self._test(node, cls, index, live, unittest))

    def _test(
        self, node: Func, cls: ast.ClassDef | None, index: int, ok: bool, unittest: bool
    ) -> TestDef:
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        head: Any = node.decorator_list[0] if node.decorator_list else node
        ok = (
            ok
            and self.src.starts_line(head, decorator=bool(node.decorator_list))
            and self.src.ends_line(node)
            and self._name_at(node) is not None
            and all(_decorator_ok(d) for d in node.decorator_list)
            and not any(contains(s, (ast.Yield, ast.YieldFrom)) for s in node.body)
        )
        t = TestDef(node, cls, index, first, ok, unittest)
        if ok and not self.no_mutants:
            t.sites = self._sites(t)
        return t

    def _name_at(self, node: Func) -> int | None:
        """Where the name of ``def`` stands in the text (None: not where the tree says)."""
        at = self.src.pos(node.lineno, node.col_offset)
        m = _DEF.match(self.src.text, at)
        return m.start(2) if m is not None and m.group(2) == node.name else None

    def _sites(self, t: TestDef) -> list[ast.expr]:
        node = t.node
        self_name = node.args.args[0].arg if node.args.args else None
        sites: list[ast.expr] = []
        for stmt in node.body[: body_limit(node)]:
            if isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Compare):
                cmp = stmt.test
                if len(cmp.ops) != 1:
                    continue
                left, right = cmp.left, cmp.comparators[0]
                if isinstance(cmp.ops[0], ast.Eq):
                    for lit, other in ((right, left), (left, right)):
                        if is_literal(lit, top=True) and is_honest(other):
                            sites.append(lit)
                            break
                elif isinstance(cmp.ops[0], ast.Is) and is_singleton(right) and is_honest(left):
                    sites.append(right)
            elif (
                t.unittest
                and self_name is not None
                and isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Call)
            ):
                call = stmt.value
                func = call.func
                if not (
                    isinstance(func, ast.Attribute)
                    and isinstance(func.value, ast.Name)
                    and func.value.id == self_name
                    and 2 <= len(call.args) <= 3
                    and all(k.arg == "msg" for k in call.keywords)
                    and not any(isinstance(a, ast.Starred) for a in call.args)
                ):
                    continue
                a, b = call.args[0], call.args[1]
                if func.attr in ("assertEqual", "assertEquals"):
                    for lit, other in ((b, a), (a, b)):
                        if is_literal(lit, top=True) and is_honest(other):
                            sites.append(lit)
                            break
                elif func.attr == "assertIs" and is_singleton(b) and is_honest(a):
                    sites.append(b)
        return sites

    # -- gaps

    def _gaps(self, cls: ast.ClassDef | None) -> list[Gap]:
        tests = sorted((t for t in self.tests if t.cls is cls), key=lambda t: t.first)
        gaps = []
        for t in tests:
            line = t.first
            while line - 1 > 2 and line - 1 in self.src.comment_lines:
                line -= 1  # the comments just above a test belong to it
            gaps.append(Gap(cls, line, after=False))
        if tests:
            last = max(tests, key=lambda t: t.node.end_lineno or 0)
            gaps.append(Gap(cls, (last.node.end_lineno or last.first) + 1, after=True))
        return gaps

    def _bindings(self, body: list[ast.stmt]) -> dict[str, list[int]]:
        """For each name the statements of ``body`` bind: the last line of each, in order."""
        key = id(body)
        if key not in self._bound_cache:
            found: dict[str, list[int]] = {}
            for stmt in body:
                for name in _binds(stmt):
                    found.setdefault(name, []).append(stmt.end_lineno or stmt.lineno)
            self._bound_cache[key] = found
        return self._bound_cache[key]

    def _rebound(self, node: Func, body: list[ast.stmt]) -> bool:
        """A later statement of ``body`` binds the test's name again: pytest runs that one."""
        return self._bindings(body).get(node.name, [0])[-1] > (node.end_lineno or node.lineno)

    def _bound_at(self, gap: Gap, name: str) -> bool:
        """``name`` is bound where ``gap`` is (a class body sees the module as it was above it)."""
        module = self._bindings(self.tree.body)
        limit = gap.line if gap.cls is None else self._first_line(gap.cls)
        if any(module.get(n, [limit])[0] < limit for n in (name, "*")):
            return True
        return (
            gap.cls is not None and self._bindings(gap.cls.body).get(name, [gap.line])[0] < gap.line
        )

    @staticmethod
    def _first_line(node: ast.ClassDef | Func) -> int:
        return min([node.lineno, *(d.lineno for d in node.decorator_list)])

    def _gaps_for(self, t: TestDef) -> list[Gap]:
        """The gaps a copy of ``t`` may go to: where every name its ``def`` line reads is bound."""
        need = _deftime_names(t.node, self.lazy_annotations) - _BUILTINS
        return [g for g in self._gaps(t.cls) if all(self._bound_at(g, n) for n in need)]
