"""The trusted test runner: the program the harness starts inside the sandbox to run pytest.

It is harness-owned and never imported by the harness itself: the grader copies this file into a
read-only folder outside the worktree and runs ``<harness python> -I <folder>/pytest_runner.py``
with the run's specification on standard input (JSON). It imports only the standard library and
pytest, and it must keep doing so: nothing of ``bench_assets`` exists inside the sandbox.

What it does, in order, before any file of the worktree can run:

1. reads the specification from stdin (so nothing about the run is in ``argv`` or the
   environment, and verify and the oracle look the same from outside);
2. imports pytest, its default plugins and the modules it needs (pluggy, iniconfig, packaging),
   and a few common standard modules, while the worktree is not on ``sys.path`` — isolated mode
   (``-I``) already dropped the script folder, the current folder, ``PYTHON*`` variables and the
   user site, so a worktree ``pytest.py``, ``sitecustomize.py``, ``usercustomize.py`` or
   ``*.pth`` is never loaded;
3. switches bytecode caches off (``sys.pycache_prefix`` names a folder that does not exist) and
   builds ``sys.path`` as: standard library, then the oracle stage, then the task's import paths
   (the code under test), then site-packages — the worktree is never ahead of the runner or the
   standard library;
4. makes imports **source-only** outside the interpreter's own folders: the folders on
   ``sys.path`` at this point that are outside the workspace (standard library, ``lib-dynload``,
   site-packages, the task environment) are *trusted* and keep Python's default loaders; every
   other import location — the workspace, the oracle stage, anything added later (``/tmp``, a
   folder a test creates) — is served by a path hook placed ahead of the default ones whose
   ``FileFinder`` knows only ``SourceFileLoader`` and ``.py``. So a sourceless ``mod.pyc``, an
   extension module (``.so``, ``.abi3.so``, ``.cpython-*.so``, which would otherwise even win over
   a ``mod.py`` beside it) or a ``.zip``/``.egg`` appended to ``sys.path`` is never imported from
   there: what runs is the source the recorded patch shows. Packages and namespace packages work
   as before. A task can opt out with the optional spec key ``compiled_imports: true``;
5. opens the report file (outside the worktree), remembers a nonce that exists only in this
   process's memory, and takes the **watch**: the identity of every attribute of every loaded
   ``pytest``, ``_pytest.*`` and ``pluggy.*`` module and of every entry in the ``__dict__`` of every
   class defined there — and for functions, class/static methods, properties, cached properties
   and cached functions also the code object, defaults, keyword defaults and closure cells they
   run, and for classes their type and ``__mro__``; the same, for what *runs* only (callables and
   descriptors, not data), over the modules that turn a test file into code — ``builtins`` (which
   may gain names but not change one), ``ast``, ``io``, ``pathlib``, ``importlib`` and its
   bootstrap modules; and the same over this runner's own module and classes;
6. runs ``pytest.main`` with the harness's options: the given paths, ``--rootdir``, the ini file
   the harness chose (``-c``), ``--confcutdir``, importlib import mode, no cache, no colour.

Before pytest starts, the runner writes ``READY`` and a digest of the nonce as the first bytes of
its stdout: a pipe the code under test cannot take back, so the harness can tell "the runner
itself failed" (a harness failure) from anything the worktree did afterwards.

The report is JSON lines, each carrying the nonce: one ``test`` line per test (its
outcome from the setup, call and teardown reports), ``collect-error`` and ``deselected`` lines,
and an ``end`` line with pytest's exit status and ``tampered``: every sign that code under test
changed the machinery a test outcome flows through (the harness fails the phase on any). No
``end`` line means the process stopped early. What counts as tampering (each entry says what it
found, structural findings first, per-test ones summarised last):

* **plugins, by phase.** While pytest configures itself (from the reporter's registration to
  the first ``pytest_collectstart``): a plugin registered while code under test is on the stack
  (a frame from a workspace file other than a ``conftest.py``, from outside the trusted folders,
  or from ``exec``'d code). Once collection started: anything but a ``conftest.py`` module being
  imported by pytest's own ``_importconftest`` (it records the module in
  ``pluginmanager._conftest_plugins`` just before registering it; the runner also requires that
  function's original code on the stack with the module as its ``mod``), one of pytest's builtin
  ``_pytest.*`` modules (its file inside the imported ``_pytest`` package), or an instance of a
  class of pytest's own registered with no code under test on the stack (``legacypath-pytester``)
  — so a module named in a test module's ``pytest_plugins`` counts. Once collection finished:
  any registration at all;
* **the hook table, at the freeze.** For each plugin pytest announces
  (``pytest_plugin_registered``, replayed for those registered before the reporter) the runner
  records its ``HookImpl`` objects right then: plugin, function, bound ``__func__``, code object,
  wrapper/hookwrapper/tryfirst/trylast flags, argument names, options. At
  ``pytest_collection_finish`` every implementation in every hook caller must be one of those, as
  recorded (a swapped ``HookImpl.function`` or a direct ``_hookimpls`` edit is found here, even if
  done during collection), none may be missing, every registered plugin must have been announced
  (``pluggy.PluginManager.register`` called directly is not), every plugin registered when pytest
  was about to load the first conftest must still be (unregistering pytest's ``python`` plugin
  makes tests pass without running), ``_inner_hookexec`` must still be pluggy's ``_multicall``
  (``add_hookcall_monitoring``/``enable_tracing`` replace it; allowed only under ``--debug``),
  every hook caller must be a ``HookCaller`` whose executor is the plugin manager's
  ``_hookexec``, no instance attribute of the plugin manager, the config or the session may hide
  a method of its class (a session whose ``gethookproxy`` hands out a forging relay), the
  reporter's hooks must point at its own bound methods, and every collected test module must
  have been imported by pytest itself (its ``AssertionRewritingHook``, or ``SourceFileLoader``
  without rewriting) from the collected file — not by a finder ahead of pytest's;
* **the freeze, at the end.** At the freeze the runner also keeps the registered plugins, the
  whole hook table (callers, executors, specs, implementation rows), the plugin manager's and the
  config's own attributes, and per collected test item its class, function and code. At the end
  any difference is reported. When each test runs (``pytest_runtest_call``, before pytest
  calls it) its item must still have the class, function and code it had at the freeze, no
  instance attribute hiding a method (nor the session), and hooks reached through pytest's own
  relay (``item.ihook`` a ``HookRelay`` or pytest's ``FSHookProxy``);
* **the watch** (step 5), at the end: any attribute changed, added or removed, any class whose
  type or bases changed, any function whose code, defaults or closure changed, any watched module
  replaced in ``sys.modules`` — except a submodule of pytest or pluggy imported lazily, and a few
  named entries pytest itself rebinds during a run (``_LEGITIMATELY_REBOUND``,
  ``_SET_ON_ANY_CLASS``, each with its reason), which must even so hold functions or properties
  whose code is pytest's, or plain data;
* **the reporter itself**: still registered with its own hooks, the same class, the same instance
  attributes (same objects); this module's globals (``_write``, ``_dumps``, ``_quote``, …) and
  classes are in the watch. The end line is written by ``_end_line``, bound as a default argument
  of ``pytest_sessionfinish`` when the class was defined, never through ``Reporter._emit``;
* **outcomes**: a setup, call or teardown phase reported ``passed`` although the ``CallInfo``
  pytest made for it held an exception (noted by the reporter's own ``tryfirst`` wrapper of
  ``pytest_runtest_makereport`` before other wrappers run, checked against the report pytest
  logs) — this also catches a force-pass ``conftest.py`` when runner files were not restored;
* **hooks into the interpreter**: a ``sys`` or ``threading`` trace or profile function, a
  garbage-collector callback (``gc.callbacks``), and on Python >= 3.12 any ``sys.monitoring``
  tool id in use — checked as each collector starts and reports (a profiler that rewrites test
  modules as they are imported and removes itself before the tests run), at the freeze, after
  every test and at the end. The runner installs none, and pytest installs none in a normal run;
* **non-source code** (unless ``compiled_imports``), at the end: a loaded module whose loader is
  a sourceless, extension or zip loader (or whose file has such a suffix) in an untrusted folder
  (a ``.pyc`` loaded by hand with ``SourcelessFileLoader``), the source-only path hook removed, a
  non-source finder cached for an untrusted folder, or an executable memory mapping of a file in
  the workspace or the stage (a shared library loaded with ``ctypes``).

Cost, measured on a 2-core machine shared with other work (best of several runs; 2-3x that
while both cores are saturated): the watch takes 10-15 ms, the freeze 1-3 ms, the end-of-run
checks 10-25 ms (the garbage collector is paused while they run), each test tens of
microseconds.

Why one file over 1,000 lines: it is copied alone into the sandbox and may import nothing of
``bench_assets``, so every check it makes has to live here.

Not covered: code written against this runner *specifically* — finding the reporter in memory to
read its nonce and write a report of its own (then exiting), clearing what it found, or replacing
the function that writes the end line (its default argument) — and anything done and undone
between two checks (a change made and reverted while one test runs, a thread flipping a report
between its creation and its logging). An audit hook (``sys.addaudithook``) cannot be listed or
removed, so only what it does can be seen. Code that answers the tests instead of fixing the
code (values equal to anything, answers read from the calling assert) changes no machinery at
all. Python code that loads compiled code by hand without leaving a module in ``sys.modules`` is
not seen either, but it is Python source the recorded patch shows. The harness's tamper canaries
(tests that must fail) are the defence for all of these.

Why one file over 500 lines: this is the only harness file that exists inside the sandbox. The
grader copies it alone into a read-only folder and runs it with ``python -I``; nothing of
``bench_assets`` is importable there, and a second file would have to be copied, trusted and
imported before the watch is taken, while the worktree's code could already shadow it.
"""

