"""Managed tools: the Claude Code CLI a benchmark pins, installed by wfbench itself.

``agents.claude_code.version`` in ``bench.yaml`` names one npm release of
``@anthropic-ai/claude-code``. wfbench installs exactly that release, once, into its own tools
cache, never onto ``PATH`` and never over another version::

    $WFBENCH_TOOLS/claude-code/<version>/node_modules/.bin/claude
    $WFBENCH_TOOLS/claude-code/<version>/install.json     what was installed and verified

(``$WFBENCH_TOOLS`` defaults to ``$XDG_CACHE_HOME/wfbench/tools``, else
``~/.cache/wfbench/tools``.)

How: ``npm install`` runs in the sandbox (:mod:`bench_assets.sandbox.process`) with the network on —
it must reach the registry — writing only to a private staging folder and the npm cache, so the
package's ``postinstall`` script (which puts the native binary in place) runs contained. The
staging folder is accepted only if its ``claude --version``, run in the sandbox without network,
answers exactly the pinned release; then ``install.json`` is written (:class:`ClaudeCodeInstall`:
the registry's integrity of every package, the binary's digest) and the folder is published by
one rename. Installers take a lock, so cells starting together install once.

When: only when a ``claude-code`` arm is used (a cell, ``wfbench evolve``'s preflight),
``wfbench doctor --install`` asks for it, or a test does. The demo (replay arms) never needs it.
"""

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from bench_assets.kernel.errors import ContainmentError, InputError
from bench_assets.kernel.fsutil import (
    atomic_write_text,
    locked,
    publish_dir,
    remove_tree,
    staging_dir,
)
from bench_assets.kernel.hashing import sha256_file
from bench_assets.sandbox.process import (
    SANDBOX_HOME,
    Isolation,
    Mount,
    SandboxSpec,
    run,
    sandbox_env,
)

TOOLS_ENV = "WFBENCH_TOOLS"
CLAUDE_CODE_PACKAGE = "@anthropic-ai/claude-code"
INSTALL_TIMEOUT_S = 900.0
VERSION_TIMEOUT_S = 60.0
REGISTRY_TIMEOUT_S = 60.0
INSTALL_FILE = "install.json"
_BIN = Path("node_modules") / ".bin" / "claude"
_SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")
_PASSED_NPM_ENV = (
    "npm_config_registry",
    "NPM_CONFIG_REGISTRY",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
)
"""Host variables an install needs behind a mirror or a proxy (no credentials are passed)."""
_TRUST_ENV = ("NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR")
"""Host certificate settings (a TLS-inspecting proxy's CA); their files are mounted read-only."""
_VISIBLE = ("/usr", "/etc/ssl", "/etc/ca-certificates")
_VERSION_ENV = {
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "CLAUDE_CONFIG_DIR": f"{SANDBOX_HOME}/.claude",
}


class ToolUnavailable(InputError):
    """A pinned tool is not installed, cannot be installed, or is not the pinned release."""


class InstalledPackage(BaseModel):
    """One npm package of an install, as the registry described it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    version: str
    integrity: str | None
    """The registry's ``sha512-…`` integrity npm checked the tarball against."""


class ClaudeCodeInstall(BaseModel):
    """``install.json``: what wfbench installed for one pinned release, and how it verified it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = 1
    package: str
    version: str
    """The pinned release; ``claude --version`` answered exactly this at install time."""
    version_output: str
    executable: str
    """The CLI, relative to the install folder (``node_modules/.bin/claude``)."""
    binary_sha256: str
    """Digest of the file the executable resolves to (the native binary)."""
    packages: list[InstalledPackage]
    npm_version: str | None


def tools_root() -> Path:
    """wfbench's tools cache: ``$WFBENCH_TOOLS``, else ``$XDG_CACHE_HOME/wfbench/tools``."""
    explicit = os.environ.get(TOOLS_ENV)
    if explicit:
        return Path(explicit).expanduser().resolve()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return (Path(cache) / "wfbench" / "tools").resolve()


def claude_code_home(version: str) -> Path:
    """Where release ``version`` is (or would be) installed."""
    return tools_root() / "claude-code" / version


def read_install(version: str) -> ClaudeCodeInstall | None:
    """The install record of ``version`` when a complete install of it is present."""
    home = claude_code_home(version)
    try:
        record = ClaudeCodeInstall.model_validate_json(
            (home / INSTALL_FILE).read_text(encoding="utf-8")
        )
    except (OSError, ValueError):
        return None
    if record.version != version or not (home / record.executable).is_file():
        return None
    return record


