"""``python -m bench_assets.cli``: the same as the ``wfbench`` console script."""

from bench_assets.cli import main

main()
