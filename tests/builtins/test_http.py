"""http(): SSRF guards (scheme, private addresses, lists, redirects), caps, and a real fetch."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from toolq import CallStatus, ToolRegistry
from toolq.builtins import http
from toolq.builtins.http import is_public


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if url.path == "/loop":
            self.send_response(301)
            self.send_header("Location", "/loop")
            self.end_headers()
            return
        if url.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", query["to"][0])
            self.end_headers()
            return
        if url.path == "/big":
            body = b"x" * 100_000
        elif url.path == "/slow":
            time.sleep(3)
            body = b"late"
        elif url.path == "/headers":
            body = f"host={self.headers['Host']} auth={self.headers.get('Authorization')}".encode()
        else:
            body = b"hello from the local server"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "27")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def registry(**options: object) -> ToolRegistry:
    reg = ToolRegistry()
    reg.include(http(**options))  # type: ignore[arg-type]
    return reg


def refused(reg: ToolRegistry, url: str) -> str:
    result = reg.invoke("http_fetch", {"url": url})
    assert result.status is CallStatus.FAILED, (url, result.output)
    assert result.error_type == "tool_denied", (url, result.error)
    return result.error or ""


def test_tool_shape() -> None:
    [tool] = http()
    assert tool.name == "http_fetch" and tool.risk.value == "moderate"


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "2002:7f00:1::1",
        "64:ff9b::a00:1",
    ],
)
def test_non_public_addresses(address: str) -> None:
    import ipaddress

    assert not is_public(ipaddress.ip_address(address))


def test_public_addresses() -> None:
    import ipaddress

    assert is_public(ipaddress.ip_address("93.184.216.34"))
    assert is_public(ipaddress.ip_address("2606:2800:220:1::1"))


def test_private_and_loopback_refused_by_default(server: str) -> None:
    reg = registry()
    port = server.rsplit(":", 1)[1]
    for url in [
        server + "/",
        f"http://localhost:{port}/",
        f"http://[::1]:{port}/",
        f"http://[::ffff:127.0.0.1]:{port}/",
        f"http://2130706433:{port}/",  # 127.0.0.1 as one decimal number
        f"http://0x7f.1:{port}/",
        "http://10.0.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0/",
    ]:
        assert "refused" in refused(reg, url)


def test_only_http_and_https() -> None:
    reg = registry(allow_private=True)
    for url in ["file:///etc/passwd", "ftp://example.com/", "gopher://127.0.0.1/", "data:,x"]:
        assert "only http and https" in refused(reg, url)
    assert "credentials" in refused(reg, "http://user:pw@example.com/")


def test_local_server_fetched_when_explicitly_allowed(server: str) -> None:
    for reg in (registry(allow_private=True), registry(allow_hosts=["127.0.0.1"])):
        result = reg.invoke("http_fetch", {"url": server + "/"})
        assert result.status is CallStatus.SUCCEEDED, result.error
        assert result.output["status"] == 200
        assert result.output["text"] == "hello from the local server"
        assert result.output["truncated"] is False


def test_host_header_is_the_name_while_the_checked_address_is_used(server: str) -> None:
    reg = registry(allow_private=True)
    port = server.rsplit(":", 1)[1]
    out = reg.invoke("http_fetch", {"url": f"http://localhost:{port}/headers"}).output
    assert out["text"].startswith(f"host=localhost:{port} ")


def test_allow_and_deny_lists(server: str) -> None:
    assert "allow list" in refused(registry(allow_hosts=["example.com"]), server + "/")
    assert "deny list" in refused(
        registry(allow_private=True, deny_hosts=["127.0.0.0/8"]), server + "/"
    )
    port = server.rsplit(":", 1)[1]
    assert "deny list" in refused(
        registry(allow_private=True, deny_hosts=["localhost"]), f"http://localhost:{port}/"
    )
    # a name on the allow list does not unlock the private address it resolves to
    assert "non-public" in refused(registry(allow_hosts=["localhost"]), f"http://localhost:{port}/")


def test_redirect_to_a_denied_address_is_refused(server: str) -> None:
    reg = registry(allow_hosts=["127.0.0.1"])
    for target in [
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://[::1]/",
        "file:///etc/passwd",
        "http://example.com/",
    ]:
        error = refused(reg, f"{server}/redirect?to={target}")
        assert target in error
    followed = reg.invoke("http_fetch", {"url": f"{server}/redirect?to=/"}).output
    assert followed["text"] == "hello from the local server"
    assert followed["redirects"] == [f"{server}/redirect?to=/"]
    denied = registry(allow_private=True, deny_hosts=["localhost"])
    port = server.rsplit(":", 1)[1]
    assert "deny list" in refused(denied, f"{server}/redirect?to=http://localhost:{port}/")


def test_credentials_are_dropped_on_cross_origin_redirects(server: str) -> None:
    reg = registry(allow_private=True)
    port = server.rsplit(":", 1)[1]
    same = reg.invoke(
        "http_fetch",
        {"url": f"{server}/redirect?to=/headers", "headers": {"Authorization": "Bearer t"}},
    ).output
    assert "auth=Bearer t" in same["text"]
    cross = reg.invoke(
        "http_fetch",
        {
            "url": f"{server}/redirect?to=http://localhost:{port}/headers",
            "headers": {"Authorization": "Bearer t"},
        },
    ).output
    assert "auth=None" in cross["text"]


def test_redirect_loops_stop(server: str) -> None:
    reg = registry(allow_private=True, max_redirects=2)
    result = reg.invoke("http_fetch", {"url": f"{server}/loop"})
    assert result.status is CallStatus.FAILED and "too many redirects" in (result.error or "")


def test_size_and_time_caps(server: str) -> None:
    reg = registry(allow_private=True, max_bytes=1000, timeout=1.0)
    big = reg.invoke("http_fetch", {"url": server + "/big"}).output
    assert big["truncated"] is True and len(big["text"]) == 1000
    started = time.monotonic()
    slow = reg.invoke("http_fetch", {"url": server + "/slow"})
    assert slow.status is CallStatus.FAILED and "timed out" in (slow.error or "")
    assert time.monotonic() - started < 2.5


def test_head_and_bad_headers(server: str) -> None:
    reg = registry(allow_private=True)
    head = reg.invoke("http_fetch", {"url": server + "/", "method": "HEAD"}).output
    assert head["status"] == 200 and head["text"] == ""
    bad = reg.invoke("http_fetch", {"url": server + "/", "headers": {"Host": "evil"}})
    assert bad.status is CallStatus.FAILED and "Host" in (bad.error or "")
