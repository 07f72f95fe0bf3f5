"""Time `wfbench import commits` per candidate, so a team can predict it for a thousand commits.

Mines a repository's first-parent history into a fresh tasks folder (a scratch artifact store),
printing one line per commit as the import does (status, seconds, task or reason), then:

- commits examined, candidates, accepted, rejected by reason;
- seconds per skipped commit (git only) and per validated candidate (sandboxed runs: 3 on the
  base, 3 with the gold patch, one visible-tests run), mean and median, side by side;
- the projection for 1,000 commits at this repository's candidate rate;
- a re-run over the same history (nothing validated: the ledger and the task folders), and its
  ratio to the first run.

The default repository is the published ``inflection`` library's real history (MIT,
github.com/jpvanhal/inflection, 123 first-parent commits, bundled in
``tests/data/inflection.bundle``); ``--repo PATH`` mines any other, ``--range``/``--max`` as the
command. Needs the sandbox (bubblewrap); runs offline.

Run: `.venv/bin/python bench/mine_commits.py [--repo PATH] [--range A..B] [--max N]`.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_assets.kernel.store import ArtifactStore  # noqa: E402
from bench_assets.mining.documents import CandidateLine, MineReport  # noqa: E402
from bench_assets.mining.folders import render_line  # noqa: E402
from bench_assets.mining.importer import Options, import_commits  # noqa: E402
from bench_assets.sandbox import process as sandbox  # noqa: E402

BUNDLE = REPO / "tests" / "data" / "inflection.bundle"


def clone_bundle(dest: Path) -> Path:
    """The bundled inflection history as a normal repository (a test fixture, plain git)."""
    subprocess.run(
        ["git", "clone", "-q", "--branch", "master", str(BUNDLE), str(dest)],
        check=True,
        env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"},
    )
    return dest


def summarize(report: MineReport, label: str) -> None:
    paid = [ln for ln in report.lines if ln.status in ("accepted", "rejected") and not ln.cached]
    skipped = [ln for ln in report.lines if ln.status == "skipped"]
    accepted = [ln.seconds for ln in paid if ln.status == "accepted"]
    rejected = [ln.seconds for ln in paid if ln.status == "rejected"]
    print(f"\n{label}: {report.seconds:.1f} s for {report.commits} commits")
    print(
        f"  candidates {report.candidates}, accepted {len(report.accepted)}, "
        f"unchanged {len(report.unchanged)}, rejected "
        + (", ".join(f"{k} {len(v)}" for k, v in sorted(report.rejected_by_reason.items())) or "0")
    )

    def stats(xs: list[float]) -> str:
        if not xs:
            return "      -"
        return (
            f"{statistics.mean(xs):7.2f} s mean {statistics.median(xs):7.2f} s median (n={len(xs)})"
        )

    print(f"  per skipped commit        {stats([ln.seconds for ln in skipped])}")
    print(f"  per validated candidate   {stats([ln.seconds for ln in paid])}")
    print(f"    accepted                {stats(accepted)}")
    print(f"    rejected                {stats(rejected)}")
    if paid and report.commits:
        rate = report.candidates / report.commits
        per_skip = statistics.mean([ln.seconds for ln in skipped]) if skipped else 0.0
        per_cand = statistics.mean([ln.seconds for ln in paid])
        projected = 1000 * (rate * per_cand + (1 - rate) * per_skip)
        print(
            f"  projection for 1,000 commits at this candidate rate ({rate:.0%}): "
            f"{projected / 60:.0f} min ({projected / 3600:.1f} h)"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, default=None, help="repository (default: inflection)")
    ap.add_argument("--range", dest="revrange", default=None, help="A..B")
    ap.add_argument("--max", dest="max_candidates", type=int, default=None)
    args = ap.parse_args()
    sandbox.preflight()
    with tempfile.TemporaryDirectory(prefix="wfbench-mine-bench-") as tmp:
        scratch = Path(tmp)
        repo = args.repo.resolve() if args.repo else clone_bundle(scratch / "inflection")
        artifacts = ArtifactStore(scratch / "artifacts")
        tasks = scratch / "tasks"
        options = Options(revrange=args.revrange, max_candidates=args.max_candidates)

        def show(line: CandidateLine) -> None:
            print(render_line(line), flush=True)

        print(f"mining {repo} into {tasks}")
        first = import_commits(repo, tasks, artifacts, options, on_line=show)
        summarize(first, "first import")
        started = time.monotonic()
        again = import_commits(repo, tasks, artifacts, options)
        summarize(again, "re-import of the same history")
        ratio = first.seconds / max(again.seconds, 1e-9)
        print(
            f"\nfirst {first.seconds:.1f} s vs re-import {time.monotonic() - started:.1f} s: "
            f"{ratio:.0f}x; tasks written {len(first.accepted)}, changed by the re-import "
            f"{len(again.accepted)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
