"""The built-in code index of a Python source tree.

It is the default indexer of the sanitized code graph (:mod:`bench_assets.inputs.graph`).

:func:`index_python_tree` turns every ``*.py`` file below a root into a graph of modules, classes,
functions and external modules joined by ``defines``, ``imports`` and ``calls`` edges. Sources are
only parsed with :mod:`ast`; nothing under the root is imported or executed, so the indexer is safe
to run in-process on untrusted repositories. The result depends only on the files' relative paths
and bytes, and every list in it is sorted, so the same tree always yields byte-identical canonical
JSON wherever it lives on disk.

Call edges are best effort: a callee is resolved through the names a scope can see (its own
definitions and imports, enclosing function scopes, the module), through attribute chains on
modules and classes (``util.helper()``, ``pkg.sub.f()``, ``Foo.make()``), through ``self``/``cls``
inside methods (including methods inherited from classes defined in the tree), and through
re-exports (``from .util import helper`` in a package ``__init__``). Calls that resolve to no
function or class in the tree are counted in ``stats["unresolved_calls"]`` and dropped.

Scrubbing (:func:`scrub_predicate`, :func:`check_graph_clean`) keeps benchmark-owned files out of
the graph and proves afterwards that no benchmark-owned marker made it in.

Run as ``python -m bench_assets.inputs.graph_index ROOT OUT_DIR [--marker M ...]`` to index
``ROOT``, write ``OUT_DIR/graph.json`` and print the stats as JSON, so the same indexer can run as
an external command inside the sandbox.

Why one file over 500 lines: the indexer is one cohesive unit (a scope-resolving AST walker,
its scrubbing and its command-line entry) that also runs standalone inside the sandbox as
``python -m bench_assets.inputs.graph_index``; it imports nothing else from wfbench on purpose.
"""

import argparse
import ast
import os
import stat
import sys
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_assets.kernel.errors import GraphScrubError
from bench_assets.kernel.fsutil import atomic_write_text
from bench_assets.kernel.hashing import canonical_json, sha256_text

SCHEMA = "wfbench.graph/v1"
INDEXER = "builtin-python/1"
GRAPH_FILE = "graph.json"

SkipFn = Callable[[str, bytes], bool]
"""``skip(relpath, content)``: True excludes the file from the index entirely."""

_SKIP_DIRS = frozenset({"__pycache__"})
# Methods whose first parameter is the class even without a ``classmethod`` decorator.
_IMPLICIT_CLASSMETHODS = frozenset({"__new__", "__init_subclass__", "__class_getitem__"})


@dataclass(frozen=True)
class _Ref:
    """What a name or expression stands for while resolving calls.

    ``kind`` is one of ``node`` (``target`` is a node id), ``instance`` (an instance of the class
    ``target``), ``module`` (an imported dotted module name, internal or not), ``from`` (the name
    ``attr`` imported from module ``target``, resolved lazily so re-exports can be followed),
    ``namespace`` (a directory prefix of indexed modules without its own ``__init__.py``),
    ``external`` (something outside the tree) or ``local`` (a parameter or assigned variable that
    hides outer names but cannot be resolved).
    """

    kind: str
    target: str = ""
    attr: str = ""


_LOCAL = _Ref("local")


@dataclass(frozen=True)
class _ModuleInfo:
    """A file of the tree and the module name derived from its path."""

    name: str
    path: str
    is_package: bool

    @property
    def node_id(self) -> str:
        """Id of the module's node."""
        return f"module:{self.name}"


@dataclass(eq=False)
class _Scope:
    """A module, class or function body and the names bound directly in it."""

    kind: str
    qual: str
    node_id: str
    module: _ModuleInfo
    parent: "_Scope | None"
    names: dict[str, _Ref] = field(default_factory=dict)


@dataclass(frozen=True)
class _ClassInfo:
    """A class body plus what is needed to resolve its bases later."""

    scope: _Scope
    bases: tuple[ast.expr, ...]
    outer: _Scope