import contextlib
import functools
import gc
import hashlib
import json
import json.encoder
import os
import sys
import threading
import types
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from itertools import repeat
from operator import attrgetter, is_
from typing import Any

_write = os.write
_dumps = json.dumps
_quote = json.encoder.encode_basestring_ascii
"""A builtin (C) function: it cannot be patched in place, unlike ``json.dumps``."""

READY = "pytest_runner ready "
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
MAX_TAMPERED = 50
"""Entries kept in the end line's ``tampered`` list (the first ones; one is enough to fail)."""

WATCHED_PREFIXES = ("_pytest.", "pluggy.", "pytest.")
WATCHED_NAMES = ("pytest", "_pytest", "pluggy")
COMPILE_PATH = (
    # What turns a test file into code: pytest's importlib mode and assertion rewriter read the
    # file (pathlib, io), parse and compile it (ast, builtins.compile) and import it (importlib).
    "builtins",
    "ast",
    "io",
    "pathlib",
    "importlib",
    "importlib.util",
    "importlib.machinery",
    "_frozen_importlib",
    "_frozen_importlib_external",
)
"""Standard modules watched for what *runs* (functions, classes, descriptors), not for their
data (``importlib.invalidate_caches`` bumps ``_NamespacePath._epoch``, for one)."""
ADDITIONS_ALLOWED = ("builtins",)
"""Watched modules where code under test may add names (``gettext.install`` adds ``_``); a name
that already existed must still not change."""
_HEAPTYPE = 1 << 9
"""``Py_TPFLAGS_HEAPTYPE``: a class whose ``__dict__`` can change (static types cannot)."""

_LEGITIMATELY_REBOUND = {
    # _pytest.legacypath.pytest_load_initial_conftests monkeypatches the legacy py.path API onto
    # these classes at start-up (undone at unconfigure, after the end line is written).
    "_pytest.cacheprovider.Cache.makedir": "legacypath: Cache.makedir()",
    "_pytest.fixtures.FixtureRequest.fspath": "legacypath: FixtureRequest.fspath",
    "_pytest.terminal.TerminalReporter.startdir": "legacypath: TerminalReporter.startdir",
    "_pytest.config.Config.invocation_dir": "legacypath: Config.invocation_dir",
    "_pytest.config.Config.rootdir": "legacypath: Config.rootdir",
    "_pytest.config.Config.inifile": "legacypath: Config.inifile",
    "_pytest.config.Config._getini_unknown_type": "legacypath: the 'pathlist' ini type",
    "_pytest.main.Session.startdir": "legacypath: Session.startdir",
    "_pytest.nodes.Node.fspath": "legacypath: Node.fspath",
    # _pytest.debugging.pytest_configure points pytestPDB at the run's config and plugin manager.
    "_pytest.debugging.pytestPDB._config": "debugging: the run's config",
    "_pytest.debugging.pytestPDB._pluginmanager": "debugging: the run's plugin manager",
}
"""Watched entries pytest itself rebinds during a normal run, each with why. Even these must
hold a value pytest made: functions and properties whose code is in the ``_pytest`` package, or
plain data (never a callable or descriptor from anywhere else)."""

_SET_ON_ANY_CLASS = {
    # _pytest.nodes.NodeMeta: set to True on a node class the first time it warns that the class
    # inherits from both Item and Collector (pytest's own Function and FunctionDefinition do).
    "_pytest_diamond_inheritance_warning_shown": True,
}
"""Class attributes pytest adds lazily to node classes, with the only value it ever sets."""


