"""A minimal synchronous publish/subscribe bus."""

from collections import defaultdict
from collections.abc import Callable
from typing import Any

Handler = Callable[..., None]


class EventBus:
    def __init__(self) -> None:
        self._handlers: dict[str, list[Handler]] = defaultdict(list)
        self.history: list[tuple[str, dict[str, Any]]] = []

    def subscribe(self, topic: str, handler: Handler) -> None:
        self._handlers[topic].append(handler)

    def publish(self, topic: str, **payload: Any) -> None:
        """Call every handler of ``topic`` with ``payload``, in subscription order."""
        self.history.append((topic, dict(payload)))
        for handler in list(self._handlers[topic]):
            handler(**payload)
