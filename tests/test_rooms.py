"""The rooms of ``bench_assets/`` and the imports allowed between them (docs/architecture.md).

Read from the source with ``ast`` (nothing is imported), every import counted: module level,
inside a function, or under ``TYPE_CHECKING``. A room may import itself and the rooms below it in
:data:`ROOMS`, never one above; so there is no circle between rooms either. The core (every room
below ``defs``) never imports Dagster.
"""

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "bench_assets"

ROOMS = [
    "kernel", "config", "sandbox", "scorers", "gate", "tasks", "inputs", "agents", "runner",
    "cells", "exports", "decision", "generation", "mining", "defs", "driver", "cli",
]  # fmt: skip
"""Bottom up: each room may import only the rooms before it (and itself)."""
CORE = ROOMS[: ROOMS.index("defs")]
TOP = {"definitions", "docker_launcher"}
"""bench_assets/definitions.py (the code location) and docker_launcher.py (the Docker deployment's
run launcher): what Dagster loads by module name from its configuration, above every room."""
FLAT = {"__init__.py", *(f"{m}.py" for m in TOP)}
MAX_MODULES = 12


@dataclass(frozen=True)
class Import:
    file: str  # repo-relative path
    line: int
    target: str  # dotted module (or package) name
    in_function: bool


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(name: str) -> str:
    """The longest prefix of ``name`` that is a module or package of bench_assets."""
    parts = name.split(".")
    while parts:
        path = ROOT.joinpath(*parts)
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return ".".join(parts)
        parts.pop()
    return name


def _imports(path: Path, as_file: str | None = None) -> list[Import]:
    """Every import in ``path`` (read as if it stood at ``as_file``, repo-relative, when given)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    rel = as_file or str(path.relative_to(ROOT))
    here = _module_name(ROOT / rel)
    is_pkg = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = here.split(".")[
                        : len(here.split(".")) - child.level + (1 if is_pkg else 0)
                    ]
                    base = ".".join(up + ([child.module] if child.module else []))
                names = [f"{base}.{a.name}" for a in child.names]
            for n in names:
                target = _resolve(n) if n.startswith("bench_assets") else n
                found.append(Import(rel, child.lineno, target, in_function))
            visit(child, nested)

    visit(tree, False)
    return found


def _room(dotted: str) -> str | None:
    """bench_assets.<room>.… → room; the package root itself → None (anyone may import it)."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else None


def _core_files() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


ALL_IMPORTS = [i for p in _core_files() for i in _imports(p)]


def test_every_module_sits_in_a_room() -> None:
    flat = sorted(p.name for p in PKG.glob("*.py") if p.name not in FLAT)
    assert not flat, f"modules outside every room (move each into its room): {flat}"
    folders = sorted(p.name for p in PKG.iterdir() if p.is_dir() and p.name != "__pycache__")
    unknown = [f for f in folders if f not in ROOMS]
    assert not unknown, f"folders that are no room of tests/test_rooms.py ROOMS: {unknown}"
    for room in ROOMS:
        assert (PKG / room / "__init__.py").is_file(), f"room {room}/ is not a package"


def test_rooms_hold_at_most_twelve_modules() -> None:
    sizes = {
        room: sorted(
            str(p.relative_to(PKG / room))
            for p in (PKG / room).rglob("*.py")
            if p.name != "__init__.py" and "__pycache__" not in p.parts
        )
        for room in ROOMS
    }
    big = {room: mods for room, mods in sizes.items() if len(mods) > MAX_MODULES}
    assert not big, f"rooms of more than {MAX_MODULES} modules (split the room): {big}"


def _running_up(imports: list[Import]) -> list[str]:
    wrong = []
    for i in imports:
        if not i.target.startswith("bench_assets"):
            continue
        src, dst = _room(_module_name(ROOT / i.file)), _room(i.target)
        if dst is None or src == dst or src in TOP:
            continue
        if src not in ROOMS or dst not in ROOMS or ROOMS.index(dst) > ROOMS.index(src):
            allowed = ", ".join(ROOMS[: ROOMS.index(src)]) if src in ROOMS else "none"
            wrong.append(f"{i.file}:{i.line} imports {i.target} ({src}/ may import: {allowed})")
    return wrong


