"""Per-arm MCP servers and plugin folders, and the bundled code-graph server.

The protocol tests drive :mod:`bench_assets.agents.mcp_code_graph` in process; the real-CLI tests
run the pinned Claude Code CLI in the sandbox against the mock Messages API (see
``tests/test_claude_code_real.py``) and check that the server is listed, connected, in
``system/init`` and answers a tool call from inside the sandbox.
"""

import io
import json
from pathlib import Path
from typing import Any

import pytest

from bench_assets.agents import mcp_code_graph
from bench_assets.agents.arm_tools import CODE_GRAPH_DATA, CODE_GRAPH_SCRIPT, ArmTools
from bench_assets.agents.base import SessionContext
from bench_assets.agents.claude_code import ClaudeCodeAdapter, parse_stream
from bench_assets.agents.claude_stream import Expectations, check_init
from bench_assets.config.models import ClaudeCodeAgent
from bench_assets.inputs.graph_index import index_python_tree
from bench_assets.kernel.errors import ContainmentError
from tests.mock_anthropic import MockMessagesAPI, steps, text, tool_results, tool_use
from tests.test_claude_code_real import KEY, MODEL, _workdir, claude_cli  # noqa: F401

SRC = {
    "calc/__init__.py": (
        "from calc.ops import add\n\n\ndef total(xs):\n    return add(xs[0], xs[1])\n"
    ),
    "calc/ops.py": "def add(a, b):\n    return a + b\n\n\ndef twice(a):\n    return add(a, a)\n",
}


def graph_of(tmp_path: Path) -> dict[str, Any]:
    root = tmp_path / "src"
    for rel, body in SRC.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)
    return index_python_tree(root)


def rpc(graph: dict[str, Any], *messages: object) -> list[dict[str, Any]]:
    out = io.StringIO()
    lines = [m if isinstance(m, str) else json.dumps(m) for m in messages]
    mcp_code_graph.serve(mcp_code_graph.Graph(graph), io.StringIO("\n".join(lines) + "\n"), out)
    return [json.loads(x) for x in out.getvalue().splitlines()]


def call(graph: dict[str, Any], tool: str, **args: object) -> Any:
    (reply,) = rpc(
        graph,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": tool, "arguments": args},
        },
    )
    result = reply["result"]
    assert not result.get("isError"), result
    return json.loads(result["content"][0]["text"])


def test_the_server_speaks_mcp_and_answers_graph_queries(tmp_path: Path) -> None:
    g = graph_of(tmp_path)
    init, listed = rpc(
        g,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}},
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    )
    assert init["result"]["protocolVersion"] == "2025-06-18"
    assert init["result"]["capabilities"] == {"tools": {"listChanged": False}}
    names = [t["name"] for t in listed["result"]["tools"]]
    assert names == ["find_definition", "callers", "callees", "search_symbols"]
    (d,) = call(g, "find_definition", name="add")
    assert (d["id"], d["path"], d["line"]) == ("function:calc.ops.add", "calc/ops.py", 1)
    callers = {c["id"] for c in call(g, "callers", symbol="calc.ops.add")}
    assert callers == {"function:calc.total", "function:calc.ops.twice"}
    assert [c["id"] for c in call(g, "callees", symbol="twice")] == ["function:calc.ops.add"]
    found = {s["id"] for s in call(g, "search_symbols", query="TW", limit=5)}
    assert found == {"function:calc.ops.twice"}


def test_the_server_survives_hostile_requests(tmp_path: Path) -> None:
    g = graph_of(tmp_path)
    replies = rpc(
        g,
        "not json",
        "[" * 50_000,
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "rm_rf"}},
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "callers", "arguments": {"symbol": 7}},
        },
        {"jsonrpc": "2.0", "id": 5, "method": "resources/list"},
        {"jsonrpc": "1.0", "id": 6, "method": "ping"},
        {"jsonrpc": "2.0", "id": 7, "method": "ping"},
    )
    assert [r.get("error", {}).get("code") for r in replies[:2]] == [-32700, -32700]
    assert (
        replies[2]["result"]["isError"]
        and "unknown tool" in replies[2]["result"]["content"][0]["text"]
    )
    assert replies[3]["result"]["isError"]
    assert replies[4]["error"]["code"] == -32601
    assert replies[5]["error"]["code"] == -32600
    assert replies[6] == {"jsonrpc": "2.0", "id": 7, "result": {}}


def agent(**kw: Any) -> ClaudeCodeAgent:
    return ClaudeCodeAgent.model_validate({"adapter": "claude-code", **kw})


def test_mcp_config_mounts_and_identity(tmp_path: Path) -> None:
    graph = tmp_path / "graph.json"
    graph.write_text("{}")
    tools = ArmTools(agent(mcp_servers={"code-graph": {"builtin": "code-graph"}}), tmp_path)
    config = json.loads(tools.mcp_config())
    server = config["mcpServers"]["code-graph"]
    assert server["type"] == "stdio" and server["args"] == [CODE_GRAPH_SCRIPT, CODE_GRAPH_DATA]
    assert server["env"] == {}  # no host value reaches a server
    dests = {m.dest: m for m in tools.mounts(graph)}
    assert set(dests) == {CODE_GRAPH_SCRIPT, CODE_GRAPH_DATA}
    assert not any(m.writable for m in dests.values())
    with pytest.raises(ContainmentError, match="no sanitized graph"):
        tools.mounts(None)
    assert "mcp_servers" in tools.identity()
    # An arm without servers or plugins adds nothing to its identity (stored cells stay reusable).
    assert ArmTools(agent(), tmp_path).identity() == {}


