"""The trusted test runner: ``trusted`` runs ``verify`` and the oracle in the sandbox,
``pytest_runner`` is the file that runs there, ``hygiene`` restores protected files. The tamper
canaries: ``canaries`` (what one is, what its outcome says), planted by ``canary_plant`` over
``canary_module`` (which tests may be copied), ``canary_literals`` (what a canary changes) and
``canary_source`` (the module's text), each above the next.

May import: kernel, config, sandbox, scorers, gate, tasks, inputs, agents.
"""