def test_imports_only_go_down_the_rooms() -> None:
    wrong = _running_up(ALL_IMPORTS)
    assert not wrong, "imports that run back up the rooms:\n" + "\n".join(wrong)


def _defs_into_driver(imports: list[Import]) -> list[str]:
    return [
        f"{i.file}:{i.line} imports {i.target}"
        for i in imports
        if i.file.startswith("bench_assets/defs/") and _room(i.target) == "driver"
    ]


def test_defs_never_imports_the_driver() -> None:
    """The jobs whose ops drive Dagster are the driver's (docs/architecture.md, "The jobs that
    drive Dagster"): no module of defs/ imports the driver, at module level or inside an op."""
    wrong = _defs_into_driver(ALL_IMPORTS)
    assert not wrong, "defs/ imports the driver (define the job in driver/):\n" + "\n".join(wrong)


def test_the_core_never_imports_dagster() -> None:
    wrong = [
        f"{i.file}:{i.line} imports {i.target}"
        for i in ALL_IMPORTS
        if re.match(r"dagster(_\w+)?(\.|$)", i.target)
        and _room(_module_name(ROOT / i.file)) in CORE
    ]
    assert not wrong, "the core imports Dagster (move the code to defs/ or driver/):\n" + "\n".join(
        wrong
    )


@pytest.mark.parametrize("room", ROOMS)
def test_each_room_says_what_it_holds_and_what_it_may_import(room: str) -> None:
    doc = ast.get_docstring(ast.parse((PKG / room / "__init__.py").read_text())) or ""
    said = re.search(r"May import:(.*?)(?:\n\n|$)", doc, re.S)
    assert said, f"bench_assets/{room}/__init__.py: its docstring has no 'May import:' line"
    # The rooms named before the first ";" (what follows may explain, naming others).
    named = set(re.findall(r"\b[a-z]+\b", said.group(1).split(";")[0])) & set(ROOMS)
    above = named - set(ROOMS[: ROOMS.index(room)])
    assert not above, f"{room}/ says it may import {sorted(above)}, which stand above it"


def test_the_rule_sees_a_run_time_import_that_runs_back_up(tmp_path: Path) -> None:
    """The reader is not blind to imports inside functions, nor the rule to a room's order."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from bench_assets.cells.records import CellRecord\n")
    found = _imports(probe, as_file="bench_assets/kernel/probe.py")
    assert found == [Import("bench_assets/kernel/probe.py", 2, "bench_assets.cells.records", True)]
    assert _running_up(found) == [
        "bench_assets/kernel/probe.py:2 imports bench_assets.cells.records (kernel/ may import: )"
    ]
    down = _imports(probe, as_file="bench_assets/decision/probe.py")
    assert _running_up(down) == []
    # An op of defs/ importing the driver when its run starts is an import that runs back up.
    op = tmp_path / "op.py"
    op.write_text("def build(context):\n    from bench_assets.driver.inputs import x\n")
    up_call = _imports(op, as_file="bench_assets/defs/inputs.py")
    assert up_call == [Import("bench_assets/defs/inputs.py", 2, "bench_assets.driver.inputs", True)]
    assert _running_up(up_call) == [
        "bench_assets/defs/inputs.py:2 imports bench_assets.driver.inputs (defs/ may import: "
        + ", ".join(CORE)
        + ")"
    ]
    assert _defs_into_driver(up_call) == [
        "bench_assets/defs/inputs.py:2 imports bench_assets.driver.inputs"
    ]


def _table(heading: str) -> list[list[str]]:
    """The rows (cells split on ``|``) of the first table under ``heading`` in the architecture."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows[2:]]


def _ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _exists(path: str) -> bool:
    return (ROOT / path).exists() or (PKG / path).exists()


