"""One cell (task × arm × run) end to end: ``pipeline`` (run and identity), its worktree,
its grading (tests, review, skill-eval), its keys, and its record.

May import: kernel, config, sandbox, scorers, gate, tasks, inputs, agents, runner.
"""
