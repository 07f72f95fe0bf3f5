"""Task environments: built once from the package index, mounted read-only, reused, never network.

The fixture task's repository is a tiny package whose pyproject depends on a small published
package (``text-unidecode``, absent from the harness's own environment), so its tests can only
pass against the built environment. Building needs PyPI (the test is skipped, saying so, when the
host cannot reach it); everything a cell does runs offline.
"""

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench_assets.cli import main
from bench_assets.config.models import EnvironmentSpec
from bench_assets.inputs.environments import ENV_DEST, ensure_environment
from bench_assets.kernel.store import ArtifactStore
from bench_assets.sandbox.gitrepo import resolve_commit
from bench_assets.sandbox.index_egress import IndexProxy, allowed_hosts
from bench_assets.sandbox.process import Isolation, SandboxSpec, run, sandbox_env
from tests.conftest import write_yaml

DEPENDENCY = "text-unidecode==1.3"
BUGGY = (
    "from text_unidecode import unidecode\n\n\n"
    'def slug(s):\n    return unidecode(s).replace(" ", "-")\n'
)


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


needs_pypi = pytest.mark.skipif(not _pypi_reachable(), reason="pypi.org:443 is not reachable")


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e.invalid",
    }
    return subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def greet_repo(root: Path, dependency: str = DEPENDENCY) -> Path:
    """A tiny package depending on ``dependency`` (a local git repository)."""
    repo = root / "greet-repo"
    (repo / "greet").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pyproject.toml").write_text(
        f'[project]\nname = "greet"\nversion = "0.1"\ndependencies = ["{dependency}"]\n'
    )
    (repo / "greet" / "__init__.py").write_text(BUGGY)
    (repo / "tests" / "test_greet.py").write_text(
        "from greet import slug\n\n\ndef test_plain():\n    assert slug('abc') == 'abc'\n"
    )
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "greet")
    return repo


def greet_bench(root: Path, dependency: str = DEPENDENCY) -> Path:
    """A benchmark with one task over the greet repository and one replay arm that fixes it."""
    repo = greet_repo(root, dependency)
    tasks = root / "tasks"
    write_yaml(
        tasks / "bench.yaml",
        {
            "model": "claude-sonnet-4-5-20250929",
            "runs": 1,
            "arms": {
                "fixer": {
                    "agent": {"adapter": "replay", "predictions": "replays/fix.jsonl"},
                    "skills": "incumbent",
                },
                "cand": {
                    "agent": {"adapter": "replay", "predictions": "replays/fix.jsonl"},
                    "skills": "candidate",
                    "role": "candidate",
                    "pairs_with": "fixer",
                },
            },
            "policy": {"min_runs": 1},
        },
    )
    (tasks / "skills" / "work").mkdir(parents=True)
    (tasks / "skills" / "work" / "SKILL.md").write_text("---\nname: work\n---\nDo the work.\n")
    for cid in ("c1", "c2"):
        cand = tasks / "candidates" / cid
        (cand / "files" / "work").mkdir(parents=True)
        (cand / "files" / "work" / "SKILL.md").write_text(f"---\nname: work\n---\n{cid}\n")
        write_yaml(cand / "candidate.yaml", {"id": cid, "title": cid})
    write_yaml(
        tasks / "greet" / "task.yaml",
        {
            "id": "greet",
            "class": "bug",
            "repo": str(repo),
            "prompt": "slug() must be lower case.",
            "verify": {"pytest": ["tests"]},
            "oracle": {"files": ["test_oracle_greet.py"]},
            "environment": {"pyproject": True},
        },
    )
    (tasks / "greet" / "oracle").mkdir()
    (tasks / "greet" / "oracle" / "test_oracle_greet.py").write_text(
        "from greet import slug\n\n\n"
        "def test_accents_and_case():\n    assert slug('Crème Brûlée') == 'creme-brulee'\n"
    )
    fix = (
        "diff --git a/greet/__init__.py b/greet/__init__.py\n"
        "--- a/greet/__init__.py\n+++ b/greet/__init__.py\n"
        "@@ -2,4 +2,4 @@ from text_unidecode import unidecode\n \n \n def slug(s):\n"
        '-    return unidecode(s).replace(" ", "-")\n'
        '+    return unidecode(s).lower().replace(" ", "-")\n'
    )
    (tasks / "replays").mkdir()
    (tasks / "replays" / "fix.jsonl").write_text(
        json.dumps({"instance_id": "greet", "model_name_or_path": "fixer", "model_patch": fix})
        + "\n"
    )
    return tasks


