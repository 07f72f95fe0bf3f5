"""The typed declarations: ``bench.yaml`` and ``task.yaml`` as pydantic models, cron rules,
and the JSON schema written from them (``wfbench schema``).

May import: kernel.
"""
