"""The bundled code-graph MCP server: queries over a task's sanitized code graph, on stdio.

A ``claude-code`` arm that names ``{builtin: code-graph}`` among its ``mcp_servers`` gets this
server: the Claude Code CLI starts it inside the cell's sandbox (no network, like the session)
with ``python code_graph.py /wfbench-mcp/graph.json``, where the graph file is the task's
*sanitized* graph (:mod:`bench_assets.inputs.graph`, benchmark-owned files scrubbed) mounted
read-only. Graph-using skills can then be measured against arms without it.

Protocol: the Model Context Protocol's stdio transport — one JSON-RPC 2.0 message per line —
with ``initialize``, ``ping``, ``tools/list`` and ``tools/call``. Tools:

* ``find_definition(name)`` — functions, classes and modules whose name or dotted id ends with
  ``name``: kind, file and line;
* ``callers(symbol)`` / ``callees(symbol)`` — the ``calls`` edges into / out of the symbol;
* ``search_symbols(query, limit)`` — case-insensitive substring search over names and ids.

Results are bounded (``MAX_RESULTS``); a request it cannot parse gets a JSON-RPC error, never a
crash. This file imports only the standard library and nothing of wfbench, because it runs in
the sandbox where the harness package is not importable: it is mounted there as a single file.
"""

import json
import sys
from typing import Any, TextIO

SERVER_NAME = "wfbench-code-graph"
SERVER_VERSION = "1"
PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
MAX_RESULTS = 100
MAX_LINE_BYTES = 1024 * 1024

TOOLS: list[dict[str, Any]] = [
    {
        "name": "find_definition",
        "description": "Where a function, class or module is defined (file and line). Accepts a "
        "bare name (`parse_duration`) or a dotted suffix (`timebox.parse.parse_duration`).",
        "inputSchema": {
            "type": "object",
            "properties": {"name": {"type": "string", "description": "symbol name"}},
            "required": ["name"],
        },
    },
    {
        "name": "callers",
        "description": "Functions and classes in the repository that call the symbol.",
        "inputSchema": {
            "type": "object",
            "properties": {"symbol": {"type": "string", "description": "symbol name or id"}},
            "required": ["symbol"],
        },
    },
    {
        "name": "callees",
        "description": "Functions and classes in the repository that the symbol calls.",
        "inputSchema": {
            "type": "object",
            "properties": {"symbol": {"type": "string", "description": "symbol name or id"}},
            "required": ["symbol"],
        },
    },
    {
        "name": "search_symbols",
        "description": "Symbols whose name or dotted id contains the query (case-insensitive).",
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS},
            },
            "required": ["query"],
        },
    },
]


class Graph:
    """The graph's nodes and call edges, indexed for the four queries."""

    def __init__(self, data: dict[str, Any]) -> None:
        nodes = data.get("nodes", [])
        edges = data.get("edges", [])
        self.nodes: dict[str, dict[str, Any]] = {
            n["id"]: n for n in nodes if isinstance(n, dict) and isinstance(n.get("id"), str)
        }
        self.calls_out: dict[str, list[str]] = {}
        self.calls_in: dict[str, list[str]] = {}
        for e in edges:
            if not isinstance(e, dict) or e.get("kind") != "calls":
                continue
            src, dst = e.get("src"), e.get("dst")
            if isinstance(src, str) and isinstance(dst, str):
                self.calls_out.setdefault(src, []).append(dst)
                self.calls_in.setdefault(dst, []).append(src)

    def _view(self, node_id: str) -> dict[str, Any]:
        n = self.nodes.get(node_id, {"id": node_id})
        return {k: n[k] for k in ("id", "kind", "name", "path", "line") if k in n}

    def resolve(self, name: str) -> list[str]:
        """Ids of internal symbols named ``name``: exact id, dotted suffix, or bare name."""
        name = name.strip()
        if not name:
            return []
        if name in self.nodes:
            return [name]
        out = []
        for node_id, n in sorted(self.nodes.items()):
            if n.get("kind") == "external":
                continue
            dotted = node_id.split(":", 1)[-1]
            if n.get("name") == name or dotted == name or dotted.endswith("." + name):
                out.append(node_id)
        return out[:MAX_RESULTS]

    def find_definition(self, name: str) -> list[dict[str, Any]]:
        return [self._view(i) for i in self.resolve(name)]

    def _related(self, symbol: str, table: dict[str, list[str]]) -> list[dict[str, Any]]:
        out = []
        for node_id in self.resolve(symbol):
            for other in sorted(set(table.get(node_id, []))):
                out.append({"symbol": node_id, **self._view(other)})
        return out[:MAX_RESULTS]

    def callers(self, symbol: str) -> list[dict[str, Any]]:
        return self._related(symbol, self.calls_in)

    def callees(self, symbol: str) -> list[dict[str, Any]]:
        return self._related(symbol, self.calls_out)

    def search(self, query: str, limit: int = MAX_RESULTS) -> list[dict[str, Any]]:
        q = query.strip().lower()
        if not q:
            return []
        hits = [
            self._view(i)
            for i, n in sorted(self.nodes.items())
            if n.get("kind") != "external" and (q in i.lower() or q in str(n.get("name")).lower())
        ]
        return hits[: max(1, min(limit, MAX_RESULTS))]


