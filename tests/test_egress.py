"""Model-API-only egress: the proxy outside the sandbox and the relay inside it.

The negative control here needs no Claude Code CLI: a ``command`` agent with
``network: model-api`` tries every way out it can think of while a loopback listener on the host
(not the API) records any connection. ``test_claude_code_real.py`` repeats it with the real CLI.
"""

import http.client
import json
import socket
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench_assets.agents.base import SessionContext
from bench_assets.agents.command import CommandAdapter
from bench_assets.config.models import CommandAgent
from bench_assets.kernel.errors import ContainmentError
from bench_assets.sandbox.egress import (
    DEFAULT_API_BASE_URL,
    ModelApiProxy,
    credential_headers,
    resolve_upstream,
)
from bench_assets.sandbox.process import EGRESS_SOCKET, Isolation, SandboxSpec, run
from tests.mock_anthropic import MockMessagesAPI, steps, text


@pytest.fixture
def decoy() -> Iterator[tuple[int, list[bytes]]]:
    """A loopback listener on the host that is not the model API; records every connection."""
    server = socket.create_server(("127.0.0.1", 0))
    hits: list[bytes] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.settimeout(2)
            try:
                hits.append(conn.recv(4096))
            except OSError:
                hits.append(b"")
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], hits
    server.shutdown(socket.SHUT_RDWR)
    thread.join(timeout=5)
    server.close()


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=10)
        self._path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self._path)


def _post(proxy: ModelApiProxy, path: str, body: Any, **headers: str) -> tuple[int, bytes]:
    conn = _UnixHTTP(proxy.channel().host_dir / EGRESS_SOCKET)
    data = json.dumps(body).encode()
    conn.request("POST", path, body=data, headers={"content-type": "application/json", **headers})
    resp = conn.getresponse()
    return resp.status, resp.read()


MESSAGE = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}


def test_agent_reaches_the_model_api_and_nothing_else(
    tmp_path: Path, decoy: tuple[int, list[bytes]]
) -> None:
    """Negative control: direct connections, proxy tricks and DNS all fail; the API answers."""
    port, hits = decoy
    probe = textwrap.dedent(
        f"""\
        import json, os, socket, urllib.request
        out = {{}}
        base = os.environ["WFBENCH_MODEL_API_URL"]
        out["same_url"] = base == os.environ["ANTHROPIC_BASE_URL"]
        req = urllib.request.Request(
            base + "/v1/messages", data=json.dumps({MESSAGE!r}).encode(),
            headers={{"content-type": "application/json"}})
        answer = json.loads(urllib.request.urlopen(req, timeout=10).read())
        out["api"] = answer["content"][0]["text"]
        for name, addr in (("direct", ("127.0.0.1", {port})), ("public", ("1.1.1.1", 443))):
            try:
                socket.create_connection(addr, timeout=3)
                out[name] = "REACHED"
            except OSError as e:
                out[name] = type(e).__name__
        host, p = base.rsplit("/", 1)[-1].split(":")
        for name, head in (
            ("absolute", b"GET http://127.0.0.1:{port}/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"),
            ("connect", b"CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"),
            ("host_header", b"GET /v1/models HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\n\\r\\n"),
        ):
            s = socket.create_connection((host, int(p)), timeout=3)
            s.sendall(head)
            out[name] = s.recv(100).split(b"\\r\\n", 1)[0].decode()
        try:
            socket.getaddrinfo("pypi.org", 443)
            out["dns"] = "RESOLVED"
        except OSError as e:
            out["dns"] = type(e).__name__
        print(json.dumps(out))
        """
    )
    scratch = tmp_path / "scratch"
    work = tmp_path / "work"
    scratch.mkdir()
    work.mkdir()
    with MockMessagesAPI(steps()) as api:
        adapter = CommandAdapter(
            CommandAgent(
                adapter="command",
                argv=["python", "-c", probe],
                network="model-api",
                api_base_url=api.url,
            )
        )
        ctx = SessionContext(
            task_id="t",
            arm="a",
            run=0,
            prompt="p",
            model="m",
            effort=None,
            workdir=work,
            scratch=scratch,
            timeout_s=60,
        )
        res = adapter.run(ctx)
        api_requests = [s.path for s in api.seen]
    assert res.ok, res.transcript
    out = json.loads((res.transcript or b"").split(b"\n", 1)[0])
    assert out["same_url"] is True
    assert out["api"] == "ok"
    assert api_requests == ["/v1/messages"]
    assert out["direct"] == "ConnectionRefusedError"
    assert out["public"] in ("OSError", "ConnectionRefusedError", "TimeoutError")
    for trick in ("absolute", "connect", "host_header"):
        assert out[trick].startswith("HTTP/1.1 403"), (trick, out[trick])
    assert out["dns"] != "RESOLVED"
    assert hits == []


