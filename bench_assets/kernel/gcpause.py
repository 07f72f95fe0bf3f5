"""The cyclic garbage collector, paused for bounded bulk work (the one place that touches ``gc``).

A decision at 1,000 tasks builds a few hundred MB of short-lived objects: 20,000 parsed cell
events, 10,000 records, the aggregates, the gate's rows. Python's cyclic collector runs a full
collection each time enough objects survive, and each full pass walks the whole heap: nine of
them cost 1.8-1.9 s of a 13-15 s ``wfbench decide --generation`` (``gc.callbacks``, measured on
``bench/decide_scale.py``'s kept 1,000-task generation). Those objects hold no reference cycles
that matter: with the collector off the same decision peaked 7 MB higher (425 against 418 MB).

So work that is bounded (one decision, one plan) runs inside :func:`gc_paused`. Reference
counting still frees everything as usual; only the search for unreachable cycles waits until the
outermost block ends. Long-lived loops (the generation driver's wait for cells, the code
server) are never wrapped: there the collector must keep running.
"""

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_resume = False
_exits_after_command = False


def process_exits_after_command() -> None:
    """Say that this process ends when its one command returns (the ``wfbench`` console script;
    never a test calling ``main.main``, nor a server): see ``until_exit`` below."""
    global _exits_after_command
    _exits_after_command = True


@contextmanager
def gc_paused(*, until_exit: bool = False) -> Iterator[None]:
    """Pause the cyclic collector for the block (nested blocks share the outermost pause).

    The collector is switched back on when the outermost block ends, by return or by exception,
    and only if it was on when that block began. ``until_exit``: the block is a whole command
    and nothing but the process's exit follows it, so in a process that said so
    (:func:`process_exits_after_command`) the collector stays off. Switching it back on there
    only buys one collection of everything the block allocated: after a 1,000-task ``wfbench
    decide`` 0.4-0.5 s of its 8 s, for garbage the exit frees anyway.
    """
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume and not (until_exit and _exits_after_command):
                gc.enable()


def freeze_before_exit() -> None:
    """Move every object to the collector's permanent generation: the process is about to exit.

    The interpreter's shutdown runs full collections over whatever the process still holds.
    After a 1,000-task ``wfbench decide`` (a few hundred MB of cached events, records and
    suites) that took 1.6-1.8 s between the command's end and the process's; with the heap
    frozen first, 0.08 s (``bench/decide_scale.py``'s kept generation). Only for a process that
    exits next (the ``wfbench`` console script); freezing a process that lives on would keep its
    later garbage cycles for good.
    """
    gc.freeze()