def _read_spec() -> dict:  # type: ignore[type-arg]
    raw = sys.stdin.buffer.read()
    spec = json.loads(raw.decode("utf-8"))
    if not isinstance(spec, dict):
        raise SystemExit("wfbench runner: the specification must be a JSON object")
    return spec


COMMON_STDLIB = (
    "argparse",
    "collections",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "enum",
    "fractions",
    "functools",
    "io",
    "itertools",
    "math",
    "pprint",
    "random",
    "string",
    "textwrap",
    "typing",
    "unittest",
)
"""Imported up front with their bytecode caches: once bytecode caches are switched off for the
rest of the run, a module imported later is compiled from source (correct, but slower)."""


def _preimport() -> None:
    import _pytest.config

    # pytest.main imports these itself (debugging/argcomplete/faulthandler plugins): load them now,
    # while their bytecode caches may still be read.
    names = ["pluggy", "iniconfig", "packaging.version", "_pytest._argcomplete", "pdb"]
    names += ["faulthandler", "readline", *COMMON_STDLIB]
    names += [f"_pytest.{p}" for p in _pytest.config.default_plugins]
    for name in names:
        try:
            __import__(name)
        except ImportError:
            pass


def _set_path(stage: str, import_paths: list[str]) -> None:
    import site

    site_dirs = set(site.getsitepackages())
    first_site = next((i for i, p in enumerate(sys.path) if p in site_dirs), len(sys.path))
    stdlib = sys.path[:first_site]
    rest = sys.path[first_site:]
    sys.path[:] = [*stdlib, stage, *import_paths, *rest]


# --------------------------------------------------------------------------------------------
# where code may come from


def _under(path: str, roots: Iterable[str]) -> bool:
    for root in roots:
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return True
    return False


class Trust:
    """Which folders keep Python's default import loaders, and which are source-only.

    ``protected``: the workspace and the oracle stage (always source-only). ``trusted``: the
    folders on ``sys.path`` when the runner took over that are outside ``protected`` — the
    standard library, ``lib-dynload``, site-packages, the task environment. Everything else
    (the workspace, ``/tmp``, a folder created later) is untrusted."""

    def __init__(self, protected: list[str], runner_file: str) -> None:
        self.protected = tuple(os.path.realpath(p) for p in protected)
        trusted = []
        for entry in sys.path:
            real = os.path.realpath(entry or ".")
            if not _under(real, self.protected):
                trusted.append(real)
        self.trusted = tuple(trusted)
        self.runner_file = runner_file

    def untrusted(self, path: str) -> bool:
        """Whether an import location (a ``sys.path`` entry, a package folder) is source-only."""
        real = os.path.realpath(path or ".")
        return _under(real, self.protected) or not _under(real, self.trusted)

    def code_under_test(self, filename: str) -> bool:
        """Whether a code object's file is code the agent could have written (not pytest, the
        standard library, the task environment, this runner, or a template ``conftest.py``)."""
        if filename.startswith("<frozen "):
            return False
        if filename == self.runner_file:
            return False
        if filename.startswith("<"):
            return True  # exec'd or compiled at run time
        if _under(filename, self.protected):
            return os.path.basename(filename) != "conftest.py"
        return not _under(filename, self.trusted)


def _source_only_hook(trust: Trust) -> Callable[[str], object]:
    """A ``sys.path_hooks`` entry: untrusted locations get a source-only ``FileFinder``; others
    fall through to Python's default hooks (``ImportError`` = "not mine")."""
    import importlib.machinery as machinery

    details = (machinery.SourceFileLoader, list(machinery.SOURCE_SUFFIXES))
    finder = machinery.FileFinder

    def wfbench_source_only(path: str) -> object:
        if not trust.untrusted(path):
            raise ImportError("trusted location: default loaders")
        # No directory check: for a .zip/.egg (or any file) the finder finds nothing, instead of
        # letting zipimport serve it.
        return finder(path, details)

    return wfbench_source_only


def _install_source_only(trust: Trust) -> Callable[[str], object]:
    hook = _source_only_hook(trust)
    sys.path_hooks.insert(0, hook)  # type: ignore[arg-type]
    for key in list(sys.path_importer_cache):
        if trust.untrusted(key):
            del sys.path_importer_cache[key]
    return hook


def _non_source_problems(trust: Trust, hook: object, protected: tuple[str, ...]) -> list[str]:
    """Signs that code which is not Python source was loaded from an untrusted location."""
    import importlib.machinery as machinery
    import zipimport

    out = []
    if hook not in sys.path_hooks:
        out.append("sys.path_hooks: the source-only import hook was removed")
    suffixes = tuple(machinery.SOURCE_SUFFIXES)
    for key, found in list(sys.path_importer_cache.items()):
        if found is None or not trust.untrusted(key):
            continue
        loaders = getattr(found, "_loaders", None) or [("", None)]
        source = all(s in suffixes and c is machinery.SourceFileLoader for s, c in loaders)
        if type(found) is not machinery.FileFinder or not source:
            out.append(f"sys.path_importer_cache: non-source finder for {key}")
    compiled = (*machinery.BYTECODE_SUFFIXES, *machinery.EXTENSION_SUFFIXES)
    verdicts: dict[str, bool] = {}
    loaders = (machinery.SourcelessFileLoader, machinery.ExtensionFileLoader, zipimport.zipimporter)
    for name, mod in list(sys.modules.items()):
        file = getattr(mod, "__file__", None)
        if not isinstance(file, str):
            continue
        # Python source under any file name (a script loaded with SourceFileLoader) is fine.
        if isinstance(getattr(mod, "__loader__", None), loaders) or file.endswith(compiled):
            folder = os.path.dirname(file)
            if folder not in verdicts:
                verdicts[folder] = trust.untrusted(folder)
            if verdicts[folder]:
                out.append(f"module {name} loaded from a non-source file {file}")
    out += _mapped_from(protected, trust.trusted)
    return out


_SYSTEM_CODE = ("/usr", "/lib", "/lib64", "/bin", "/sbin")
"""Read-only system trees in the sandbox: the shared libraries the interpreter links."""


