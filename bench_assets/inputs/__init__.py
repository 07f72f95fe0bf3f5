"""A task's built inputs, each content-addressed: binding, oracle snapshot, sanitized
template, code graph (and its index), environment, incumbent skills, candidate overlay;
``build`` builds them for the input assets, ``input_state`` says which are stale.

May import: kernel, config, sandbox, scorers, gate, tasks.
"""
