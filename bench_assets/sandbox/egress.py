"""The egress proxy: the one way out of a sandbox whose network mode is ``model-api``.

A session's sandbox has no network (see :mod:`bench_assets.sandbox.process`, ``ModelApiChannel``).
The harness runs this proxy *outside* it, on a Unix socket in a private host folder that is mounted
into the sandbox; a relay inside turns the socket into ``http://127.0.0.1:<port>`` for the agent.

What the proxy forwards, and nothing else:

* ``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` (any query string), in origin form,
  to the one configured upstream (default the Anthropic API; an ``ANTHROPIC_BASE_URL`` gateway
  may be configured instead). The ``Host`` the agent names is ignored; absolute-form targets,
  ``CONNECT``, other methods and other paths are refused with 403, so the proxy cannot be used to
  reach any other host or API.
* Requests that declare server-side tools that browse the web (``web_search_*``,
  ``web_fetch_*``) are refused too: the model API would otherwise fetch pages on the agent's
  behalf, e.g. the upstream fix of a public repository.
* Credentials stay here: when the proxy is given credentials it removes whatever ``x-api-key`` /
  ``Authorization`` the agent sent and adds the real ones, so the session only ever holds a
  placeholder (:data:`PLACEHOLDER_CREDENTIAL`).
* Optionally every request is *held* until the harness has checked the session's first event
  (:meth:`ModelApiProxy.release` / :meth:`ModelApiProxy.refuse`), so a misconfigured session is
  stopped before a single model call is paid for.

Refusals carry ``x-should-retry: false`` so clients do not retry them for minutes.
"""

import http.client
import json
import re
import shutil
import socketserver
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

from bench_assets.config.models import check_api_base_url
from bench_assets.kernel.errors import ContainmentError
from bench_assets.sandbox.process import EGRESS_RELAY, EGRESS_SOCKET, ModelApiChannel

DEFAULT_API_BASE_URL = "https://api.anthropic.com"
ALLOWED_PATHS = frozenset({"/v1/messages", "/v1/messages/count_tokens"})
CREDENTIAL_HEADERS = {
    "ANTHROPIC_API_KEY": ("x-api-key", "{}"),
    "ANTHROPIC_AUTH_TOKEN": ("authorization", "Bearer {}"),
}
"""Credential variables the proxy can hold, and the request header each becomes."""
PLACEHOLDER_CREDENTIAL = "wfbench-egress-proxy-holds-the-real-credential"
"""What a session sees in place of a credential the proxy holds."""
BASE_URL_ENV = "ANTHROPIC_BASE_URL"
MAX_REQUEST_BYTES = 64 * 1024 * 1024
MAX_REFUSALS_KEPT = 50
_WEB_SERVER_TOOL = re.compile(r"^(web_search|web_fetch)")
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_AUTH_HEADERS = frozenset({"x-api-key", "authorization"})


def resolve_upstream(
    configured: str | None, env_names: Iterable[str], environ: Mapping[str, str]
) -> str:
    """The upstream base URL: the configured one, else a named ``ANTHROPIC_BASE_URL``, else
    the Anthropic API.

    Raises:
        ContainmentError: the host's ``ANTHROPIC_BASE_URL`` is not a plain http(s) URL.
    """
    if configured:
        return configured
    value = environ.get(BASE_URL_ENV, "") if BASE_URL_ENV in set(env_names) else ""
    if not value:
        return DEFAULT_API_BASE_URL
    try:
        return check_api_base_url(value)
    except ValueError as e:
        raise ContainmentError(f"{BASE_URL_ENV}: {e}") from e


def credential_headers(secrets: Mapping[str, str]) -> dict[str, str]:
    """The request headers the proxy adds for the credentials among ``secrets``."""
    headers: dict[str, str] = {}
    for name, (header, template) in CREDENTIAL_HEADERS.items():
        value = secrets.get(name)
        if value:
            headers[header] = template.format(value)
    return headers


class _UnixServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


