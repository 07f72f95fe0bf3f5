"""The task folders: the catalog and its validation, which tests an oracle defines
(``discovery``), and the importers that write task folders (SWE-bench, ``claude plugin
eval`` and skill-creator suites), and the partition sync's pure part.

May import: kernel, config, sandbox, scorers, gate.
"""