def _env_materializations() -> list[dict[str, object]]:
    import dagster as dg

    instance = dg.DagsterInstance.get()
    events = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("task_environments")), limit=10
    ).records
    out = []
    for e in reversed(events):  # oldest first
        mat = e.asset_materialization
        assert mat is not None
        md = {k: v.value for k, v in mat.metadata.items()}
        md["data_version"] = mat.tags.get("dagster/data_version")
        out.append(md)
    return out


@pytest.mark.slow
@needs_pypi
def test_an_environment_is_built_once_and_a_second_generation_reuses_it_unchanged(
    tmp_path: Path, artifact_root: Path
) -> None:
    tasks = greet_bench(tmp_path)
    for generation in ("g0001", "g0002"):
        out = CliRunner().invoke(main, ["evolve", "--tasks", str(tasks), "--json"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout)["generation"] == generation
    out = CliRunner().invoke(main, ["cells", "--tasks", str(tasks), "--json"])
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    # Every cell resolved: the hidden test imports text_unidecode, which only the environment has.
    assert {(r["arm"], r["resolved"]) for r in rows} == {("fixer", True), ("cand", True)}, rows
    exported = CliRunner().invoke(
        main, ["export", "--tasks", str(tasks), "--generation", "g0002", "--format", "swebench"]
    )
    assert exported.exit_code == 0, exported.output
    arms = json.loads(exported.stdout)["arms"]
    assert {a: r["r0"]["resolved_ids"] for a, r in arms.items()} == {
        "cand": ["greet"],
        "fixer": ["greet"],
    }
    # The second generation's inputs were unchanged, so it launched no input run at all: the
    # environment was materialized once. `wfbench inputs` re-materializes every task on purpose,
    # and then finds the built environment and reuses it unchanged.
    assert len(_env_materializations()) == 1
    again = CliRunner().invoke(main, ["inputs", "--tasks", str(tasks)])
    assert again.exit_code == 0, again.output
    first, second = _env_materializations()
    assert first["reused"] is False and second["reused"] is True
    assert first["data_version"] == second["data_version"] == first["digest"]
    assert first["installed"] == "text_unidecode-1.3"
    env_dir = Path(str(first["record_path"]))
    assert not any(p.stat().st_mode & 0o222 for p in [env_dir, *env_dir.rglob("*")])
    for r in rows:
        record = json.loads(Path(str(r["record_path"])).read_text())
        assert record["identity"]["environment"] == first["digest"]


@needs_pypi
def test_a_cell_can_import_the_environment_but_cannot_write_it_or_reach_the_network(
    tmp_path: Path, artifact_root: Path
) -> None:
    tasks = greet_bench(tmp_path)
    probe = (
        "import os, socket, sys\n"
        "import text_unidecode\n"
        f"try:\n    open('{ENV_DEST}/planted.py', 'w').write('x')\n    sys.exit(3)\n"
        "except OSError:\n    pass\n"
        "try:\n    socket.create_connection(('pypi.org', 443), timeout=3)\n    sys.exit(4)\n"
        "except OSError:\n    pass\n"
    )
    out = CliRunner().invoke(
        main,
        [
            "try",
            "greet",
            "--tasks",
            str(tasks),
            "--skills",
            "none",
            "--json",
            "--command",
            f"python -c {shlex.quote(probe)}",
        ],
    )
    assert out.exit_code == 0, out.output
    record = json.loads(out.stdout)
    # The agent ran to its end (an import failure, a write or a connection would exit non-zero),
    # and it fixed nothing, so the hidden test fails.
    assert "agent exited" not in record["error_detail"], record["error_detail"]
    assert record["error_kind"] == "oracle-failed", record


@needs_pypi
def test_a_failed_build_fails_the_inputs_with_the_log_tail_before_any_cell(
    tmp_path: Path, artifact_root: Path
) -> None:
    tasks = greet_bench(tmp_path, dependency="wfbench-no-such-package-for-tests==0.0.1")
    out = CliRunner().invoke(main, ["cells", "--run", "--tasks", str(tasks)])
    assert out.exit_code == 1, out.output
    assert "EnvironmentBuildError" in out.output and "build log tail" in out.output
    assert "No matching distribution" in out.output
    assert not (artifact_root / "cells").exists()  # no cell was paid for


def test_the_build_sandbox_reaches_only_the_package_index(tmp_path: Path) -> None:
    """No PyPI needed: the proxy refuses another host, plain requests and direct connections."""
    probe = (
        "import os, socket, sys, urllib.request\n"
        "try:\n    socket.create_connection(('1.1.1.1', 443), timeout=2)\n    sys.exit(3)\n"
        "except OSError:\n    pass\n"
        "url = os.environ['HTTPS_PROXY'].removeprefix('http://')\n"
        "host, port = url.split(':')\n"
        "def ask(line):\n"
        "    s = socket.create_connection((host, int(port)), timeout=10)\n"
        "    s.sendall(line.encode() + b'\\r\\n\\r\\n')\n"
        "    return s.recv(100).split(b'\\r\\n')[0]\n"
        "print(ask('CONNECT example.com:443 HTTP/1.1'))\n"
        "print(ask('CONNECT pypi.org:80 HTTP/1.1'))\n"
        "print(ask('GET http://pypi.org/simple/ HTTP/1.1'))\n"
    )
    with IndexProxy(allowed_hosts("https://pypi.org/simple")) as proxy:
        res = run(
            [sys.executable, "-c", probe],
            isolation=Isolation.SANDBOX,
            env=sandbox_env(),
            timeout_s=60,
            sandbox=SandboxSpec(model_api=proxy.channel()),
        )
        refused = list(proxy.refused)
    assert res.returncode == 0, res.tail()
    assert res.text().count("403 Forbidden") == 3, res.text()
    assert len(refused) == 3 and "example.com" in refused[0], refused
    assert proxy.tunnels == 0


@pytest.mark.parametrize(
    ("requirements", "says"),
    [
        (["--index-url=https://evil.example/simple"], "pip option"),
        (["pkg @ https://evil.example/pkg.whl"], "names a URL"),
    ],
)
def test_pyproject_requirements_cannot_smuggle_options_or_urls(
    tmp_path: Path, requirements: list[str], says: str
) -> None:
    from bench_assets.kernel.errors import InputError

    repo = greet_repo(tmp_path, dependency=requirements[0].replace('"', "'"))
    sha = resolve_commit(repo, "HEAD")
    assert sha is not None
    with pytest.raises(InputError, match=says):
        ensure_environment(
            EnvironmentSpec(pyproject=True),
            task_id="greet",
            repo=repo,
            resolved_sha=sha,
            artifacts=ArtifactStore(tmp_path / "art"),
        )


@needs_pypi
def test_an_altered_stored_environment_is_rebuilt_not_trusted(tmp_path: Path) -> None:
    repo = greet_repo(tmp_path)
    sha = resolve_commit(repo, "HEAD")
    assert sha is not None
    store = ArtifactStore(tmp_path / "art")
    kw = {"task_id": "greet", "repo": repo, "resolved_sha": sha, "artifacts": store}
    first = ensure_environment(EnvironmentSpec(pyproject=True), **kw)  # type: ignore[arg-type]
    planted = first.path / "site-packages" / "sitecustomize.py"
    (first.path / "site-packages").chmod(0o755)
    planted.write_text("print('planted')\n")
    again = ensure_environment(EnvironmentSpec(pyproject=True), **kw)  # type: ignore[arg-type]
    assert again.reused is False and not planted.exists()
    assert again.record.digest == first.record.digest