def test_where_a_change_belongs_names_files_that_sit_in_the_named_room() -> None:
    """The newcomer's test: each row's files are in the row's room; its see-also paths exist."""
    rows = _table("## Where a change belongs")
    assert len(rows) >= 20
    wrong = []
    for want, room_cell, files_cell, also in rows:
        (room,) = _ticked(room_cell)
        assert room.endswith("/") and room[:-1] in ROOMS, f"{want!r}: {room} is no room"
        files = _ticked(files_cell)
        assert files, f"{want!r}: names no file"
        wrong += [f"{want!r}: {room}{f}" for f in files if not (PKG / room / f).is_file()]
        paths = [t for t in _ticked(also) if re.fullmatch(r"[\w./-]+/[\w.-]*", t)]
        wrong += [f"{want!r}: see also {t}" for t in paths if not _exists(t)]
    assert not wrong, "rows naming a file that is not where they say:\n" + "\n".join(wrong)


def test_the_rooms_table_lists_the_core_rooms_in_order_with_their_files() -> None:
    rows = _table("## The rooms of the core")
    rooms = [_ticked(r[0].replace("**", ""))[0].rstrip("/") for r in rows]
    assert rooms == CORE
    missing = [
        f"{room}/{f}"
        for room, (_, holds, _) in zip(rooms, rows, strict=True)
        for f in _ticked(holds)
        if f.endswith(".py") and "/" not in f and not (PKG / room / f).is_file()
    ]
    assert not missing, f"the rooms table names files that are not in their room: {missing}"


def _circles(imports: list[Import]) -> list[list[str]]:
    """The import circles among bench_assets' modules (each a sorted list of dotted names), in a
    room or across rooms: every import counts, inside a function too (Tarjan's strongly connected
    components of the module graph)."""
    graph: dict[str, set[str]] = {}
    for i in imports:
        src = _module_name(ROOT / i.file)
        if i.target.startswith("bench_assets.") and i.target != src:
            graph.setdefault(src, set()).add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(found)


def _circle_report(circles: list[list[str]]) -> str:
    return "\n".join(" <-> ".join(c) for c in circles)


def test_no_import_circle_inside_a_room_or_between_rooms() -> None:
    """Modules of one room may import each other, but never in a loop: a circle inside a room
    (driver/runqueue <-> cellbatch, say, through imports inside functions) fails like one between
    rooms. Break it by moving what both need into a module below both."""
    circles = _circles(ALL_IMPORTS)
    assert not circles, "import circles (each: modules that import each other in a loop):\n" + (
        _circle_report(circles)
    )


def test_the_circle_rule_sees_a_circle_inside_one_room_through_a_function(tmp_path: Path) -> None:
    """Negative control: an import inside a function, from a module back to one that imports
    it, makes a circle; the rule names every module of it."""
    assert _circles([]) == []
    pair = [
        Import("bench_assets/kernel/a.py", 1, "bench_assets.kernel.b", False),
        Import("bench_assets/kernel/b.py", 3, "bench_assets.kernel.a", True),
    ]
    assert _circles(pair) == [["bench_assets.kernel.a", "bench_assets.kernel.b"]]
    assert _circles(pair[:1]) == []
    # Into the real tree: driver/runs.py (below the executors and the batch modules) importing
    # the executor inside a function closes runs -> runqueue -> cellbatch/inputs -> runs.
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from bench_assets.driver.runqueue import QueueExecutor\n")
    back = _imports(probe, as_file="bench_assets/driver/runs.py")
    assert back == [Import("bench_assets/driver/runs.py", 2, "bench_assets.driver.runqueue", True)]
    circles = _circles(ALL_IMPORTS + back)
    assert circles == [
        [
            "bench_assets.driver.cellbatch",
            "bench_assets.driver.inputs",
            "bench_assets.driver.runqueue",
            "bench_assets.driver.runs",
        ]
    ]
    assert _circle_report(circles) == (
        "bench_assets.driver.cellbatch <-> bench_assets.driver.inputs <-> "
        "bench_assets.driver.runqueue <-> bench_assets.driver.runs"
    )