def _mapped_from(roots: tuple[str, ...], trusted: tuple[str, ...] = ()) -> list[str]:
    """Executable memory mappings of code that is not the system's or the interpreter's: a file
    under ``roots`` (a shared library loaded by ctypes from the workspace), or anywhere else
    outside the system trees and the trusted folders — a library written to ``/tmp`` or home
    first, an anonymous ``memfd``, a deleted file."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    out = []
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    prefixes |= {os.path.realpath(p) for p in prefixes}
    prefixes.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    allowed = (*_SYSTEM_CODE, *trusted, *(p for p in prefixes if p and p != "/"))
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) != 6 or "x" not in parts[1]:
            continue
        path = parts[5]
        if path.startswith("[") and path.endswith("]"):
            continue  # [vdso], [vsyscall]: the kernel's own
        if _under(path, roots) or not path.startswith("/") or not _under(path, allowed):
            entry = f"executable mapping of {path}"
            if entry not in out:
                out.append(entry)
    return out


# --------------------------------------------------------------------------------------------
# the watch: identities of everything in pytest's and pluggy's modules and classes

_EMPTY_CELL = object()
_NO_CLOSURE = object()
_ABSENT = object()
_LRU = type(functools.lru_cache(None)(lambda: None))


def _runs(value: object) -> tuple[object, ...]:
    """What calling ``value`` runs beyond its own identity, flat (empty for plain data): code
    objects, defaults, closure cell contents, wrapped functions."""
    kind = type(value)
    if kind is types.FunctionType:
        fn: Any = value
        closure = fn.__closure__
        if closure is None:
            return (fn.__code__, fn.__defaults__, fn.__kwdefaults__, _NO_CLOSURE)
        cells = []
        for cell in closure:
            try:
                cells.append(cell.cell_contents)
            except ValueError:
                cells.append(_EMPTY_CELL)
        return (fn.__code__, fn.__defaults__, fn.__kwdefaults__, *cells)
    if kind is classmethod or kind is staticmethod:
        inner: Any = value
        return (inner.__func__, *_runs(inner.__func__))
    if kind is property:
        prop: Any = value
        f, s, d = prop.fget, prop.fset, prop.fdel
        return (f, *_runs(f), s, *_runs(s), d, *_runs(d))
    if kind is functools.cached_property:
        cached: Any = value
        return (cached.func, *_runs(cached.func))
    if kind is _LRU:
        wrapped = getattr(value, "__wrapped__", None)
        return (wrapped, *_runs(wrapped))
    return ()


_FUNCTION_PARTS = (
    attrgetter("__code__"),
    attrgetter("__defaults__"),
    attrgetter("__kwdefaults__"),
)
_RUNNABLE_TYPES = frozenset(
    {types.FunctionType, classmethod, staticmethod, property, functools.cached_property, _LRU}
)
"""The kinds of value :func:`_runs` looks inside."""


def _ids(objects: tuple[object, ...]) -> tuple[int, ...]:
    """Identities to compare in C; the objects themselves are kept alive beside them, so an id
    cannot be reused by a replacement."""
    return tuple(map(id, objects))


def _same(a: object, b: object) -> bool:
    """Identity, element by element for (nested) tuples of identities."""
    if a is b:
        return True
    if type(a) is tuple and type(b) is tuple and len(a) == len(b):
        return all(_same(x, y) for x, y in zip(a, b, strict=True))
    return False


class Watched:
    """One module or class: its ``__dict__`` as it was, and what its functions ran.

    Comparing is two-speed: a check done in C over every entry and every plain function's code,
    defaults and keyword defaults (``map`` over ``operator.is_``) plus a look inside the values
    with more to them (closures, properties, class/static methods, cached functions), and the
    per-entry walk only for a container where that check fails."""

    __slots__ = (
        "label",
        "container",
        "saved",
        "keys",
        "values",
        "runs",
        "plain_keys",
        "functions",
        "function_parts",
        "shape",
        "additions_ok",
        "code_only",
    )

    def __init__(
        self, label: str, container: object, additions_ok: bool = False, code_only: bool = False
    ) -> None:
        self.label = label
        self.additions_ok = additions_ok
        self.code_only = code_only
        self.container = container
        self.saved = dict(vars(container))
        self.keys = tuple(self.saved)
        self.values = tuple(self.saved.values())
        plain = {
            k: v
            for k, v in self.saved.items()
            if type(v) is types.FunctionType and v.__closure__ is None
        }
        self.plain_keys = tuple(plain)
        self.functions = tuple(plain.values())
        self.function_parts = tuple(tuple(map(get, self.functions)) for get in _FUNCTION_PARTS)
        self.runs = {
            k: (r, _ids(r))
            for k, v in self.saved.items()
            if k not in plain and type(v) in _RUNNABLE_TYPES and (r := _runs(v))
        }
        self.shape = _shape(container)

    def unchanged(self) -> bool:
        """The fast check: nothing in this container changed (False: look closer)."""
        current = vars(self.container)
        if len(current) != len(self.keys) and not self.additions_ok:
            return False
        if not all(map(is_, map(current.get, self.keys, repeat(_ABSENT)), self.values)):
            return False
        for get, parts in zip(_FUNCTION_PARTS, self.function_parts, strict=True):
            if not all(map(is_, map(get, self.functions), parts)):
                return False
        saved = self.saved
        if any(_ids(_runs(saved[k])) != ids for k, (_r, ids) in self.runs.items()):
            return False
        return all(map(is_, _shape(self.container), self.shape))

    def differences(self, allowed: Callable[[str, str, object], bool]) -> list[str]:
        if self.unchanged():
            return []
        out = []
        current = vars(self.container)
        if not all(map(is_, _shape(self.container), self.shape)):
            out.append(f"{self.label} (type or bases)")
        if current.keys() != self.saved.keys():
            for key in sorted(current.keys() ^ self.saved.keys()):
                if self.additions_ok and key not in self.saved:
                    continue
                value = self.saved.get(key, current.get(key))
                if self.code_only and not _runnable(value):
                    continue
                if not allowed(self.label, key, current.get(key, _ABSENT)):
                    state = "added" if key in current else "removed"
                    out.append(f"{self.label}.{key} ({state})")
        for key, value in self.saved.items():
            now = current.get(key, _ABSENT)
            if now is _ABSENT:
                continue
            if now is not value:
                if self.code_only and not _runnable(value) and not _runnable(now):
                    continue
                if not allowed(self.label, key, now):
                    out.append(f"{self.label}.{key}")
                continue
            runs = self.runs.get(key)
            if runs is not None and _ids(_runs(value)) != runs[1]:
                out.append(f"{self.label}.{key} (code, defaults or closure)")
        for get, parts in zip(_FUNCTION_PARTS, self.function_parts, strict=True):
            if all(map(is_, map(get, self.functions), parts)):
                continue
            for key, fn, part in zip(self.plain_keys, self.functions, parts, strict=True):
                if get(fn) is not part:
                    out.append(f"{self.label}.{key} (code, defaults or closure)")
        return list(dict.fromkeys(out))


def _runnable(value: object) -> bool:
    return callable(value) or hasattr(type(value), "__get__")


def _shape(container: object) -> tuple[object, ...]:
    """A class's metaclass and MRO (a new tuple whenever ``__bases__`` is assigned), a module's
    type."""
    if isinstance(container, type):
        return (type(container), container.__mro__)
    return (type(container),)


def watched_module(name: str) -> bool:
    return name in WATCHED_NAMES or name.startswith(WATCHED_PREFIXES) or name in COMPILE_PATH


def _classes_in(value: type, seen: set[int]) -> Iterator[type]:
    """``value`` and the classes nested in it, if defined in a watched module and mutable."""
    if id(value) in seen or not value.__flags__ & _HEAPTYPE:
        return
    if not watched_module(str(getattr(value, "__module__", ""))):
        return
    seen.add(id(value))
    yield value
    for inner in list(vars(value).values()):
        if isinstance(inner, type):
            yield from _classes_in(inner, seen)


def take_watch(extra: Iterable[tuple[str, object]] = ()) -> list[Watched]:
    """The watch over every loaded pytest/pluggy module and class, plus ``extra`` containers."""
    out = []
    seen: set[int] = set()
    modules = sorted((n, m) for n, m in list(sys.modules.items()) if watched_module(n))
    for name, mod in modules:
        if not isinstance(mod, types.ModuleType) or id(mod) in seen:
            continue  # (importlib._bootstrap_external is _frozen_importlib_external)
        seen.add(id(mod))
        code_only = name in COMPILE_PATH
        out.append(Watched(name, mod, name in ADDITIONS_ALLOWED, code_only))
        for value in list(vars(mod).values()):
            if not isinstance(value, type):
                continue
            for cls in _classes_in(value, seen):
                label = f"{cls.__module__}.{cls.__qualname__}"
                out.append(Watched(label, cls, code_only=cls.__module__ in COMPILE_PATH))
    for label, container in extra:
        out.append(Watched(label, container))
    return out


def _pytest_made_value(value: object, dirs: tuple[str, ...]) -> bool:
    """A function or property whose code is in pytest's or pluggy's package, or plain data."""
    if type(value) is property:
        prop: Any = value
        functions = [f for f in (prop.fget, prop.fset, prop.fdel) if f is not None]
    elif type(value) is types.FunctionType:
        functions = [value]
    else:
        return not callable(value) and not hasattr(type(value), "__get__")
    return all(
        type(f) is types.FunctionType and _under(f.__code__.co_filename, dirs) for f in functions
    )


def watch_problems(
    watch: list[Watched], modules: Mapping[str, object], dirs: tuple[str, ...]
) -> list[str]:
    """Every difference between the watch and now, but what pytest itself legitimately rebinds."""

    def allowed(label: str, key: str, value: object) -> bool:
        if isinstance(value, types.ModuleType) and value.__name__ == f"{label}.{key}":
            # A submodule imported lazily sets itself on its package: pytest's own only.
            file = getattr(value, "__file__", None)
            return isinstance(file, str) and _under(file, dirs)
        if key in _SET_ON_ANY_CLASS:
            return value is _SET_ON_ANY_CLASS[key]
        if f"{label}.{key}" in _LEGITIMATELY_REBOUND:
            return value is not _ABSENT and _pytest_made_value(value, dirs)
        return False

    out = []
    for name, mod in modules.items():
        if sys.modules.get(name) is not mod:
            out.append(f"sys.modules[{name!r}] replaced")
    for entry in watch:
        out += entry.differences(allowed)
    return out


def tracing_problems() -> list[str]:
    """Trace/profile functions, monitoring tools and garbage-collector callbacks installed: hooks
    that run code under test at arbitrary points of pytest's own work (the runner installs none)."""
    out = []
    if sys.gettrace() is not None:
        out.append("a trace function is installed (sys.settrace)")
    if sys.getprofile() is not None:
        out.append("a profile function is installed (sys.setprofile)")
    if getattr(threading, "_trace_hook", None) is not None:
        out.append("a trace function is installed for new threads (threading.settrace)")
    if getattr(threading, "_profile_hook", None) is not None:
        out.append("a profile function is installed for new threads (threading.setprofile)")
    if gc.callbacks:
        out.append("a garbage-collector callback is installed (gc.callbacks)")
    monitoring: Any = getattr(sys, "monitoring", None)
    if monitoring is not None:
        for tool in range(6):
            name = monitoring.get_tool(tool)
            if name is not None:
                out.append(f"sys.monitoring tool {tool} in use ({name})")
    return out


