"""Per-arm tool servers and plugin folders of a ``claude-code`` arm (pure, plus file digests).

What arms differed by in the original harness besides their skills: the code-graph MCP server
(skill arms had it, ``baseline_nomcp`` did not) and a third-party plugin folder that only the
comparator arms naming it could see. Here an arm declares them in ``bench.yaml``:

* ``mcp_servers``: each becomes one stdio entry of the ``--mcp-config`` JSON, which the CLI starts
  as its own child — inside the cell's sandbox, so with no network and the same read-only system
  trees. ``--strict-mcp-config`` keeps any other configuration out. The bundled ``code-graph``
  server (:mod:`bench_assets.agents.mcp_code_graph`) is mounted as one read-only file at
  ``/wfbench-mcp/code_graph.py`` and serves the task's sanitized graph, mounted read-only at
  ``/wfbench-mcp/graph.json``; it runs on the harness's Python (whose tree the sandbox already
  mounts read-only). A ``command`` server's folder is mounted read-only at its own path. Servers
  get only the literal ``env`` the arm wrote: no host value, so no credential, reaches them.
* ``plugin_dirs``: each folder (relative to ``tasks/``) is mounted read-only at
  ``/wfbench-plugins/<n>-<name>`` and passed with ``--plugin-dir``; arms that do not name it never
  see it.

Identity: the server specs, the bundled server's source digest and every plugin folder's content
digest (:func:`bench_assets.kernel.hashing.tree_digest`) — editing a plugin makes the arm's cells
stale. The session must then list exactly these servers, connected, in its ``system/init`` event
(:func:`~bench_assets.agents.claude_stream.check_init`), before any model call is paid.
"""

import json
import sys
from pathlib import Path
from typing import Any

from bench_assets.agents import mcp_code_graph
from bench_assets.config.models import ClaudeCodeAgent
from bench_assets.kernel.errors import ContainmentError
from bench_assets.kernel.hashing import sha256_file, tree_digest
from bench_assets.sandbox.process import Mount

MCP_DIR = "/wfbench-mcp"
CODE_GRAPH_SCRIPT = f"{MCP_DIR}/code_graph.py"
CODE_GRAPH_DATA = f"{MCP_DIR}/graph.json"
PLUGINS_DIR = "/wfbench-plugins"
_SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")


def _code_graph_source() -> Path:
    return Path(mcp_code_graph.__file__).resolve()


class ArmTools:
    """The MCP config, mounts, CLI flags and identity of one arm's servers and plugins."""

    def __init__(self, spec: ClaudeCodeAgent, tasks_root: Path | None) -> None:
        self._spec = spec
        self._root = tasks_root

    def _plugin_dirs(self) -> list[tuple[Path, str]]:
        out = []
        for i, rel in enumerate(self._spec.plugin_dirs):
            if self._root is None:
                raise ContainmentError(f"plugin_dirs entry {rel!r}: no benchmark folder known")
            host = (self._root / rel).resolve()
            if not host.is_relative_to(self._root.resolve()):
                raise ContainmentError(f"plugin_dirs entry {rel!r} leaves the benchmark folder")
            if not host.is_dir():
                raise ContainmentError(f"plugin_dirs entry {rel!r} is not a folder ({host})")
            out.append((host, f"{PLUGINS_DIR}/{i}-{host.name}"))
        return out

    def plugin_dests(self) -> list[str]:
        """Where each plugin folder appears in the sandbox (the ``--plugin-dir`` values)."""
        return [
            f"{PLUGINS_DIR}/{i}-{Path(rel).name}" for i, rel in enumerate(self._spec.plugin_dirs)
        ]

    def mcp_config(self) -> str:
        """The ``--mcp-config`` JSON: one stdio server per configured entry."""
        servers: dict[str, Any] = {}
        for name, server in sorted(self._spec.mcp_servers.items()):
            if server.builtin == "code-graph":
                servers[name] = {
                    "type": "stdio",
                    "command": sys.executable,
                    "args": [CODE_GRAPH_SCRIPT, CODE_GRAPH_DATA],
                    "env": {},
                }
            else:
                servers[name] = {
                    "type": "stdio",
                    "command": server.command,
                    "args": list(server.args),
                    "env": dict(server.env),
                }
        return json.dumps({"mcpServers": servers}, sort_keys=True, separators=(",", ":"))

    def mounts(self, graph_file: Path | None) -> tuple[Mount, ...]:
        """Read-only mounts the servers and plugins need inside the sandbox.

        Raises:
            ContainmentError: a server or plugin folder cannot be provided (no graph, a missing
                command or folder); the session is not started.
        """
        out: list[Mount] = []
        for name, server in sorted(self._spec.mcp_servers.items()):
            if server.builtin == "code-graph":
                if graph_file is None or not graph_file.is_file():
                    raise ContainmentError(f"MCP server {name!r}: no sanitized graph for this cell")
                out.append(Mount(_code_graph_source(), CODE_GRAPH_SCRIPT))
                out.append(Mount(graph_file, CODE_GRAPH_DATA))
            else:
                assert server.command is not None
                cmd = Path(server.command)
                if not cmd.is_file():
                    raise ContainmentError(f"MCP server {name!r}: {cmd} is not a file")
                folder = cmd.parent
                if not any(folder == Path(t) or folder.is_relative_to(t) for t in _SYSTEM_TREES):
                    out.append(Mount(folder, str(folder)))
        out.extend(Mount(host, dest) for host, dest in self._plugin_dirs())
        return tuple(out)

    def identity(self) -> dict[str, object]:
        """What the servers and plugins add to the agent's identity (nothing when none)."""
        ident: dict[str, object] = {}
        if self._spec.mcp_servers:
            servers: dict[str, object] = {}
            for name, server in sorted(self._spec.mcp_servers.items()):
                body: dict[str, object] = server.model_dump(mode="json")
                if server.builtin == "code-graph":
                    body["source_sha256"] = sha256_file(_code_graph_source())
                servers[name] = body
            ident["mcp_servers"] = servers
        if self._spec.plugin_dirs:
            try:
                ident["plugins"] = [
                    {"dir": rel, "digest": tree_digest(host)}
                    for rel, (host, _) in zip(
                        self._spec.plugin_dirs, self._plugin_dirs(), strict=True
                    )
                ]
            except ContainmentError as e:
                ident["plugins"] = {"error": str(e)}
        return ident
