"""The shared kernel: the gateways every room uses and no domain owns.

``errors`` (the one error tree), ``errorkinds`` (how a cell failed), ``fsutil`` (every
atomic write, fsync and lock), ``hashing`` (every digest), ``store`` (every artifact path).

May import: nothing of bench_assets outside this room.
"""