class ModelApiProxy:
    """A forwarding proxy to one model API upstream, on a Unix socket (see module docstring)."""

    def __init__(
        self,
        upstream: str,
        *,
        credentials: Mapping[str, str] | None = None,
        hold: bool = False,
        timeout_s: float = 900.0,
    ) -> None:
        """Configure the proxy (it starts listening on ``__enter__``).

        Args:
            upstream: base URL every allowed request is forwarded to.
            credentials: headers to add to each request (replacing the agent's own auth
                headers); empty means the agent's headers pass through unchanged.
            hold: hold every request until :meth:`release` or :meth:`refuse` is called.
            timeout_s: upstream socket timeout, and the longest a held request waits.
        """
        self.upstream = check_api_base_url(upstream)
        parts = urlsplit(self.upstream)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._netloc = parts.netloc
        self._prefix = parts.path.rstrip("/")
        self._credentials = dict(credentials or {})
        self._timeout_s = timeout_s
        self._decided = threading.Event()
        if not hold:
            self._decided.set()
        self._refusal: str | None = None
        self._lock = threading.Lock()
        self.forwarded = 0
        self.refused: list[str] = []
        self._dir: Path | None = None
        self._server: _UnixServer | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> "ModelApiProxy":
        self._dir = Path(tempfile.mkdtemp(prefix="wfbench-egress-"))
        relay = self._dir / EGRESS_RELAY
        shutil.copyfile(Path(__file__).with_name("egress_relay.py"), relay)
        relay.chmod(0o444)
        proxy = self

        class Handler(_ProxyHandler):
            owner = proxy

        self._server = _UnixServer(str(self._dir / EGRESS_SOCKET), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.refuse("the session is over")
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def channel(self, exports: Iterable[str] = (BASE_URL_ENV,)) -> ModelApiChannel:
        """The sandbox side of this proxy, exporting its URL in ``exports``."""
        if self._dir is None:
            raise RuntimeError("the proxy is not running")
        return ModelApiChannel(host_dir=self._dir, exports=tuple(exports))

    def release(self) -> None:
        """Let held and future requests through."""
        self._decided.set()

    def refuse(self, reason: str) -> None:
        """Answer held and future requests with 403 ``reason`` (unless already released)."""
        with self._lock:
            if not self._decided.is_set():
                self._refusal = reason
        self._decided.set()

    def stats(self) -> str:
        """One line for error details: what was forwarded and what was refused."""
        with self._lock:
            refused = "; ".join(self.refused[:5])
            more = f" (+{len(self.refused) - 5} more)" if len(self.refused) > 5 else ""
            return f"egress proxy forwarded {self.forwarded} request(s) to {self.upstream}" + (
                f", refused {len(self.refused)}: {refused}{more}" if self.refused else ""
            )

    # --- one request ---------------------------------------------------------------------------

    def _note_refusal(self, what: str) -> None:
        with self._lock:
            if len(self.refused) < MAX_REFUSALS_KEPT:
                self.refused.append(what[:200])

    def handle(self, h: "_ProxyHandler") -> None:
        """Check one request and forward it, or refuse it."""
        target = h.path
        if not target.startswith("/"):
            self._refuse(h, 403, f"{h.command} {target}: only the model API is reachable")
            return
        path, _, query = target.partition("?")
        if h.command != "POST" or path not in ALLOWED_PATHS:
            self._refuse(h, 403, f"{h.command} {path}: not a model API request")
            return
        if h.headers.get("transfer-encoding"):
            self._refuse(h, 411, f"{h.command} {path}: chunked request bodies are not accepted")
            return
        try:
            length = int(h.headers.get("content-length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_REQUEST_BYTES:
            self._refuse(h, 413, f"{h.command} {path}: request body of {length} bytes")
            return
        body = h.rfile.read(length)
        problem = _body_problem(body)
        if problem:
            self._refuse(h, 403, f"{h.command} {path}: {problem}", body_read=True)
            return
        if not self._decided.wait(self._timeout_s):
            why = f"{h.command} {path}: the harness never released the session"
            self._refuse(h, 403, why, body_read=True)
            return
        if self._refusal is not None:
            self._refuse(h, 403, f"{h.command} {path}: {self._refusal}", body_read=True)
            return
        self._forward(h, path + (f"?{query}" if query else ""), body)

    def _forward(self, h: "_ProxyHandler", target: str, body: bytes) -> None:
        headers = {
            k: v
            for k, v in h.headers.items()
            if k.lower() not in _HOP_BY_HOP
            and k.lower() not in ("host", "content-length")
            and not (self._credentials and k.lower() in _AUTH_HEADERS)
        }
        headers.update(self._credentials)
        headers["host"] = self._netloc
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=self._timeout_s)
        try:
            conn.request("POST", self._prefix + target, body=body, headers=headers)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            why = f"upstream {self._netloc} unreachable: {type(e).__name__}: {e}"
            self._refuse(h, 502, why[:200], body_read=True)
            return
        with self._lock:
            self.forwarded += 1
        try:
            h.send_response(resp.status, resp.reason)
            for key, value in resp.getheaders():
                if key.lower() not in _HOP_BY_HOP:
                    h.send_header(key, value)
            h.send_header("connection", "close")
            h.end_headers()
            while chunk := resp.read1(65536):
                h.wfile.write(chunk)
                h.wfile.flush()
        except OSError:
            pass
        finally:
            h.close_connection = True
            conn.close()

    def _refuse(
        self, h: "_ProxyHandler", status: int, why: str, *, body_read: bool = False
    ) -> None:
        self._note_refusal(why)
        if not body_read and h.headers.get("content-length") and h.command not in ("GET", "HEAD"):
            try:
                h.rfile.read(min(int(h.headers["content-length"]), MAX_REQUEST_BYTES))
            except (OSError, ValueError):
                pass
        payload = {
            "type": "error",
            "error": {"type": "permission_error", "message": f"wfbench egress proxy: {why}"},
        }
        data = json.dumps(payload).encode()
        try:
            h.send_response(status)
            h.send_header("content-type", "application/json")
            h.send_header("content-length", str(len(data)))
            h.send_header("x-should-retry", "false")
            h.send_header("connection", "close")
            h.end_headers()
            h.wfile.write(data)
        except OSError:
            pass
        h.close_connection = True


def _body_problem(body: bytes) -> str:
    try:
        payload = json.loads(body) if body else {}
    except (ValueError, UnicodeDecodeError):
        return "the request body is not JSON"
    tools = payload.get("tools") if isinstance(payload, dict) else None
    for tool in tools if isinstance(tools, list) else []:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if isinstance(kind, str) and _WEB_SERVER_TOOL.match(kind):
            return f"server tool {kind!r} would browse the web on the agent's behalf"
    return ""


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: ModelApiProxy

    def log_message(self, format: str, *args: object) -> None:
        return

    def address_string(self) -> str:
        return "sandbox"

    def _dispatch(self) -> None:
        self.owner.handle(self)

    do_POST = do_GET = do_PUT = do_PATCH = do_DELETE = do_HEAD = _dispatch
    do_OPTIONS = do_CONNECT = do_TRACE = _dispatch


_PREFLIGHT_PROBE = """\
import os, socket, sys, urllib.error, urllib.request
try:
    socket.create_connection(("1.1.1.1", 443), timeout=1)
    sys.exit(3)
except OSError:
    pass
try:
    urllib.request.urlopen(os.environ["WFBENCH_MODEL_API_URL"] + "/wfbench-preflight", timeout=10)
    sys.exit(4)
except urllib.error.HTTPError as e:
    sys.exit(0 if e.code == 403 else 5)
except OSError:
    sys.exit(6)
"""


def preflight() -> None:
    """Prove the model-API channel works and is the only way out, before any paid work.

    A sandboxed probe must fail to reach a public address directly and must get the proxy's own
    403 for a path it refuses (so relay, socket mount and proxy are all in place; the upstream is
    never contacted).

    Raises:
        ContainmentError: naming what does not hold.
    """
    from bench_assets.sandbox.process import Isolation, SandboxSpec, run, sandbox_env, unsafe_mode

    if unsafe_mode():
        return
    with ModelApiProxy("http://127.0.0.1:9", timeout_s=30) as proxy:
        res = run(
            [sys.executable, "-c", _PREFLIGHT_PROBE],
            isolation=Isolation.SANDBOX,
            env=sandbox_env(),
            timeout_s=60,
            sandbox=SandboxSpec(model_api=proxy.channel(("WFBENCH_MODEL_API_URL",))),
        )
        refused = len(proxy.refused)
    reasons = {
        3: "a public address is reachable from a model-API sandbox",
        4: "the egress proxy forwarded a request it must refuse",
        5: "the egress proxy answered with an unexpected status",
        6: "the sandbox cannot reach the egress proxy through its relay",
    }
    if res.returncode in reasons or not res.ok or refused != 1:
        why = reasons.get(res.returncode, f"the probe failed (exit {res.returncode})")
        raise ContainmentError(f"egress preflight failed: {why}: {res.tail(400)}")