# --------------------------------------------------------------------------------------------
# the frozen hook table


def _hookimpl_row(impl: Any) -> tuple[object, ...]:
    fn = impl.function
    return (
        impl,
        type(impl),
        impl.plugin,
        fn,
        getattr(fn, "__func__", None),
        getattr(fn, "__code__", None),
        impl.wrapper,
        impl.hookwrapper,
        impl.tryfirst,
        impl.trylast,
        impl.argnames,
        impl.kwargnames,
        impl.opts,
        impl.plugin_name,
    )


def _hook_table(pm: Any) -> dict[str, tuple[object, ...]]:
    table: dict[str, tuple[object, ...]] = {}
    for name, caller in list(vars(pm.hook).items()):
        impls = getattr(caller, "_hookimpls", None)
        rows = tuple(_hookimpl_row(i) for i in list(impls)) if isinstance(impls, list) else None
        table[name] = (
            caller,
            type(caller),
            getattr(caller, "_hookexec", None),
            getattr(caller, "spec", None),
            getattr(caller, "_call_history", None),
            impls,
            rows,
        )
    return table


def _item_row(item: Any, compute: bool = False) -> tuple[object, ...]:
    """What a test item runs: its class, its function (unbound) and that function's code."""
    obj = vars(item).get("_obj")
    if obj is None and compute:
        obj = item.obj  # pytest computes it lazily (a unittest case resets it after teardown)
    func = getattr(obj, "__func__", obj)
    return (type(item), func, getattr(func, "__code__", None))