@dataclass(frozen=True)
class _SourceFile:
    """A file admitted to the index, with its syntax tree (None when it failed to parse)."""

    module: _ModuleInfo
    tree: ast.Module | None


class _Indexer:
    """Builds one graph; holds the symbol tables shared by all modules of the tree."""

    def __init__(self, files: list[_SourceFile]) -> None:
        self.files = files
        self.nodes: dict[str, dict[str, Any]] = {}
        self.edges: set[tuple[str, str, str]] = set()
        self.module_names = {f.module.name for f in files}
        self.namespaces = {
            ".".join(parts[:i])
            for parts in (name.split(".") for name in self.module_names)
            for i in range(1, len(parts))
        } - self.module_names
        self.modules: dict[str, _Scope] = {}
        self.classes: dict[str, _ClassInfo] = {}
        self.bases_cache: dict[str, list[str]] = {}
        self.callsites: list[tuple[ast.Call, _Scope]] = []
        self.queue: deque[tuple[_Scope, list[ast.AST]]] = deque()
        self.unresolved_calls = 0
        self.unresolved_imports = 0

    def run(self) -> None:
        """Define every module's symbols, then resolve every recorded call site."""
        for src in self.files:
            mod = src.module
            node: dict[str, Any] = {
                "id": mod.node_id,
                "kind": "module",
                "name": mod.name,
                "path": mod.path,
                "line": 1,
            }
            if src.tree is None:
                node["parse_error"] = True
            self.nodes.setdefault(mod.node_id, node)
            scope = _Scope("module", mod.name, mod.node_id, mod, None)
            # Two files can map to one module name (``a.py`` and ``a/__init__.py``); the first in
            # path order owns the name so the choice never depends on walk order.
            self.modules.setdefault(mod.name, scope)
            if src.tree is not None:
                self.queue.append((scope, list(src.tree.body)))
        # Scopes are processed from a queue and the traversal below uses explicit stacks, so
        # deeply nested sources cannot exhaust the interpreter's recursion limit.
        while self.queue:
            scope, roots = self.queue.popleft()
            self._scan(scope, roots)
        for call, scope in self.callsites:
            ref = self._resolve_expr(call.func, scope)
            if (
                ref is not None
                and ref.kind == "node"
                and ref.target.startswith(("function:", "class:"))
            ):
                self.edges.add((scope.node_id, ref.target, "calls"))
            else:
                self.unresolved_calls += 1

    # -- definitions ------------------------------------------------------------------------

    def _add_node(self, node_id: str, kind: str, name: str, path: str, line: int) -> None:
        # First definition wins (e.g. a property getter over its setter), which is source order.
        self.nodes.setdefault(
            node_id, {"id": node_id, "kind": kind, "name": name, "path": path, "line": line}
        )

    def _scan(self, scope: _Scope, roots: list[ast.AST]) -> None:
        stores: set[str] = set()
        declared: set[str] = set()
        stack: list[ast.AST] = list(reversed(roots))
        while stack:
            node = stack.pop()
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self._define_function(node, scope)
                # Decorators, defaults and annotations are evaluated in the enclosing scope.
                header: list[ast.AST] = [*node.decorator_list, *node.args.defaults]
                header += [d for d in node.args.kw_defaults if d is not None]
                stack.extend(reversed(header))
                continue
            if isinstance(node, ast.ClassDef):
                self._define_class(node, scope)
                stack.extend(reversed([*node.decorator_list, *node.bases, *node.keywords]))
                continue
            if isinstance(node, ast.Import):
                self._import(node, scope)
            elif isinstance(node, ast.ImportFrom):
                self._import_from(node, scope)
            elif isinstance(node, ast.Global | ast.Nonlocal):
                declared.update(node.names)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                stores.add(node.id)
            elif isinstance(node, ast.Call):
                self.callsites.append((node, scope))
            if isinstance(node, ast.comprehension):
                # Comprehension targets live in the comprehension's own scope; they must not
                # hide a same-named function for the rest of the enclosing function.
                stack.extend(reversed([node.iter, *node.ifs]))
                continue
            stack.extend(reversed(list(ast.iter_child_nodes(node))))
        if scope.kind == "function":
            for name in stores - declared:
                scope.names.setdefault(name, _LOCAL)

    def _define_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, scope: _Scope) -> None:
        qual = f"{scope.qual}.{node.name}"
        fid = f"function:{qual}"
        self._add_node(fid, "function", node.name, scope.module.path, node.lineno)
        self.edges.add((scope.node_id, fid, "defines"))
        scope.names[node.name] = _Ref("node", fid)
        child = _Scope("function", qual, fid, scope.module, scope)
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        params = [*positional, *args.kwonlyargs]
        params += [a for a in (args.vararg, args.kwarg) if a is not None]
        for param in params:
            child.names[param.arg] = _LOCAL
        if scope.kind == "class" and positional:
            decorators = {d.id for d in node.decorator_list if isinstance(d, ast.Name)}
            if "staticmethod" not in decorators:
                is_cls = "classmethod" in decorators or node.name in _IMPLICIT_CLASSMETHODS
                child.names[positional[0].arg] = _Ref(
                    "node" if is_cls else "instance", scope.node_id
                )
        self.queue.append((child, list(node.body)))

    def _define_class(self, node: ast.ClassDef, scope: _Scope) -> None:
        qual = f"{scope.qual}.{node.name}"
        cid = f"class:{qual}"
        self._add_node(cid, "class", node.name, scope.module.path, node.lineno)
        self.edges.add((scope.node_id, cid, "defines"))
        scope.names[node.name] = _Ref("node", cid)
        child = _Scope("class", qual, cid, scope.module, scope)
        self.classes.setdefault(cid, _ClassInfo(child, tuple(node.bases), scope))
        self.queue.append((child, list(node.body)))

    # -- imports ----------------------------------------------------------------------------

    def _internal(self, dotted: str) -> _Ref | None:
        if dotted in self.module_names:
            return _Ref("node", f"module:{dotted}")
        if dotted in self.namespaces:
            return _Ref("namespace", dotted)
        return None

    def _import_edge(self, scope: _Scope, dotted: str, *, relative: bool) -> None:
        src = scope.module.node_id
        if dotted in self.module_names:
            dst = f"module:{dotted}"
        elif relative or dotted in self.namespaces or not dotted:
            # A relative import names a module of this tree; when it is not indexed (missing, or
            # scrubbed away) it must not be reported as an outside dependency.
            self.unresolved_imports += 1
            return
        else:
            dst = f"external:{dotted}"
            self.nodes.setdefault(dst, {"id": dst, "kind": "external", "name": dotted})
        if dst != src:
            self.edges.add((src, dst, "imports"))

    def _import(self, node: ast.Import, scope: _Scope) -> None:
        for alias in node.names:
            self._import_edge(scope, alias.name, relative=False)
            if alias.asname:
                scope.names[alias.asname] = _Ref("module", alias.name)
            else:
                top = alias.name.partition(".")[0]
                scope.names[top] = _Ref("module", top)

    def _from_base(self, node: ast.ImportFrom, scope: _Scope) -> str | None:
        if node.level == 0:
            return node.module or ""
        mod = scope.module
        parts = mod.name.split(".")
        package = parts if mod.is_package else parts[:-1]
        up = node.level - 1
        if up > len(package):
            return None
        base = package[: len(package) - up]
        if node.module:
            base += node.module.split(".")
        return ".".join(base)

    def _import_from(self, node: ast.ImportFrom, scope: _Scope) -> None:
        relative = node.level > 0
        base = self._from_base(node, scope)
        if base is None:
            self.unresolved_imports += 1
            for alias in node.names:
                if alias.name != "*":
                    scope.names[alias.asname or alias.name] = _LOCAL
            return
        for alias in node.names:
            if alias.name == "*":
                self._import_edge(scope, base, relative=relative)
                continue
            bound = alias.asname or alias.name
            sub = f"{base}.{alias.name}" if base else alias.name
            if sub in self.module_names or not base:
                self._import_edge(scope, sub, relative=relative)
                scope.names[bound] = _Ref("module", sub)
            else:
                self._import_edge(scope, base, relative=relative)
                scope.names[bound] = _Ref("from", base, alias.name)

    # -- resolution -------------------------------------------------------------------------

    def _deref(self, ref: _Ref | None) -> _Ref | None:
        """Follow import bindings until a node, instance, namespace or external is reached."""
        seen: set[tuple[str, str]] = set()
        while ref is not None:
            if ref.kind == "module":
                return self._internal(ref.target) or _Ref("external", ref.target)
            if ref.kind == "from":
                key = (ref.target, ref.attr)
                if key in seen:
                    return None
                seen.add(key)
                sub = f"{ref.target}.{ref.attr}"
                if sub in self.module_names or sub in self.namespaces:
                    return self._internal(sub)
                scope = self.modules.get(ref.target)
                if scope is None:
                    return None if ref.target in self.namespaces else _Ref("external", sub)
                ref = scope.names.get(ref.attr)
                continue
            if ref.kind == "local":
                return None
            return ref
        return None

    def _lookup(self, scope: _Scope, name: str) -> _Ref | None:
        current: _Scope | None = scope
        first = True
        while current is not None:
            # Class bodies are not visible from the functions nested in them.
            if first or current.kind != "class":
                ref = current.names.get(name)
                if ref is not None:
                    return self._deref(ref)
            first = False
            current = current.parent
        return None

    def _member(self, ref: _Ref, attr: str) -> _Ref | None:
        if ref.kind == "node" and ref.target.startswith("module:"):
            name = ref.target.removeprefix("module:")
            scope = self.modules.get(name)
            if scope is not None and attr in scope.names:
                return self._deref(scope.names[attr])
            return self._internal(f"{name}.{attr}")
        if ref.kind == "namespace":
            return self._internal(f"{ref.target}.{attr}")
        if ref.kind in ("node", "instance") and ref.target.startswith("class:"):
            return self._class_member(ref.target, attr)
        return None

    def _bases(self, cid: str) -> list[str]:
        cached = self.bases_cache.get(cid)
        if cached is not None:
            return cached
        # Mark in progress first: base expressions can refer back to this class (cycles).
        self.bases_cache[cid] = []
        info = self.classes.get(cid)
        found: list[str] = []
        if info is not None:
            for expr in info.bases:
                ref = self._resolve_expr(expr, info.outer)
                if ref is not None and ref.kind == "node" and ref.target.startswith("class:"):
                    found.append(ref.target)
        self.bases_cache[cid] = found
        return found

    def _class_member(self, cid: str, attr: str) -> _Ref | None:
        # Depth-first, left-to-right over bases: close enough to the MRO for best-effort calls.
        stack = [cid]
        seen: set[str] = set()
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            info = self.classes.get(current)
            if info is None:
                continue
            ref = info.scope.names.get(attr)
            if ref is not None:
                return self._deref(ref)
            stack.extend(reversed(self._bases(current)))
        return None

    def _resolve_expr(self, expr: ast.expr, scope: _Scope) -> _Ref | None:
        ops: list[str | None] = []
        current = expr
        while not isinstance(current, ast.Name):
            if isinstance(current, ast.Attribute):
                ops.append(current.attr)
                current = current.value
            elif isinstance(current, ast.Call):
                ops.append(None)
                current = current.func
            else:
                return None
        ref = self._lookup(scope, current.id)
        for op in reversed(ops):
            if ref is None:
                return None
            if op is None:
                is_class = ref.kind == "node" and ref.target.startswith("class:")
                ref = _Ref("instance", ref.target) if is_class else None
            else:
                ref = self._member(ref, op)
        return ref

    # -- output -----------------------------------------------------------------------------

    def graph(self, *, skipped_files: int) -> dict[str, Any]:
        nodes = [self.nodes[k] for k in sorted(self.nodes)]
        edges = [{"src": s, "dst": d, "kind": k} for s, d, k in sorted(self.edges)]

        def count_nodes(kind: str) -> int:
            return sum(1 for n in nodes if n["kind"] == kind)

        def count_edges(kind: str) -> int:
            return sum(1 for e in edges if e["kind"] == kind)

        stats = {
            "files": len(self.files),
            "modules": count_nodes("module"),
            "classes": count_nodes("class"),
            "functions": count_nodes("function"),
            "externals": count_nodes("external"),
            "imports": count_edges("imports"),
            "calls": count_edges("calls"),
            "defines": count_edges("defines"),
            "nodes": len(nodes),
            "edges": len(edges),
            "parse_errors": sum(1 for f in self.files if f.tree is None),
            "skipped_files": skipped_files,
            "unresolved_calls": self.unresolved_calls,
            "unresolved_imports": self.unresolved_imports,
        }
        return {
            "schema": SCHEMA,
            "indexer": INDEXER,
            "nodes": nodes,
            "edges": edges,
            "stats": stats,
        }


