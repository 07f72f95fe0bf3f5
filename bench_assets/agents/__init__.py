"""Agent adapters: one interface (:class:`~bench_assets.agents.base.Adapter`), three kinds.

The adapters and what a session needs: multi-session arms (``phases``), per-arm MCP servers
and plugins (``arm_tools``, the bundled ``mcp_code_graph``), the pinned Claude Code install
(``claude_install``), replayed predictions (``predictions``, ``replay``), the free live checks
(``preflight``).

May import: kernel, config, sandbox, scorers, gate, tasks, inputs.
"""
