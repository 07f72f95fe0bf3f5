"""Time the input pipeline per demo task, and the per-cell worktree start cost.

Prints, for every demo task, the seconds to build its binding, oracle snapshot, sanitized template
and graph, and to copy a worktree from the template; then the same copy for a synthetic ~10 MB
repository, side by side with a `git clone` of the same template (the obvious alternative).
Target: a worktree copy of a 10 MB repo in <= 0.1 s.

Then the task environment (``task_environments``) of a fixture task whose repository is a tiny
package depending on a small published package: the first build (pip behind the package-index
proxy, from PyPI) against a reuse by a later generation (content re-verified, no network), and
their ratio. Skipped, saying so, with --no-environment or when pypi.org is unreachable.

Run: `make bench` or `.venv/bin/python bench/inputs.py [--repeat N]`.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_assets.config.models import EnvironmentSpec  # noqa: E402
from bench_assets.inputs import oracle, sanitize  # noqa: E402
from bench_assets.inputs.build import CapturedOracle, benchmark_paths, bind_task  # noqa: E402
from bench_assets.inputs.environments import EnvironmentResult, ensure_environment  # noqa: E402
from bench_assets.inputs.graph import build_graph  # noqa: E402
from bench_assets.kernel.store import ArtifactStore  # noqa: E402
from bench_assets.sandbox import gitrepo  # noqa: E402
from bench_assets.tasks.catalog import load_benchmark  # noqa: E402

T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def median_copy(template: sanitize.Template, scratch: Path, repeat: int) -> float:
    times = []
    for i in range(repeat):
        dest = scratch / f"wt-{i}"
        _, t = timed(lambda d=dest: sanitize.copy_worktree(template, d))
        times.append(t)
        shutil.rmtree(dest)
    return statistics.median(times)


def median_clone(template: sanitize.Template, scratch: Path, repeat: int) -> float:
    times = []
    src = sanitize.template_tree(template)
    for i in range(repeat):
        dest = scratch / f"clone-{i}"
        _, t = timed(
            lambda d=dest: gitrepo.git(["clone", "-q", "--no-hardlinks", str(src), str(d)])
        )
        times.append(t)
        shutil.rmtree(dest)
    return statistics.median(times)


def synthetic_repo(root: Path, total_mb: int = 10) -> Path:
    """~total_mb of Python-like text in 400 files across 20 packages."""
    files = 400
    size = total_mb * 1024 * 1024 // files
    line = "def f_{i}(x):\n    return x * {i} + len(str(x))  # padding padding padding\n"
    for n in range(files):
        pkg = root / f"pkg{n % 20}"
        pkg.mkdir(parents=True, exist_ok=True)
        body, i = [], 0
        while sum(len(b) for b in body) < size:
            body.append(line.format(i=i + n * 1000))
            i += 1
        (pkg / f"mod{n}.py").write_text("".join(body))
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", default=str(REPO / "tasks"))
    ap.add_argument("--repeat", type=int, default=5, help="copies per measurement (median)")
    ap.add_argument(
        "--env-requirement",
        default="text-unidecode==1.3",
        help="the fixture package's one dependency (default: text-unidecode==1.3)",
    )
    ap.add_argument("--no-environment", action="store_true", help="skip the environment timing")
    args = ap.parse_args()
    bench = load_benchmark(Path(args.tasks))
    scratch = Path(tempfile.mkdtemp(prefix="wfbench-bench-"))
    store = ArtifactStore(scratch / "artifacts")
    try:
        print(
            f"{'task':<24} {'binding':>8} {'oracle':>8} {'template':>9} {'graph':>8} "
            f"{'copy wt':>8}   (seconds; copy = median of {args.repeat})"
        )
        for task_id in bench.task_ids():
            bound, t_bind = timed(lambda t=task_id: bind_task(bench, t, store))
            b = bound.binding

            def snap(t: str = task_id) -> CapturedOracle:
                s, payloads = oracle.capture(bench.task(t), bench.config.limits)
                return CapturedOracle(s, oracle.store(s, payloads, store))

            captured, t_oracle = timed(snap)
            payloads = oracle.verify_stored(captured.snapshot, store)
            start = time.perf_counter()
            template = sanitize.build_template(
                store.repo(task_id),
                b.resolved_sha,
                store,
                remove=benchmark_paths(bench, bench.task(task_id), b),
                forbidden_blobs=payloads,
            )
            t_tmpl = time.perf_counter() - start
            start = time.perf_counter()
            build_graph(template, captured.snapshot, bench.config.graph, store)
            t_graph = time.perf_counter() - start
            t_copy = median_copy(template, scratch, args.repeat)
            print(
                f"{task_id:<24} {t_bind:8.3f} {t_oracle:8.3f} {t_tmpl:9.3f} {t_graph:8.3f} "
                f"{t_copy:8.4f}"
            )

        src = synthetic_repo(scratch / "synthetic")
        sha, t_commit = timed(
            lambda: gitrepo.commit_tree_from_dir(src, store.repo("synthetic"), "synthetic\n")
        )
        template, t_tmpl = timed(
            lambda: sanitize.build_template(
                store.repo("synthetic"), sha, store, remove=[], forbidden_blobs={}
            )
        )
        mb = template.info.bytes / 1024 / 1024
        t_copy = median_copy(template, scratch, args.repeat)
        t_clone = median_clone(template, scratch, args.repeat)
        print()
        print(
            f"synthetic repo: {template.info.files} files, {mb:.1f} MB "
            f"(commit {t_commit:.2f} s, sanitized template {t_tmpl:.2f} s)"
        )
        print(
            f"  worktree copy (cp --reflink=auto): {t_copy:.4f} s   target <= 0.1 s: "
            f"{'met' if t_copy <= 0.1 else 'NOT met'}"
        )
        print(f"  git clone of the template:         {t_clone:.4f} s")
        print(f"  copy / clone ratio:                {t_copy / t_clone:.2f}x")
        fs = os.statvfs(scratch)
        print(f"  (filesystem block size {fs.f_bsize}; reflinks apply only on btrfs/xfs)")
        if not args.no_environment:
            print()
            environment_timing(scratch, store, args.env_requirement, args.repeat)
    finally:
        from bench_assets.kernel.fsutil import remove_tree

        remove_tree(scratch)


def environment_timing(scratch: Path, store: ArtifactStore, requirement: str, repeat: int) -> None:
    """Build a fixture task's environment once, then reuse it ``repeat`` times (module doc)."""
    import socket

    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError:
        print("task environment: skipped (pypi.org:443 is not reachable)")
        return
    repo = scratch / "env-fixture"
    (repo / "fixture_pkg").mkdir(parents=True)
    (repo / "pyproject.toml").write_text(
        f'[project]\nname = "fixture-pkg"\nversion = "0.1"\ndependencies = ["{requirement}"]\n'
    )
    (repo / "fixture_pkg" / "__init__.py").write_text("")
    sha = gitrepo.commit_tree_from_dir(repo, store.repo("env-fixture"), "fixture\n")
    spec = EnvironmentSpec(pyproject=True)

    def ensure() -> EnvironmentResult:
        return ensure_environment(
            spec,
            task_id="env-fixture",
            repo=store.repo("env-fixture"),
            resolved_sha=sha,
            artifacts=store,
        )

    built, t_build = timed(ensure)
    reuses = [timed(ensure) for _ in range(repeat)]
    t_reuse = statistics.median(t for _, t in reuses)
    same = all(r.record.digest == built.record.digest for r, _ in reuses) and all(
        r.reused for r, _ in reuses
    )
    print(f"task environment ({requirement}; installed {', '.join(built.record.installed)}):")
    print(f"  first build (pip via the index proxy): {t_build:.3f} s")
    print(f"  reuse in a later generation (median of {repeat}): {t_reuse:.4f} s")
    print(f"  build / reuse ratio: {t_build / t_reuse:.0f}x; data version unchanged: {same}")


if __name__ == "__main__":
    main()
