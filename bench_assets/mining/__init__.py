"""Mining validated tasks from a git repository's fix commits (``wfbench import commits``).

The work is split by hazard, each module plain Python (no Dagster):

- :mod:`.history` — which commits are candidates: the first-parent history, the files each
  commit changed, which of them are tests (the repository's pytest configuration and conventional
  paths), the message; git only through :mod:`bench_assets.sandbox.gitrepo`;
- :mod:`.leaks` — what must not reach the agent: oracle test names and the fix in the prompt
  (redacted), blobs of the fix or the oracle in the base tree (rejected);
- :mod:`.validate` — the sandboxed validation: the oracle tests on the sanitized base and on the
  base with the gold patch, three times each, through the trusted runner;
- :mod:`.documents` — the typed documents: a task's ``mined.json``, the import ledger and the
  ``--json`` report;
- :mod:`.folders` — the files written: task folders (atomically), the gold replays, the ledger;
- :mod:`.importer` — the command's core: candidates → validation → task folders, gold replays,
  the ledger that makes a re-run change nothing.

May import: kernel, config, sandbox, scorers, gate, tasks, inputs, agents, runner, cells,
exports, decision, generation.
"""