class Frozen:
    """The plugin manager as it was when collection finished."""

    def __init__(self, config: Any, items: list[Any]) -> None:
        pm = config.pluginmanager
        self.pm = pm
        self.config = config
        self.relay = pm.hook
        self.plugins = dict(pm._name2plugin)
        self.pm_vars = dict(vars(pm))
        self.config_vars = dict(vars(config))
        self.hooks = _hook_table(pm)
        self.items = {id(item): (item, _item_row(item)) for item in items}

    def differences(self) -> list[str]:
        pm, out = self.pm, []
        if self.config.pluginmanager is not pm or self.config.hook is not self.relay:
            out.append("config.pluginmanager or config.hook replaced")
        if pm.hook is not self.relay:
            out.append("pluginmanager.hook replaced")
        now = dict(pm._name2plugin)
        for name in sorted(now.keys() | self.plugins.keys()):
            if now.get(name, _ABSENT) is not self.plugins.get(name, _ABSENT):
                out.append(f"plugin {name!r} registered, unregistered or replaced")
        out += _dict_changes("pluginmanager", self.pm_vars, vars(pm))
        out += _dict_changes("config", self.config_vars, vars(self.config))
        table = _hook_table(pm)
        for name in sorted(table.keys() | self.hooks.keys()):
            if name not in table or name not in self.hooks:
                out.append(f"hook {name} added or removed")
            elif not _same(table[name], self.hooks[name]):
                out.append(f"hook {name}: implementations or caller changed")
        return out

    def item_changed(self, item: Any) -> bool:
        known = self.items.get(id(item))
        if known is None or known[0] is not item:
            return True
        row = known[1]
        if row[1] is None:  # nothing to run was known at the freeze (not a python function)
            return type(item) is not row[0]
        return not _same(_item_row(item, compute=True), row)


def _dict_changes(label: str, saved: dict[str, object], current: dict[str, object]) -> list[str]:
    out = []
    for key in sorted(saved.keys() | current.keys()):
        if current.get(key, _ABSENT) is not saved.get(key, _ABSENT):
            out.append(f"{label}.{key}")
    return out


_METHOD_TYPES = (types.FunctionType, classmethod, staticmethod)


def shadowed(label: str, obj: object) -> list[str]:
    """Instance attributes of ``obj`` that hide a method of its class: a session whose
    ``gethookproxy`` hands out a forging relay, an item whose ``runtest`` does nothing."""
    out = []
    mro = type(obj).__mro__
    for key in list(getattr(obj, "__dict__", {})):
        for klass in mro:
            value = vars(klass).get(key, _ABSENT)
            if value is not _ABSENT:
                if isinstance(value, _METHOD_TYPES):
                    out.append(f"{label}.{key} hides the method of {type(obj).__name__}")
                break
    return out


def _test_module_problems(items: list[Any], loaders: tuple[type, ...]) -> list[str]:
    """Test modules pytest did not import itself from the collected file: a loader ahead of its
    assertion rewriter (which could compile the file differently, e.g. without its asserts), or
    a module whose code came from another file."""
    out: list[str] = []
    seen: set[int] = set()
    for item in items:
        try:
            mod = getattr(item, "module", None)
        except Exception:
            mod = None
        if mod is None or id(mod) in seen:
            continue
        seen.add(id(mod))
        name = getattr(mod, "__name__", "?")
        loader = getattr(mod, "__loader__", None)
        spec_loader = getattr(getattr(mod, "__spec__", None), "loader", None)
        if type(loader) not in loaders or spec_loader is not loader:
            out.append(f"test module {name} was imported by {type(loader).__name__}, not pytest")
        file, path = getattr(mod, "__file__", None), str(getattr(item, "path", ""))
        if not isinstance(file, str) or os.path.realpath(file) != os.path.realpath(path):
            out.append(f"test module {name} was imported from {file}, not {path}")
    return out


Announced = dict[int, tuple[object, dict[int, tuple[str, tuple[object, ...]]]]]
"""Per plugin pytest announced (by id): the plugin, and its hook implementations (by id) as they
were right after it was registered: hook name and row."""


def impls_of(pm: Any, plugin: object) -> dict[int, tuple[str, tuple[object, ...]]]:
    """A plugin's hook implementations in ``pm``'s hook table, as rows."""
    out = {}
    for name, caller in list(vars(pm.hook).items()):
        for impl in list(getattr(caller, "_hookimpls", ())):
            if impl.plugin is plugin:
                out[id(impl)] = (name, _hookimpl_row(impl))
    return out


def _freeze_problems(
    config: Any, originals: dict[str, object], announced: Announced, early: dict[str, object]
) -> list[str]:
    """What must already hold when collection finishes (before any test runs): every hook
    implementation is exactly what its plugin's registration made, and nothing ran hooks another
    way."""
    pm, out = config.pluginmanager, []
    inner = vars(pm).get("_inner_hookexec")
    if inner is not originals["multicall"] and not config.getoption("debug", None):
        out.append("pluginmanager._inner_hookexec replaced (hook-call monitoring or tracing)")
    out += shadowed("pluginmanager", pm) + shadowed("config", config)
    registered = dict(pm._name2plugin)
    for name, plugin in early.items():
        if registered.get(name, _ABSENT) is not plugin:
            out.append(f"plugin {name!r} unregistered, blocked or replaced")
    present = {id(p) for p in registered.values() if p is not None}
    for name, plugin in registered.items():
        if plugin is not None and announced.get(id(plugin), (None,))[0] is not plugin:
            out.append(f"plugin {name!r} registered without pytest announcing it")
    hookexec = originals["hookexec"]
    seen: set[int] = set()
    for hook, caller in list(vars(pm.hook).items()):
        if type(caller) is not originals["caller_type"]:
            out.append(f"hook {hook}: not a pluggy HookCaller")
            continue
        bound: Any = caller._hookexec
        owner, function = getattr(bound, "__self__", None), getattr(bound, "__func__", None)
        if owner is not pm or function is not hookexec:
            out.append(f"hook {hook}: executor is not the plugin manager's")
        for impl in list(caller._hookimpls):
            known = announced.get(id(impl.plugin))
            row = known[1].get(id(impl)) if known and known[0] is impl.plugin else None
            if row is None or row[0] != hook or not _same(row[1], _hookimpl_row(impl)):
                out.append(f"hook {hook}: implementation of {impl.plugin_name!r} changed or added")
            seen.add(id(impl))
    for plugin, rows in announced.values():
        if id(plugin) not in present:
            continue
        for impl_id, (hook_name, _row) in rows.items():
            if impl_id not in seen:
                out.append(f"hook {hook_name}: an implementation was removed")
    return out


# --------------------------------------------------------------------------------------------
# the reporter


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The garbage collector paused while the runner snapshots or compares (as it was after)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _end_line(fd: int, nonce: str, exitstatus: int, tampered: list[str]) -> None:
    """Write the end line with functions bound at import time (never ``Reporter._emit``)."""
    items = ", ".join(_quote(str(t)) for t in tampered[:MAX_TAMPERED])
    line = (
        f'{{"n": {_quote(nonce)}, "kind": "end", "exitstatus": {int(exitstatus)}, '
        f'"tampered": [{items}]}}\n'
    )
    _write(fd, line.encode("ascii"))


