"""A tiny SWE-bench-style suite over a local git repository the tests build.

``build(root)`` creates ``root/repos/acme/shapes`` (two commits) and returns three instances in
SWE-bench's dataset shape (test lists as JSON text, like the Hugging Face rows, plus columns
wfbench ignores):

- ``acme__shapes-1``: ``area()`` of a square is wrong; the test patch edits an existing test file;
- ``acme__shapes-2``: ``perimeter()`` is missing; the test patch adds a new test file, and a
  PASS_TO_PASS test lives in a file the patch does not touch;
- ``acme__shapes-3``: on the second commit, ``scale()`` ignores its factor.
"""

import json
import os
import subprocess
from pathlib import Path
from typing import Any

ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_AUTHOR_DATE": "1700000000 +0000",
    "GIT_COMMITTER_DATE": "1700000000 +0000",
}

BASE = {
    "shapes/__init__.py": (
        "def area(side):\n    return side * 2\n\n\ndef scale(side, factor):\n    return side\n"
    ),
    "tests/test_shapes.py": (
        "from shapes import area\n\n\ndef test_area_zero():\n    assert area(0) == 0\n"
    ),
    "tests/test_misc.py": "def test_truth():\n    assert True\n",
}


def _git(repo: Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
        input=stdin,
        env={**os.environ, **ENV},
    ).stdout


def _write(repo: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)


def _diff(repo: Path, files: dict[str, str]) -> str:
    """The patch that turns the checked-out tree into one with ``files`` (left unapplied)."""
    _write(repo, files)
    _git(repo, "add", "-N", *files)
    patch = _git(repo, "diff", "--", *files)
    _git(repo, "reset", "-q")
    _git(repo, "checkout", "-q", "--", ".")
    _git(repo, "clean", "-qfd")
    return patch


def build(root: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The repos folder and the instances (see module docstring)."""
    repos = root / "repos"
    repo = repos / "acme" / "shapes"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    _write(repo, BASE)
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    base1 = _git(repo, "rev-parse", "HEAD").strip()
    square_fix = _diff(
        repo, {"shapes/__init__.py": BASE["shapes/__init__.py"].replace("side * 2", "side * side")}
    )
    square_tests = _diff(
        repo,
        {
            "tests/test_shapes.py": BASE["tests/test_shapes.py"]
            + "\n\ndef test_area_square():\n    assert area(3) == 9\n"
        },
    )
    perimeter_fix = _diff(
        repo,
        {
            "shapes/__init__.py": BASE["shapes/__init__.py"]
            + "\n\ndef perimeter(side):\n    return 4 * side\n"
        },
    )
    perimeter_tests = _diff(
        repo,
        {
            "tests/test_perimeter.py": "from shapes import perimeter\n\n\n"
            "def test_perimeter():\n    assert perimeter(2) == 8\n"
        },
    )
    _write(repo, {"README.md": "shapes\n"})
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "readme")
    base2 = _git(repo, "rev-parse", "HEAD").strip()
    scale_fix = _diff(
        repo,
        {
            "shapes/__init__.py": BASE["shapes/__init__.py"].replace(
                "return side\n", "return side * factor\n"
            )
        },
    )
    scale_tests = _diff(
        repo,
        {
            "tests/test_shapes.py": BASE["tests/test_shapes.py"].replace(
                "from shapes import area", "from shapes import area, scale"
            )
            + "\n\ndef test_scale():\n    assert scale(2, 3) == 6\n"
        },
    )

    def inst(
        n: int, base: str, statement: str, patch: str, tests: str, f2p: list[str], p2p: list[str]
    ) -> dict[str, Any]:
        return {
            "instance_id": f"acme__shapes-{n}",
            "repo": "acme/shapes",
            "base_commit": base,
            "problem_statement": statement,
            "patch": patch,
            "test_patch": tests,
            "FAIL_TO_PASS": json.dumps(f2p),
            "PASS_TO_PASS": json.dumps(p2p),
            "version": "0.1",
            "environment_setup_commit": base,
            "hints_text": "",
            "created_at": "2023-11-14T22:13:20Z",
        }

    instances = [
        inst(
            1,
            base1,
            "area() of a square returns twice the side instead of its square.",
            square_fix,
            square_tests,
            ["tests/test_shapes.py::test_area_square"],
            ["tests/test_shapes.py::test_area_zero"],
        ),
        inst(
            2,
            base1,
            "Add perimeter(side), the perimeter of a square.",
            perimeter_fix,
            perimeter_tests,
            ["tests/test_perimeter.py::test_perimeter"],
            ["tests/test_misc.py::test_truth"],
        ),
        inst(
            3,
            base2,
            "scale(side, factor) ignores its factor.",
            scale_fix,
            scale_tests,
            ["tests/test_shapes.py::test_scale"],
            [],
        ),
    ]
    return repos, instances


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