def _python_files(root: Path) -> list[str]:
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
        rel_dir = Path(dirpath).relative_to(root)
        for name in filenames:
            if name.endswith(".py") and len(name) > len(".py"):
                found.append((rel_dir / name).as_posix())
    return sorted(found)


def _module_info(relpath: str) -> _ModuleInfo:
    parts = relpath.removesuffix(".py").split("/")
    is_package = len(parts) > 1 and parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return _ModuleInfo(".".join(parts), relpath, is_package)


def _parse(content: bytes, relpath: str) -> ast.Module | None:
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return None
    # A leading BOM is valid Python source but not valid inside a str handed to ast.parse.
    text = text.removeprefix("\ufeff")
    try:
        # Compile-time warnings (invalid escapes and the like) must not depend on the caller's
        # warning filters: under "error" they would turn valid files into parse errors.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(text, filename=relpath)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def index_python_tree(root: Path, *, skip: SkipFn | None = None) -> dict[str, Any]:
    """Build the code index of every ``*.py`` file below ``root`` without executing any code.

    Folders whose name starts with ``.`` (``.git`` included) and ``__pycache__`` folders are not
    entered. Symlinks and other non-regular files are never read and count as skipped, so a link
    cannot pull content from outside the tree into the graph.

    Args:
        root: The directory to index. Only paths relative to it appear in the graph.
        skip: ``skip(relpath, content)`` returning True excludes that file entirely (it is counted
            in ``stats["skipped_files"]`` and nothing from it appears in the graph); this is how
            benchmark-owned files are scrubbed (see :func:`scrub_predicate`).

    Returns:
        A JSON-serializable graph: ``schema``, ``indexer``, ``nodes`` (sorted by id), ``edges``
        (sorted ``src``/``dst``/``kind`` triples) and integer ``stats``. Files that are not UTF-8
        or fail to parse still get a module node with ``"parse_error": true``.

    Raises:
        NotADirectoryError: ``root`` is not a directory.
    """
    root = Path(root)
    if not root.is_dir():
        raise NotADirectoryError(f"graph root is not a directory: {root}")
    files: list[_SourceFile] = []
    skipped = 0
    for relpath in _python_files(root):
        full = root / relpath
        try:
            mode = os.lstat(full).st_mode
        except OSError:
            skipped += 1
            continue
        if not stat.S_ISREG(mode):
            skipped += 1
            continue
        try:
            relpath.encode("utf-8")
        except UnicodeEncodeError:
            # Undecodable file names cannot be written to the UTF-8 graph file.
            skipped += 1
            continue
        try:
            content = full.read_bytes()
        except OSError:
            content = None
        if skip is not None and skip(relpath, content or b""):
            skipped += 1
            continue
        module = _module_info(relpath)
        tree = None if content is None else _parse(content, relpath)
        files.append(_SourceFile(module, tree))
    indexer = _Indexer(files)
    indexer.run()
    return indexer.graph(skipped_files=skipped)