def _hookimpl(**opts: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """pluggy's marker, without importing pytest at module level."""

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.pytest_impl = dict(opts)  # type: ignore[attr-defined]
        return fn

    return mark


class Reporter:
    """The pytest plugin that writes the per-test report (registered by object, not by name)."""

    def __init__(self, fd: int, nonce: str, id_prefix: str, trust: Trust) -> None:
        import importlib.machinery

        import _pytest.assertion.rewrite
        import _pytest.config
        import _pytest.main
        import pluggy
        import pluggy._manager

        self._fd = fd
        self._nonce = nonce
        self._prefix = id_prefix
        self._trust = trust
        self._phases: dict[str, dict[str, str]] = {}
        self._raised: set[tuple[str, str]] = set()
        self._found: list[str] = []
        self._per_test: dict[str, list[str]] = {}
        self._announced: Announced = {}
        self._early: dict[str, object] = {}
        self._stage = "configure"
        self._frozen: list[Frozen] = []
        self._source_hook: list[object] = []
        self._pytest_dir = os.path.dirname(os.path.dirname(_pytest.config.__file__ or "/"))
        self._package_dirs = (self._pytest_dir, os.path.dirname(pluggy.__file__ or "/"))
        self._originals: dict[str, object] = {
            "multicall": vars(pluggy._manager)["_multicall"],
            "hookexec": vars(pluggy._manager.PluginManager)["_hookexec"],
            "caller_type": pluggy.HookCaller,
            "importconftest": _pytest.config.PytestPluginManager._importconftest.__code__,
            "loaders": (
                _pytest.assertion.rewrite.AssertionRewritingHook,
                importlib.machinery.SourceFileLoader,
            ),
            "relays": (pluggy.HookRelay, _pytest.main.FSHookProxy),
        }
        module = sys.modules[__name__]
        self._modules = {n: m for n, m in sys.modules.items() if watched_module(n)}
        # This module's globals and its classes: the checks' own code.
        own: list[tuple[str, object]] = [("runner", module)]
        own += [
            (f"runner.{k}", v)
            for k, v in vars(module).items()
            if isinstance(v, type) and v.__module__ == __name__
        ]
        with _no_gc():
            self._watch = take_watch(own)
        self._keys = frozenset([*vars(self), "_keys", "_kept"])
        self._kept = {k: v for k, v in vars(self).items() if k != "_stage"}

    # ---- what the reporter checks

    def _flag_test(self, problem: str, nodeid: str) -> None:
        self._per_test.setdefault(problem, []).append(self._id(nodeid))

    def _per_test_problems(self) -> list[str]:
        out = []
        for problem, ids in self._per_test.items():
            more = f" (+{len(ids) - 3} more)" if len(ids) > 3 else ""
            out.append(f"{problem}: {', '.join(ids[:3])}{more}")
        return out

    def _flag(self, *problems: str) -> None:
        for p in problems:
            if p not in self._found:
                self._found.append(p)

    def _self_problems(self) -> list[str]:
        out = []
        now = vars(self)
        if frozenset(now) != self._keys or any(now.get(k) is not v for k, v in self._kept.items()):
            out.append("the reporter's attributes were changed")
        if type(self) is not Reporter:
            out.append("the reporter's class was replaced")
        return out

    def _own_hooks_problems(self, pm: Any) -> list[str]:
        out = []
        if not any(p is self for p in pm._name2plugin.values()):
            return ["the reporter was unregistered"]
        for name, fn in vars(Reporter).items():
            if not name.startswith("pytest_"):
                continue
            caller = vars(pm.hook).get(name)
            impls = [i for i in getattr(caller, "_hookimpls", ()) if i.plugin is self]
            if len(impls) != 1:
                out.append(f"the reporter's {name} hook was removed")
                continue
            bound = impls[0].function
            owner, function = getattr(bound, "__self__", None), getattr(bound, "__func__", None)
            if owner is not self or function is not fn:
                out.append(f"the reporter's {name} hook was replaced")
        return out

    def _registration_problem(self, plugin: object, name: str, manager: Any) -> str | None:
        label = f"plugin registered by code under test: {name or type(plugin).__name__}"
        if self._stage == "frozen":
            return f"{label} (after collection)"
        if self._stage == "collect":
            if self._builtin_plugin(plugin) or self._conftest(plugin, manager):
                return None
            if type(plugin).__module__.startswith("_pytest.") and self._pytest_made(plugin):
                return None
            return f"{label} (during collection; neither a conftest nor pytest's own)"
        frame: Any = sys._getframe(1)
        while frame is not None:
            if self._trust.code_under_test(frame.f_code.co_filename):
                return f"{label} (from {frame.f_code.co_filename})"
            frame = frame.f_back
        return None

    def _pytest_made(self, plugin: object) -> bool:
        """An instance of a class of pytest's own (e.g. the ``legacypath-pytester`` plugin pytest
        registers when ``pytester`` is), registered with no code under test on the stack."""
        file = getattr(sys.modules.get(type(plugin).__module__), "__file__", None)
        if not isinstance(file, str) or not _under(file, (self._pytest_dir,)):
            return False
        frame: Any = sys._getframe(2)
        while frame is not None:
            if self._trust.code_under_test(frame.f_code.co_filename):
                return False
            frame = frame.f_back
        return True

    def _builtin_plugin(self, plugin: object) -> bool:
        if not isinstance(plugin, types.ModuleType) or not plugin.__name__.startswith("_pytest."):
            return False
        file = getattr(plugin, "__file__", None)
        if not isinstance(file, str) or sys.modules.get(plugin.__name__) is not plugin:
            return False
        return _under(file, (self._pytest_dir,))

    def _conftest(self, plugin: object, manager: Any) -> bool:
        """A conftest module pytest itself is importing: recorded in ``_conftest_plugins`` by
        ``_importconftest`` (its original code, on the stack, with this module as ``mod``)."""
        if not isinstance(plugin, types.ModuleType) or plugin not in manager._conftest_plugins:
            return False
        file = getattr(plugin, "__file__", None)
        if not isinstance(file, str) or os.path.basename(file) != "conftest.py":
            return False
        frame: Any = sys._getframe(1)
        while frame is not None:
            if frame.f_code is self._originals["importconftest"]:
                return frame.f_locals.get("mod") is plugin
            frame = frame.f_back
        return False

    # ---- hooks

    def _emit(self, **fields: object) -> None:
        line = _dumps({"n": self._nonce, **fields}, ensure_ascii=True) + "\n"
        _write(self._fd, line.encode("ascii"))

    def _id(self, nodeid: str) -> str:
        if self._prefix and nodeid.startswith(self._prefix):
            return nodeid[len(self._prefix) :]
        return nodeid

    def pytest_plugin_registered(self, plugin: object, plugin_name: str, manager: Any) -> None:
        self._announced[id(plugin)] = (plugin, impls_of(manager, plugin))
        problem = self._registration_problem(plugin, plugin_name, manager)
        if problem:
            self._flag(problem)

    @_hookimpl(tryfirst=True)
    def pytest_load_initial_conftests(self, early_config: Any) -> None:
        """The plugins as pytest configured them, before the first file of the worktree runs."""
        self._early.update(early_config.pluginmanager._name2plugin)

    def pytest_collectstart(self) -> None:
        if self._stage == "configure":
            self._stage = "collect"
        self._flag(*tracing_problems())

    def pytest_collection_finish(self, session: Any) -> None:
        self._freeze(session, list(getattr(session, "items", [])))

    def _freeze(self, session: Any, items: list[Any]) -> None:
        if self._frozen:
            return
        self._stage = "frozen"
        config = session.config
        self._flag(*tracing_problems())
        self._flag(*shadowed("session", session))
        self._flag(*_freeze_problems(config, self._originals, self._announced, self._early))
        self._flag(*self._own_hooks_problems(config.pluginmanager))
        self._flag(*_test_module_problems(items, self._originals["loaders"]))  # type: ignore[arg-type]
        self._frozen.append(Frozen(config, items))

    def pytest_collectreport(self, report: object) -> None:
        self._flag(*tracing_problems())  # (a profiler active while test modules are imported)
        if getattr(report, "failed", False):
            self._emit(kind="collect-error", id=self._id(str(getattr(report, "nodeid", ""))))

    def pytest_deselected(self, items: list[object]) -> None:
        for item in items:
            self._emit(kind="deselected", id=self._id(str(getattr(item, "nodeid", ""))))

    @_hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: Any) -> None:
        if not self._frozen:
            self._freeze(item.session, [])
            self._flag("a test ran before collection finished")
        elif self._frozen[0].item_changed(item):
            self._flag_test("the test function was replaced after collection", str(item.nodeid))
        self._flag(*shadowed("session", item.session), *shadowed("item", item))
        if type(item.ihook) not in self._originals["relays"]:  # type: ignore[operator]
            self._flag_test("the test's hooks were relayed by something else", str(item.nodeid))

    @_hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: Any, call: Any) -> Generator[None, Any, Any]:
        """Note, before any other wrapper runs, whether this phase raised (see logreport)."""
        if getattr(call, "excinfo", None) is not None:
            self._raised.add((str(item.nodeid), str(call.when)))
        return (yield)

    def pytest_runtest_logreport(self, report: object) -> None:
        nodeid = str(getattr(report, "nodeid", ""))
        when = str(getattr(report, "when", ""))
        outcome = str(getattr(report, "outcome", ""))
        raised = (nodeid, when) in self._raised
        self._raised.discard((nodeid, when))
        if raised and outcome == "passed" and not hasattr(report, "wasxfail"):
            self._flag_test("raised but was reported passed", f"{nodeid} ({when})")
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if outcome == "skipped" else "xpassed"
        phases = self._phases.setdefault(nodeid, {})
        if phases.get(when) != "failed":  # a failed subtest (same id and phase) stays failed
            phases[when] = outcome

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        phases = self._phases.pop(nodeid, {})
        setup, call, teardown = (phases.get(w) for w in ("setup", "call", "teardown"))
        if setup == "failed" or teardown == "failed":
            outcome = "error"
        elif setup in ("skipped", "xfailed", "xpassed"):
            outcome = setup
        elif call is None:
            outcome = "error"
        else:
            outcome = call
        if outcome not in OUTCOMES:
            outcome = "error"
        self._flag(*tracing_problems())
        self._emit(kind="test", id=self._id(nodeid), outcome=outcome)

    @_hookimpl(trylast=True)
    def pytest_sessionfinish(
        self, session: Any, exitstatus: object, _end: Callable[..., None] = _end_line
    ) -> None:
        found = list(self._found)
        try:
            with _no_gc():  # (a collection pass would double the time)
                found += self._self_problems()
                found += watch_problems(self._watch, self._modules, self._package_dirs)
                if self._frozen:
                    found += self._frozen[0].differences()
                    found += self._own_hooks_problems(self._frozen[0].pm)
                found += tracing_problems()
                if self._source_hook:
                    found += _non_source_problems(
                        self._trust, self._source_hook[0], self._trust.protected
                    )
                found += self._per_test_problems()
        except Exception as exc:  # the checks themselves were sabotaged
            found.append(f"the runner's checks failed: {type(exc).__name__}")
        unique = list(dict.fromkeys(found))
        _end(self._fd, self._nonce, int(exitstatus), unique)  # type: ignore[call-overload]


