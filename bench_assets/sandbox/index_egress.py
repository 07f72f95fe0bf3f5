"""The package-index egress: the one way out of a sandbox that builds a task environment.

A task environment (:mod:`bench_assets.inputs.environments`) is built by ``pip`` inside a sandbox
with no network of its own, exactly like a model-API session (:mod:`bench_assets.sandbox.egress`):
the harness runs this proxy *outside* the sandbox on a Unix socket, and the loopback relay inside
(``egress_relay.py``) turns it into ``http://127.0.0.1:<port>``, exported as ``HTTPS_PROXY`` /
``PIP_PROXY``.

What the proxy does, and nothing else: an HTTP ``CONNECT host:443`` to one of the allowed hosts
(the package index's host and, for PyPI, its file host ``files.pythonhosted.org``) becomes a
byte-for-byte TCP tunnel to that host, so TLS runs end to end between pip and the index and
certificates are checked by pip. Every other request — another host, another port, plain HTTP,
a malformed request — is refused with 403 and noted. Nothing else on the network is reachable
from the build, and cells never get this channel at all.
"""

import shutil
import socket
import socketserver
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

from bench_assets.sandbox.process import EGRESS_RELAY, EGRESS_SOCKET, ModelApiChannel

PYPI_FILE_HOST = "files.pythonhosted.org"
PROXY_EXPORTS = ("HTTPS_PROXY", "https_proxy", "PIP_PROXY")
MAX_HEADER_BYTES = 16 * 1024
MAX_REFUSALS_KEPT = 50
CONNECT_TIMEOUT_S = 30.0


def allowed_hosts(index_url: str) -> frozenset[str]:
    """The hosts a build may reach: the index's host, plus PyPI's file host for PyPI."""
    host = (urlsplit(index_url).hostname or "").lower()
    hosts = {host}
    if host == "pypi.org":
        hosts.add(PYPI_FILE_HOST)
    return frozenset(h for h in hosts if h)


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class IndexProxy:
    """A CONNECT-only proxy to an allow-list of ``host:443`` (see module docstring)."""

    def __init__(self, hosts: Iterable[str], *, port: int = 443) -> None:
        self.hosts = frozenset(h.lower() for h in hosts)
        self.port = port
        self.tunnels = 0
        self.refused: list[str] = []
        self._lock = threading.Lock()
        self._dir: Path | None = None
        self._server: _Server | None = None

    def __enter__(self) -> "IndexProxy":
        self._dir = Path(tempfile.mkdtemp(prefix="wfbench-index-"))
        relay = self._dir / EGRESS_RELAY
        shutil.copyfile(Path(__file__).with_name("egress_relay.py"), relay)
        relay.chmod(0o444)
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._handle(self.request)

        self._server = _Server(str(self._dir / EGRESS_SOCKET), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def channel(self) -> ModelApiChannel:
        """The sandbox side: the relay, exporting the proxy URL to pip's proxy variables."""
        if self._dir is None:
            raise RuntimeError("the proxy is not running")
        return ModelApiChannel(host_dir=self._dir, exports=PROXY_EXPORTS)

    def stats(self) -> str:
        """One line for a build log: tunnels opened and requests refused."""
        with self._lock:
            refused = "; ".join(self.refused[:5])
            return (
                f"index proxy opened {self.tunnels} tunnel(s) to {', '.join(sorted(self.hosts))}"
                + (f", refused {len(self.refused)}: {refused}" if self.refused else "")
            )

    def _note(self, what: str) -> None:
        with self._lock:
            if len(self.refused) < MAX_REFUSALS_KEPT:
                self.refused.append(what[:200])

    def _refuse(self, client: socket.socket, why: str) -> None:
        self._note(why)
        body = f"wfbench index proxy: {why}\n".encode()
        head = (
            "HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        ).encode()
        try:
            client.sendall(head + body)
        except OSError:
            pass

    def _handle(self, client: socket.socket) -> None:
        client.settimeout(CONNECT_TIMEOUT_S)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = client.recv(4096)
                if not chunk:
                    return
                data += chunk
                if len(data) > MAX_HEADER_BYTES:
                    self._refuse(client, "request header too large")
                    return
        except OSError:
            return
        head, _, rest = data.partition(b"\r\n\r\n")
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != "CONNECT":
            self._refuse(client, f"{line[:80]}: only CONNECT to the package index is allowed")
            return
        host, _, port = parts[1].rpartition(":")
        host = host.strip("[]").lower()
        if host not in self.hosts or port != str(self.port):
            self._refuse(client, f"CONNECT {parts[1][:80]}: not the package index")
            return
        try:
            upstream = socket.create_connection((host, self.port), timeout=CONNECT_TIMEOUT_S)
        except OSError as e:
            self._refuse(client, f"CONNECT {host}: unreachable ({type(e).__name__})")
            return
        with self._lock:
            self.tunnels += 1
        client.settimeout(None)
        upstream.settimeout(None)
        try:
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if rest:
                upstream.sendall(rest)
        except OSError:
            upstream.close()
            return
        back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
        back.start()
        _pipe(client, upstream)
        back.join()
        upstream.close()