def find_markers(text: str, markers: Iterable[str]) -> list[str]:
    """The markers that occur in ``text`` (case-sensitive), sorted and unique.

    Args:
        text: The text to search.
        markers: Candidate markers; empty strings are ignored (they would match everything).

    Returns:
        The distinct non-empty markers found in ``text``, sorted.
    """
    return sorted({m for m in markers if m and m in text})


def scrub_predicate(markers: Iterable[str]) -> SkipFn:
    """A ``skip`` function for :func:`index_python_tree` that drops benchmark-owned files.

    Args:
        markers: Strings that identify benchmark-owned content; empty strings are ignored.

    Returns:
        ``skip(relpath, content)``: True when the relative path, or the file's bytes decoded as
        UTF-8 with replacement characters, contains any marker.
    """
    wanted = tuple(sorted({m for m in markers if m}))

    def skip(relpath: str, content: bytes) -> bool:
        if not wanted:
            return False
        if any(m in relpath for m in wanted):
            return True
        text = content.decode("utf-8", errors="replace")
        return any(m in text for m in wanted)

    return skip


def _strings(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            for key, val in item.items():
                stack.append(key)
                stack.append(val)
        elif isinstance(item, list | tuple):
            stack.extend(item)


def check_graph_clean(graph: dict[str, Any], markers: Iterable[str]) -> None:
    """Prove that no benchmark-owned marker occurs anywhere in ``graph``.

    The canonical JSON text (what :func:`write_graph` stores) is searched, and so is every key and
    string value on its own, because JSON escaping can split a marker that contains quotes,
    backslashes or control characters.

    Args:
        graph: A graph as returned by :func:`index_python_tree` or an external indexer.
        markers: Benchmark-owned strings; empty strings are ignored.

    Raises:
        GraphScrubError: Some marker occurs; the message names only the markers, never the graph
            content around them.
    """
    wanted = [m for m in markers if m]
    found = set(find_markers(canonical_json(graph), wanted))
    for text in _strings(graph):
        found.update(find_markers(text, wanted))
    if found:
        raise GraphScrubError(
            "code graph contains benchmark-owned marker(s): " + ", ".join(sorted(found))
        )


def write_graph(graph: dict[str, Any], out_dir: Path) -> tuple[Path, str]:
    """Write ``out_dir/graph.json`` as canonical JSON plus a newline, atomically.

    Args:
        graph: The graph to store.
        out_dir: The folder to write into (created if missing).

    Returns:
        The written path and the sha256 of the written text.
    """
    text = canonical_json(graph) + "\n"
    path = atomic_write_text(Path(out_dir) / GRAPH_FILE, text)
    return path, sha256_text(text)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: index ROOT, write OUT_DIR/graph.json, print the stats as JSON.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` when None.

    Returns:
        0 on success, 1 when the graph still contains a marker, 2 when ROOT is not a directory.
    """
    parser = argparse.ArgumentParser(
        prog="python -m bench_assets.inputs.graph_index",
        description="Index the Python sources below ROOT into OUT_DIR/graph.json.",
    )
    parser.add_argument("root", type=Path, help="directory to index")
    parser.add_argument("out_dir", type=Path, help="directory that receives graph.json")
    parser.add_argument(
        "--marker",
        action="append",
        default=[],
        help="skip files whose path or bytes contain MARKER, then check the graph (repeatable)",
    )
    args = parser.parse_args(argv)
    markers: list[str] = list(args.marker)
    try:
        graph = index_python_tree(args.root, skip=scrub_predicate(markers) if markers else None)
        check_graph_clean(graph, markers)
    except NotADirectoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except GraphScrubError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    write_graph(graph, args.out_dir)
    print(canonical_json(graph["stats"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
