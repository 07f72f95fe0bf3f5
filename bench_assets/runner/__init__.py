"""The trusted test runner: ``trusted`` runs ``verify`` and the oracle in the sandbox,
``pytest_runner`` is the file that runs there, ``hygiene`` restores protected files,
``canaries`` are the tamper canaries.

May import: kernel, config, sandbox, scorers, gate, tasks, inputs, agents.
"""