def main() -> int:
    """Run pytest as the specification on stdin says; return its exit status."""
    spec = _read_spec()
    sys.dont_write_bytecode = True
    _preimport()
    import pytest

    # From here on no bytecode cache is read or written (the prefix names a folder that does not
    # exist): a __pycache__ the agent left in the worktree, for a module or for pytest's rewritten
    # conftest/test files, never runs; what runs is the source the recorded patch shows.
    here = os.path.abspath(__file__)
    sys.pycache_prefix = os.path.join(os.path.dirname(here), "no-bytecode")
    stage = str(spec["stage"])
    _set_path(stage, [str(p) for p in spec["import_paths"]])
    trust = Trust([str(spec["rootdir"]), stage], here)
    hook = None if spec.get("compiled_imports", False) else _install_source_only(trust)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(str(spec["report"]), flags, 0o600)
    reporter = Reporter(fd, str(spec["nonce"]), str(spec.get("id_prefix", "")), trust)
    if hook is not None:
        reporter._source_hook.append(hook)
    digest = hashlib.sha256(str(spec.pop("nonce")).encode()).hexdigest()[:32]
    _write(1, f"{READY}{digest}\n".encode("ascii"))
    args = [
        *[str(a) for a in spec["args"]],
        "--rootdir",
        str(spec["rootdir"]),
        "-c",
        str(spec["ini"]),
        "--confcutdir",
        str(spec["rootdir"]),
        "--import-mode=importlib",
        "-p",
        "no:cacheprovider",
        "--color=no",
        "--code-highlight=no",
        "-q",
    ]
    return int(pytest.main(args, plugins=[reporter]))


if __name__ == "__main__":
    sys.exit(main())
