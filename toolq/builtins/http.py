"""``http_fetch``: GET/HEAD over http(s) with server-side request forgery (SSRF) guards.

Before every connection (the first and each redirect hop, followed by hand) the URL's
scheme must be http or https, the host must pass the deny and allow lists, and every
address the host resolves to must be public: loopback, private, link-local, multicast,
reserved, unspecified and shared (CGNAT) ranges are refused, for IPv4 and IPv6, including
IPv4 embedded in IPv6 (mapped, 6to4, Teredo). ``allow_private=True``, or an IP address or
network listed in ``allow_hosts``, lets private addresses through.

The connection goes to the address that was checked (no second DNS lookup, so no DNS
rebinding between check and use), with the original host name in the ``Host`` header and,
for https, as SNI and for certificate verification. Only the standard library is used.
"""

from __future__ import annotations

import base64
import ipaddress
import socket
import ssl
import time
from collections.abc import Iterable
from http.client import HTTPConnection, HTTPException, HTTPResponse, HTTPSConnection
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

from toolq.errors import InvalidArgumentsError, ToolDeniedError, ToolExecutionError
from toolq.models import RiskLevel
from toolq.registry.tool import Tool

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_MAX_BYTES = 1024 * 1024
REDIRECTS = {301, 302, 303, 307, 308}
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript")
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_FORBIDDEN_HEADERS = {"host", "content-length", "transfer-encoding", "connection"}


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


def is_public(ip: IPAddress) -> bool:
    """True for a globally routable unicast address (also looking inside IPv6 wrappers)."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_ipv4(ip)
        if inner is not None and not is_public(inner):
            return False
    if ip.is_multicast or ip.is_unspecified or ip.is_reserved or ip.is_loopback:
        return False
    if ip.is_link_local or ip.is_private or (ip.version == 4 and ip in _SHARED):
        return False
    return ip.is_global


class _HostRules:
    """Allow/deny lists: names (``example.com``, ``*.example.com``), IPs and networks."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.names: set[str] = set()
        self.suffixes: set[str] = set()
        self.networks: list[IPNetwork] = []
        for raw in entries:
            entry = raw.strip().lower().rstrip(".")
            try:
                self.networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            if entry.startswith("*."):
                self.suffixes.add(entry[1:])
            elif entry.startswith("."):
                self.suffixes.add(entry)
            else:
                self.names.add(entry)

    def has_name(self, host: str) -> bool:
        return host in self.names or any(host.endswith(s) for s in self.suffixes)

    def has_address(self, ip: IPAddress) -> bool:
        return any(ip.version == net.version and ip in net for net in self.networks)


class _PinnedHTTPConnection(HTTPConnection):
    """Connects to a given address; ``host`` stays the name (``Host`` header)."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedHTTPSConnection(HTTPSConnection):
    """Like ``_PinnedHTTPConnection``, with TLS: SNI and certificate check use the name."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        self.tls = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self.tls)
        self.address = address

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)