def test_model_api_mode_refuses_an_open_network() -> None:
    """The modes are distinct: a model-API channel together with network=True is refused."""
    with ModelApiProxy("http://127.0.0.1:9") as proxy:
        with pytest.raises(ValueError, match="needs network=False"):
            run(
                ["true"],
                isolation=Isolation.SANDBOX,
                sandbox=SandboxSpec(network=True, model_api=proxy.channel()),
            )


def test_proxy_holds_the_credential_and_strips_the_agents_own() -> None:
    with MockMessagesAPI(steps()) as api:
        creds = credential_headers({"ANTHROPIC_API_KEY": "sk-ant-real-0123456789"})
        with ModelApiProxy(api.url, credentials=creds) as proxy:
            status, body = _post(
                proxy,
                "/v1/messages?beta=true",
                MESSAGE,
                **{"x-api-key": "placeholder", "authorization": "Bearer agent-token"},
            )
        seen = api.seen[0]
    assert status == 200 and json.loads(body)["content"][0]["text"] == "ok"
    assert seen.path == "/v1/messages?beta=true"
    assert seen.headers["x-api-key"] == "sk-ant-real-0123456789"
    assert "authorization" not in seen.headers
    assert credential_headers({"ANTHROPIC_AUTH_TOKEN": "tok-123456789"}) == {
        "authorization": "Bearer tok-123456789"
    }


@pytest.mark.parametrize("tool_type", ["web_search_20250305", "web_fetch_20250910"])
def test_proxy_refuses_server_tools_that_browse_the_web(tool_type: str) -> None:
    body = {**MESSAGE, "tools": [{"type": tool_type, "name": "web"}]}
    with MockMessagesAPI(steps()) as api:
        with ModelApiProxy(api.url) as proxy:
            status, answer = _post(proxy, "/v1/messages", body)
            stats = proxy.stats()
        assert api.seen == []
    assert status == 403
    assert "would browse the web" in json.loads(answer)["error"]["message"]
    assert "refused 1" in stats


def test_held_requests_wait_for_the_harness_and_a_refusal_reaches_nothing() -> None:
    with MockMessagesAPI(steps()) as api:
        with ModelApiProxy(api.url, hold=True) as proxy:
            answers: list[int] = []
            thread = threading.Thread(
                target=lambda: answers.append(_post(proxy, "/v1/messages", MESSAGE)[0])
            )
            thread.start()
            time.sleep(0.3)
            assert answers == [] and api.seen == []
            proxy.refuse("permission mode mismatch")
            thread.join(timeout=10)
            assert answers == [403]
            assert _post(proxy, "/v1/messages", MESSAGE)[0] == 403
        assert api.seen == []
        with ModelApiProxy(api.url, hold=True) as proxy:
            proxy.release()
            assert _post(proxy, "/v1/messages", MESSAGE)[0] == 200


def test_upstream_is_configured_or_a_named_gateway_or_the_anthropic_api() -> None:
    env = {"ANTHROPIC_BASE_URL": "https://gateway.example/anthropic/"}
    assert resolve_upstream(None, [], env) == DEFAULT_API_BASE_URL
    assert resolve_upstream(None, ["ANTHROPIC_BASE_URL"], env) == (
        "https://gateway.example/anthropic"
    )
    assert resolve_upstream("http://127.0.0.1:1", ["ANTHROPIC_BASE_URL"], env) == (
        "http://127.0.0.1:1"
    )
    with pytest.raises(ContainmentError, match="ANTHROPIC_BASE_URL"):
        resolve_upstream(None, ["ANTHROPIC_BASE_URL"], {"ANTHROPIC_BASE_URL": "file:///etc"})


def test_gateway_path_prefix_is_kept() -> None:
    with MockMessagesAPI(lambda body: text("ok")) as api:
        with ModelApiProxy(api.url + "/gw") as proxy:
            status, _ = _post(proxy, "/v1/messages", MESSAGE)
        assert [s.path for s in api.seen] == ["/gw/v1/messages"]
    assert status == 404  # the mock serves only /v1/messages: the prefix was forwarded


def test_egress_preflight_passes_and_fails_closed_when_the_channel_is_broken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bench_assets.sandbox import process as sandbox
    from bench_assets.sandbox.egress import preflight

    preflight()
    # The relay dials a socket that is not there: sessions could never reach the model API.
    monkeypatch.setattr(sandbox, "EGRESS_SOCKET", "missing.sock")
    with pytest.raises(ContainmentError, match="cannot reach the egress proxy"):
        preflight()