def installed_claude_code(version: str) -> Path | None:
    """The pinned CLI's executable when release ``version`` is installed, else ``None``."""
    record = read_install(version)
    return None if record is None else claude_code_home(version) / record.executable


def ensure_claude_code(
    version: str, *, install: bool = True, progress: Callable[[str], None] = lambda m: None
) -> Path:
    """The executable of release ``version``, installing it first when allowed.

    Raises:
        ToolUnavailable: it is not installed and ``install`` is false, or the install failed;
            the message says why and what to do.
    """
    exe = installed_claude_code(version)
    if exe is not None:
        return exe
    if not install:
        raise ToolUnavailable(
            f"Claude Code {version} (agents.claude_code.version) is not installed in "
            f"{claude_code_home(version)}: run `wfbench doctor --install` (needs npm)"
        )
    return install_claude_code(version, progress=progress)


def install_claude_code(version: str, *, progress: Callable[[str], None] = lambda m: None) -> Path:
    """Install release ``version`` from the npm registry (see module docstring); idempotent."""
    parent = tools_root() / "claude-code"
    parent.mkdir(parents=True, exist_ok=True)
    with locked(parent):
        exe = installed_claude_code(version)
        if exe is not None:
            return exe
        final = claude_code_home(version)
        if final.exists():
            # A folder without a valid install.json is an interrupted or foreign install.
            remove_tree(final)
        progress(f"installing Claude Code {version} from the npm registry into {final} ...")
        staging = staging_dir(parent, f"install-{version}")
        try:
            try:
                record = _install_into(staging, version)
            except ContainmentError as e:
                raise ToolUnavailable(
                    f"Claude Code {version} cannot be installed: npm runs in the sandbox, which "
                    f"is not available: {e}"
                ) from e
            atomic_write_text(
                staging / INSTALL_FILE, record.model_dump_json(indent=2) + "\n", mode=0o444
            )
            publish_dir(staging, final, record=INSTALL_FILE)
        except BaseException:
            remove_tree(staging)
            raise
    progress(f"Claude Code {version} installed and verified ({final / record.executable})")
    return final / record.executable


def _install_into(staging: Path, version: str) -> ClaudeCodeInstall:
    npm, mounts, path = _npm_runtime()
    cache = tools_root() / "npm-cache"
    cache.mkdir(parents=True, exist_ok=True)
    spec = SandboxSpec(
        network=True,
        mounts=(
            *mounts,
            Mount(staging, str(staging), writable=True),
            Mount(cache, str(cache), True),
        ),
    )
    env = _npm_env(path, cache)
    res = run(
        [
            npm,
            "install",
            "--prefix",
            str(staging),
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            f"{CLAUDE_CODE_PACKAGE}@{version}",
        ],
        isolation=Isolation.SANDBOX,
        env=env,
        timeout_s=INSTALL_TIMEOUT_S,
        sandbox=spec,
    )
    if not res.ok:
        why = "timed out" if res.timed_out else f"exit {res.returncode}"
        raise ToolUnavailable(
            f"npm could not install {CLAUDE_CODE_PACKAGE}@{version} ({why}): {res.tail(600)}"
        )
    exe = staging / _BIN
    answer = probe_version(exe)
    wrapper = staging / "node_modules" / CLAUDE_CODE_PACKAGE
    if answer is None and (wrapper / "install.cjs").is_file():
        # The package's postinstall places the native binary; run it if npm skipped scripts.
        node = shutil.which("node", path=path) or "node"
        run(
            [node, str(wrapper / "install.cjs")],
            isolation=Isolation.SANDBOX,
            env=env,
            timeout_s=INSTALL_TIMEOUT_S,
            sandbox=spec,
        )
        answer = probe_version(exe)
    if answer is None or answer.split(" ", 1)[0] != version:
        raise ToolUnavailable(
            f"{CLAUDE_CODE_PACKAGE}@{version} installed, but `claude --version` answered "
            f"{answer!r}, not {version}: the install is not the pinned release and was discarded"
        )
    return ClaudeCodeInstall(
        package=CLAUDE_CODE_PACKAGE,
        version=version,
        version_output=answer,
        executable=str(_BIN),
        binary_sha256=sha256_file(exe.resolve()),
        packages=_lock_packages(staging),
        npm_version=_npm_version(npm, env, spec),
    )


def _lock_packages(prefix: Path) -> list[InstalledPackage]:
    try:
        lock = json.loads((prefix / "node_modules" / ".package-lock.json").read_text())
    except (OSError, ValueError):
        return []
    out = []
    for key, entry in sorted((lock.get("packages") or {}).items()):
        if not isinstance(entry, dict) or "/@anthropic-ai/" not in f"/{key}":
            continue
        out.append(
            InstalledPackage(
                name=key.rsplit("node_modules/", 1)[-1],
                version=str(entry.get("version")),
                integrity=entry.get("integrity")
                if isinstance(entry.get("integrity"), str)
                else None,
            )
        )
    return out


