"""A scripted stand-in for the Anthropic Messages API, served on loopback for real-CLI tests.

It answers ``POST /v1/messages`` (streaming SSE or plain JSON) from a *script*: a function of the
request body returning the assistant's next reply. Scripts are stateless: they look at the
conversation in the request (how many assistant turns it already holds, which tool results came
back), so retries and side requests (titles, token counts) cannot derail them. Every request is
recorded for the test to inspect. Errors are answered with ``x-should-retry: false`` so the CLI
does not spend minutes retrying.
"""

import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """The assistant's next message: content blocks plus the usage it reports."""

    blocks: tuple[dict[str, Any], ...]
    stop_reason: str = "end_turn"
    input_tokens: int = 100
    output_tokens: int = 20


@dataclass(frozen=True)
class Failure:
    """An HTTP error answer, shaped like the real API's error body."""

    status: int
    error_type: str
    message: str


Script = Callable[[dict[str, Any]], "Reply | Failure"]


@dataclass
class Seen:
    """One request the mock received."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None


def text(message: str) -> Reply:
    """A final text answer."""
    return Reply(({"type": "text", "text": message},))


def tool_use(tool_id: str, name: str, tool_input: dict[str, Any]) -> Reply:
    """One tool call."""
    block = {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}
    return Reply(({"type": "text", "text": f"Calling {name}."}, block), stop_reason="tool_use")


def assistant_turns(body: dict[str, Any]) -> int:
    """How many assistant messages the conversation already holds."""
    return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")


def is_main_loop(body: dict[str, Any]) -> bool:
    """The agent loop's request (it offers tools), not a side request such as a title."""
    return bool(body.get("tools"))


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ``tool_result`` block the conversation carries, in order."""
    found = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            found += [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    return found


def steps(*replies: Reply) -> Script:
    """Reply ``replies[n]`` to the main loop's n-th turn, then a final text; side requests: text."""

    def script(body: dict[str, Any]) -> Reply | Failure:
        if not is_main_loop(body):
            return text("ok")
        n = assistant_turns(body)
        return replies[n] if n < len(replies) else text("Done.")

    return script


def always(reply: "Reply | Failure") -> Script:
    """The same answer to every request."""
    return lambda body: reply


@dataclass
class MockMessagesAPI:
    """A loopback HTTP server speaking enough of the Messages API for Claude Code."""

    script: Script
    seen: list[Seen] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def _message_id(self) -> str:
        # Unique per answer: the CLI merges assistant messages that share an id.
        with self._lock:
            return f"msg_mock_{next(self._ids)}"

    @property
    def url(self) -> str:
        """Base URL (``http://127.0.0.1:<port>``)."""
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "MockMessagesAPI":
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _record(self) -> dict[str, Any] | None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                with api._lock:
                    api.seen.append(
                        Seen(
                            self.command,
                            self.path,
                            {k.lower(): v for k, v in self.headers.items()},
                            body,
                        )
                    )
                return body if isinstance(body, dict) else None

            def do_GET(self) -> None:
                self._record()
                self._json(
                    404, {"type": "error", "error": {"type": "not_found_error", "message": "no"}}
                )

            def do_POST(self) -> None:
                body = self._record()
                path = self.path.split("?", 1)[0]
                if path == "/v1/messages/count_tokens":
                    self._json(200, {"input_tokens": 100})
                    return
                if path != "/v1/messages" or body is None:
                    self._json(
                        404,
                        {"type": "error", "error": {"type": "not_found_error", "message": path}},
                    )
                    return
                answer = api.script(body)
                if isinstance(answer, Failure):
                    self._json(
                        answer.status,
                        {
                            "type": "error",
                            "error": {"type": answer.error_type, "message": answer.message},
                        },
                        retry=False,
                    )
                    return
                model = str(body.get("model", "claude-mock"))
                if body.get("stream"):
                    self._stream(answer, model)
                else:
                    self._json(200, _message(answer, model, api._message_id()))

            def _json(self, status: int, payload: dict[str, Any], *, retry: bool = True) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", "req_mock")
                if not retry:
                    self.send_header("x-should-retry", "false")
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, reply: Reply, model: str) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("request-id", "req_mock")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                for event in _sse_events(reply, model, api._message_id()):
                    name = event["type"]
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    def main_loop_requests(self) -> list[Seen]:
        """Recorded agent-loop requests (those offering tools)."""
        with self._lock:
            return [s for s in self.seen if s.body is not None and is_main_loop(s.body)]


def _usage(reply: Reply) -> dict[str, int]:
    return {
        "input_tokens": reply.input_tokens,
        "output_tokens": reply.output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _message(reply: Reply, model: str, msg_id: str) -> dict[str, Any]:
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(reply.blocks),
        "stop_reason": reply.stop_reason,
        "stop_sequence": None,
        "usage": _usage(reply),
    }


def _sse_events(reply: Reply, model: str, msg_id: str) -> list[dict[str, Any]]:
    start = _message(Reply((), reply.stop_reason, reply.input_tokens, 1), model, msg_id)
    start["stop_reason"] = None
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(reply.blocks):
        if block["type"] == "text":
            events.append(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                }
            )
            events.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": block["text"]},
                }
            )
        else:
            head = {k: v for k, v in block.items() if k != "input"}
            events.append(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {**head, "input": {}},
                }
            )
            events.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {
                        "type": "input_json_delta",
                        "partial_json": json.dumps(block["input"]),
                    },
                }
            )
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": reply.output_tokens},
        }
    )
    events.append({"type": "message_stop"})
    return events
