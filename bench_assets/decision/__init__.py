"""From cells to a verdict on paper: aggregates and spread, the pooled view, the typed
documents (cell views, decisions), the manifest, the hash-chained ledger, the report,
the gate's explanation and power report. The rules themselves are ``gate/``.

May import: kernel, config, sandbox, scorers, gate, tasks, inputs, agents, runner, cells,
exports.
"""