def _npm_version(npm: str, env: dict[str, str], spec: SandboxSpec) -> str | None:
    res = run([npm, "--version"], isolation=Isolation.SANDBOX, env=env, timeout_s=60, sandbox=spec)
    return (res.text().strip() or None) if res.ok else None


def probe_version(exe: Path) -> str | None:
    """The first line ``exe --version`` prints, run in the sandbox without network; ``None`` if
    it cannot be run or prints nothing."""
    resolved = exe.resolve()
    if not resolved.is_file():
        return None
    mounts = () if _system(resolved) else (Mount(resolved.parent, str(resolved.parent)),)
    try:
        res = run(
            [str(resolved), "--version"],
            isolation=Isolation.SANDBOX,
            env=sandbox_env(_VERSION_ENV),
            timeout_s=VERSION_TIMEOUT_S,
            sandbox=SandboxSpec(mounts=mounts),
        )
    except ContainmentError:
        return None
    lines = res.text().strip().splitlines() if res.ok else []
    return lines[0].strip() if lines else None


def npm_available() -> str | None:
    """Where ``npm`` is on the host, or ``None``."""
    return shutil.which("npm")


def _system(path: Path) -> bool:
    return any(path == Path(t) or path.is_relative_to(t) for t in _SYSTEM_TREES)


def _npm_runtime() -> tuple[str, tuple[Mount, ...], str]:
    """npm's path, the mounts it and its ``node`` need in the sandbox, and the sandbox ``PATH``."""
    npm = npm_available()
    if npm is None:
        raise ToolUnavailable(
            "npm is not on PATH, so Claude Code cannot be installed from the registry: install "
            "Node.js and npm (e.g. `sudo apt-get install nodejs npm`), then run "
            "`wfbench doctor --install`"
        )
    found = [Path(npm)]
    node = shutil.which("node")
    if node is not None:
        found.append(Path(node))
    roots: list[Path] = []
    for path in [*found, *(f.resolve() for f in found)]:
        if _system(path):
            continue
        # A node prefix outside the system trees (nvm, a tarball): <prefix>/bin/{node,npm}.
        root = path.parent.parent if path.parent.name == "bin" else path.parent
        if root != Path("/") and root != Path.home() and len(root.parts) > 2:
            roots.append(root)
    kept = [r for r in roots if not any(o != r and r.is_relative_to(o) for o in roots)]
    mounts = tuple(Mount(r, str(r)) for r in dict.fromkeys(kept))
    bins = dict.fromkeys(str(f.parent) for f in found)
    return npm, (*mounts, *_trust_mounts()), ":".join([*bins, sandbox_env()["PATH"]])


def _npm_env(path: str, cache: Path) -> dict[str, str]:
    extra = {
        "PATH": path,
        "npm_config_cache": str(cache),
        "npm_config_update_notifier": "false",
        "npm_config_fund": "false",
        "npm_config_audit": "false",
        "CI": "1",
    }
    for name in (*_PASSED_NPM_ENV, *_TRUST_ENV):
        if os.environ.get(name):
            extra[name] = os.environ[name]
    return sandbox_env(extra)


def _trust_mounts() -> tuple[Mount, ...]:
    """The certificate files the trust variables name, where the sandbox would not see them."""
    out = []
    for name in _TRUST_ENV:
        value = os.environ.get(name)
        path = Path(value).resolve() if value else None
        if path is None or not path.exists() or len(path.parts) <= 2:
            continue
        if not any(path == Path(v) or path.is_relative_to(v) for v in _VISIBLE):
            out.append(Mount(path, value or str(path)))
    return tuple(out)


def registry_latest() -> str | None:
    """The registry's ``latest`` release of the CLI, or ``None`` when it cannot be asked."""
    try:
        npm, mounts, path = _npm_runtime()
    except ToolUnavailable:
        return None
    cache = tools_root() / "npm-cache"
    cache.mkdir(parents=True, exist_ok=True)
    try:
        res = run(
            [npm, "view", CLAUDE_CODE_PACKAGE, "dist-tags.latest"],
            isolation=Isolation.SANDBOX,
            env=_npm_env(path, cache),
            timeout_s=REGISTRY_TIMEOUT_S,
            sandbox=SandboxSpec(network=True, mounts=(*mounts, Mount(cache, str(cache), True))),
        )
    except ContainmentError:
        return None
    answer = res.text().strip() if res.ok else ""
    return answer or None