def _text(value: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": json.dumps(value, sort_keys=True)}]}


def _call(graph: Graph, params: dict[str, Any]) -> dict[str, Any]:
    name = params.get("name")
    args = params.get("arguments") or {}
    if not isinstance(args, dict):
        raise ValueError("arguments must be an object")

    def arg(key: str) -> str:
        v = args.get(key)
        if not isinstance(v, str):
            raise ValueError(f"{name}: argument {key!r} must be a string")
        return v

    if name == "find_definition":
        return _text(graph.find_definition(arg("name")))
    if name == "callers":
        return _text(graph.callers(arg("symbol")))
    if name == "callees":
        return _text(graph.callees(arg("symbol")))
    if name == "search_symbols":
        limit = args.get("limit", MAX_RESULTS)
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise ValueError("search_symbols: limit must be an integer")
        return _text(graph.search(arg("query"), limit))
    raise LookupError(f"unknown tool {name!r}")


def handle(graph: Graph, msg: Any) -> dict[str, Any] | None:
    """The response to one JSON-RPC message (None for a notification)."""
    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
        return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "invalid"}}
    method = msg.get("method")
    msg_id = msg.get("id")
    if "id" not in msg:
        return None  # notifications (initialized, cancelled) need no answer
    params = msg.get("params") or {}
    if not isinstance(params, dict):
        params = {}
    try:
        if method == "initialize":
            asked = params.get("protocolVersion")
            version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
            result: dict[str, Any] = {
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": SERVER_NAME, "version": SERVER_VERSION},
            }
        elif method == "ping":
            result = {}
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call":
            try:
                result = _call(graph, params)
            except (ValueError, LookupError) as e:
                result = {"content": [{"type": "text", "text": str(e)}], "isError": True}
        else:
            return {
                "jsonrpc": "2.0",
                "id": msg_id,
                "error": {"code": -32601, "message": f"method not found: {method}"},
            }
    except Exception as e:  # noqa: BLE001 - a server must answer, never die on one request
        return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32603, "message": str(e)}}
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


def serve(graph: Graph, inp: TextIO, out: TextIO) -> None:
    """Answer line-delimited JSON-RPC messages until end of input."""
    for line in inp:
        if not line.strip():
            continue
        if len(line) > MAX_LINE_BYTES:
            reply: dict[str, Any] | None = {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32600, "message": "message too large"},
            }
        else:
            try:
                reply = handle(graph, json.loads(line))
            except (json.JSONDecodeError, RecursionError):
                reply = {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {"code": -32700, "message": "parse error"},
                }
        if reply is not None:
            out.write(json.dumps(reply) + "\n")
            out.flush()


def main(argv: list[str] | None = None) -> int:
    """``code_graph.py GRAPH_JSON``: serve the graph on stdin/stdout."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: code_graph.py GRAPH_JSON\n")
        return 2
    try:
        with open(args[0], encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as e:
        sys.stderr.write(f"code-graph: cannot read {args[0]}: {e}\n")
        return 1
    serve(Graph(data if isinstance(data, dict) else {}), sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