class HttpFetch(Tool):
    """Fetch a URL over http or https and return its status, headers and body.

    Only public internet addresses (and hosts the operator allowed) can be reached;
    redirects are followed and each hop is checked again. Text bodies come back as
    ``text``, others base64-encoded as ``body_base64``; large bodies are cut at a size cap
    (``truncated``).
    """

    name = "http_fetch"
    risk = RiskLevel.MODERATE
    tags = ("http", "network")
    category = "http"

    def __init__(
        self,
        *,
        allow: _HostRules | None,
        deny: _HostRules,
        allow_private: bool,
        max_bytes: int,
        fetch_timeout: float,
        max_redirects: int,
        user_agent: str,
    ) -> None:
        self.allow = allow
        self.deny = deny
        self.allow_private = allow_private
        self.max_bytes = max_bytes
        self.fetch_timeout = fetch_timeout
        self.max_redirects = max_redirects
        self.user_agent = user_agent
        self.timeout = fetch_timeout + 5  # backstop over our own deadline
        super().__init__()

    def execute(
        self,
        url: str,
        method: Literal["GET", "HEAD"] = "GET",
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Fetch a URL.

        Args:
            url: An absolute http:// or https:// URL.
            method: GET for the body, HEAD for status and headers only.
            headers: Extra request headers, e.g. {"Accept": "application/json"}.

        """
        extra = dict(headers or {})
        bad = sorted(h for h in extra if h.lower() in _FORBIDDEN_HEADERS)
        if bad:
            raise InvalidArgumentsError(f"headers {', '.join(bad)} cannot be set")
        deadline = time.monotonic() + self.fetch_timeout
        hops: list[str] = []
        current = url
        origin = None
        while True:
            scheme, host, port, target = self._parse(current)
            if origin is not None and origin != (scheme, host, port):
                extra = {
                    k: v for k, v in extra.items() if k.lower() not in {"authorization", "cookie"}
                }
            origin = (scheme, host, port)
            address = self._check(current, host, port)
            response, body, truncated = self._request(
                scheme, host, port, address, target, method, extra, deadline
            )
            location = response.getheader("Location")
            if response.status in REDIRECTS and location:
                if len(hops) >= self.max_redirects:
                    raise ToolExecutionError(f"too many redirects (over {self.max_redirects})")
                hops.append(current)
                current = urljoin(current, location)
                if response.status == 303:
                    method = "GET"
                continue
            return self._result(current, response, body, truncated, hops)

    def _parse(self, url: str) -> tuple[str, str, int, str]:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise InvalidArgumentsError(f"invalid URL {url!r}: {exc}") from None
        if parts.scheme not in ("http", "https"):
            raise ToolDeniedError(
                f"URL {url!r} refused: only http and https are allowed", reason="scheme"
            )
        if parts.username is not None or parts.password is not None:
            raise ToolDeniedError(f"URL {url!r} refused: credentials in URLs are not allowed")
        if not parts.hostname:
            raise InvalidArgumentsError(f"URL {url!r} has no host")
        try:
            host = parts.hostname.rstrip(".").encode("idna").decode("ascii").lower()
        except UnicodeError:
            raise InvalidArgumentsError(f"URL {url!r} has an invalid host name") from None
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        return parts.scheme, host, port or (443 if parts.scheme == "https" else 80), target

    def _check(self, url: str, host: str, port: int) -> str:
        """The address to connect to, after the lists and the public-address rule."""

        def refuse(why: str) -> ToolDeniedError:
            return ToolDeniedError(f"URL {url!r} refused: {why}", url=url, reason="blocked_host")

        if self.deny.has_name(host):
            raise refuse(f"host {host!r} is on the deny list")
        literal = _ip_or_none(host)
        listed = self.allow is None or self.allow.has_name(host)
        if not listed and (literal is None or not self._allowed_address(literal)):
            raise refuse(f"host {host!r} is not on the allow list")
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise ToolExecutionError(f"cannot resolve {host!r}: {exc.strerror}") from None
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
        for ip in addresses:
            if self.deny.has_address(ip):
                raise refuse(f"address {ip} is on the deny list")
            if not (is_public(ip) or self.allow_private or self._allowed_address(ip)):
                raise refuse(f"{host!r} resolves to non-public address {ip}")
        return str(addresses[0])

    def _allowed_address(self, ip: IPAddress) -> bool:
        return self.allow is not None and self.allow.has_address(ip)

    def _request(
        self,
        scheme: str,
        host: str,
        port: int,
        address: str,
        target: str,
        method: str,
        headers: dict[str, str],
        deadline: float,
    ) -> tuple[HTTPResponse, bytes, bool]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ToolExecutionError(f"fetch timed out after {self.fetch_timeout:g}s")
        kind = _PinnedHTTPSConnection if scheme == "https" else _PinnedHTTPConnection
        conn = kind(host, port, address, remaining)
        try:
            conn.request(
                method,
                target,
                headers={"User-Agent": self.user_agent, "Accept-Encoding": "identity", **headers},
            )
            response = conn.getresponse()
            chunks: list[bytes] = []
            size = 0
            truncated = False
            while method != "HEAD":
                if time.monotonic() > deadline:
                    raise ToolExecutionError(f"fetch timed out after {self.fetch_timeout:g}s")
                chunk = response.read1(65536)
                if not chunk:
                    break
                if size + len(chunk) > self.max_bytes:
                    chunks.append(chunk[: self.max_bytes - size])
                    truncated = True
                    break
                chunks.append(chunk)
                size += len(chunk)
            return response, b"".join(chunks), truncated
        except (OSError, HTTPException) as exc:
            if isinstance(exc, TimeoutError):
                raise ToolExecutionError(f"fetch timed out after {self.fetch_timeout:g}s") from None
            raise ToolExecutionError(f"fetching {host!r} failed: {exc}") from None
        finally:
            conn.close()

    def _result(
        self,
        url: str,
        response: HTTPResponse,
        body: bytes,
        truncated: bool,
        hops: list[str],
    ) -> dict[str, Any]:
        content_type = response.getheader("Content-Type", "") or ""
        result: dict[str, Any] = {
            "url": url,
            "status": response.status,
            "headers": dict(response.getheaders()),
            "content_type": content_type,
            "truncated": truncated,
            "redirects": hops,
        }
        if content_type.lower().startswith(TEXT_TYPES) or not content_type:
            charset = response.headers.get_content_charset() or "utf-8"
            try:
                result["text"] = body.decode(charset, errors="replace")
            except LookupError:
                result["text"] = body.decode("utf-8", errors="replace")
        else:
            result["body_base64"] = base64.b64encode(body).decode("ascii")
        return result


def _ip_or_none(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def http(
    allow_hosts: Iterable[str] | None = None,
    deny_hosts: Iterable[str] = (),
    allow_private: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    timeout: float = 15.0,
    *,
    max_redirects: int = 5,
    user_agent: str = "toolq-http-fetch/0.1",
) -> list[Tool]:
    """``http_fetch`` (MODERATE).

    ``allow_hosts``: if given, only these hosts (names, ``*.suffix``, IPs or CIDR networks;
    listed IPs/networks are reachable even when private). ``deny_hosts``: always refused,
    same syntax. ``allow_private``: let every non-public address through. ``max_bytes`` caps
    the body; ``timeout`` bounds the whole fetch, redirects included.
    """
    return [
        HttpFetch(
            allow=_HostRules(allow_hosts) if allow_hosts is not None else None,
            deny=_HostRules(deny_hosts),
            allow_private=allow_private,
            max_bytes=max_bytes,
            fetch_timeout=timeout,
            max_redirects=max_redirects,
            user_agent=user_agent,
        )
    ]
