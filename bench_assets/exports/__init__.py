"""Cell records in the shapes other tools read (``wfbench export``): SWE-bench's report and
one row per cell (``results``), and ``claude plugin eval``'s result document and tables
for skill-eval suites (``plugin_eval``).

May import: kernel, config, sandbox, scorers, gate, tasks, inputs, agents, runner, cells.
"""