def test_plugin_folders_are_read_only_identified_by_content_and_confined(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    plugin = root / "plugins" / "ce"
    (plugin / "skills" / "ce-review").mkdir(parents=True)
    (plugin / "skills" / "ce-review" / "SKILL.md").write_text("v1\n")
    tools = ArmTools(agent(plugin_dirs=["plugins/ce"]), root)
    (mount,) = tools.mounts(None)
    assert mount.dest == "/wfbench-plugins/0-ce" and not mount.writable
    assert tools.plugin_dests() == ["/wfbench-plugins/0-ce"]
    before = tools.identity()
    (plugin / "skills" / "ce-review" / "SKILL.md").write_text("v2\n")
    assert tools.identity() != before
    # The attack: a plugin folder that is a symlink to somewhere outside the benchmark.
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (root / "plugins" / "link").symlink_to(outside)
    with pytest.raises(ContainmentError, match="leaves the benchmark folder"):
        ArmTools(agent(plugin_dirs=["plugins/link"]), root).mounts(None)
    with pytest.raises(ValueError, match="must not contain"):
        agent(plugin_dirs=["../x"])


def test_server_specs_are_validated() -> None:
    with pytest.raises(ValueError, match="exactly one of builtin or command"):
        agent(mcp_servers={"x": {}})
    with pytest.raises(ValueError, match="absolute path"):
        agent(mcp_servers={"x": {"command": "node"}})
    with pytest.raises(ValueError, match="must match"):
        agent(mcp_servers={"Bad Name": {"builtin": "code-graph"}})


def _want(servers: frozenset[str]) -> Expectations:
    return Expectations(
        permission_mode="bypassPermissions",
        model=MODEL,
        tools=None,
        installed_skills=frozenset(),
        expected_skill=None,
        mcp_servers=servers,
    )


def test_init_must_list_exactly_the_arms_servers_connected() -> None:
    base = {"permissionMode": "bypassPermissions", "model": MODEL, "tools": [], "skills": []}
    ok = {**base, "mcp_servers": [{"name": "code-graph", "status": "connected"}]}
    assert check_init(ok, _want(frozenset({"code-graph"}))) == ""
    failed = {**base, "mcp_servers": [{"name": "code-graph", "status": "failed"}]}
    assert "did not connect" in check_init(failed, _want(frozenset({"code-graph"})))
    assert "arm configures" in check_init(
        {**base, "mcp_servers": []}, _want(frozenset({"code-graph"}))
    )
    # a server the arm did not configure (e.g. from project settings) is refused too
    assert "arm configures none" in check_init(ok, _want(frozenset()))


def _graph_session(tmp_path: Path, cli: Path, api: MockMessagesAPI, **spec: Any):
    work = _workdir(tmp_path)
    graph = tmp_path / "graph.json"
    graph.write_text(json.dumps(index_python_tree(work)))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    arm = ClaudeCodeAgent(
        adapter="claude-code",
        executable=str(cli),
        api_base_url=api.url,
        env=["ANTHROPIC_API_KEY"],
        mcp_servers={"code-graph": {"builtin": "code-graph"}},  # type: ignore[dict-item]
        **spec,
    )
    ctx = SessionContext(
        task_id="alpha",
        arm="arm",
        run=0,
        prompt="Where is add() defined?",
        model=MODEL,
        effort=None,
        workdir=work,
        scratch=scratch,
        timeout_s=180.0,
        secrets_env={"ANTHROPIC_API_KEY": KEY},
        graph_file=graph,
    )
    return ClaudeCodeAdapter(arm, tmp_path).run(ctx)


@pytest.mark.slow
def test_real_cli_lists_the_graph_server_in_init_and_calls_it(
    tmp_path: Path,
    claude_cli: Path,  # noqa: F811
) -> None:
    ask = tool_use("toolu_g1", "mcp__code-graph__find_definition", {"name": "add"})
    with MockMessagesAPI(steps(ask, text("It is in calc/__init__.py."))) as api:
        res = _graph_session(tmp_path, claude_cli, api)
    assert res.ok, res.error_detail
    init = parse_stream(res.transcript or b"").init
    assert init is not None
    # 2.1.332 adds "source": "dynamic" to each entry; name and status are what wfbench reads.
    servers = [{k: x[k] for k in ("name", "status")} for x in init["mcp_servers"]]
    assert servers == [{"name": "code-graph", "status": "connected"}]
    assert "mcp__code-graph__find_definition" in init["tools"]
    # The server ran inside the sandbox and answered from the sanitized graph.
    answers = [r for s in api.main_loop_requests() for r in tool_results(s.body)]
    blob = json.dumps(answers)
    assert "function:calc.add" in blob and "calc/__init__.py" in blob, blob[:2000]
