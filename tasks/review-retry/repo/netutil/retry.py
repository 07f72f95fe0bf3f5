"""Retrying a call that may fail transiently."""

import time


def call_with_retry(fn, attempts: int = 3, delay_s: float = 0.1):
    """Call ``fn()``; on ConnectionError retry up to ``attempts`` times in all, then re-raise."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except ConnectionError:
            if attempt == attempts:
                raise
            time.sleep(delay_s * attempt)
    raise AssertionError("unreachable")
