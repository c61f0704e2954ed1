"""A loopback HTTP/1.1 proxy that injects faults between a real SDK and an emulator.

The proxy listens on ``127.0.0.1`` on a free port and forwards raw HTTP/1.1 to one upstream
(the emulator). Point the SDK at ``proxy.url`` instead of the emulator: S3 with
``endpoint_url=proxy.url``, GCS with ``STORAGE_EMULATOR_HOST``/``emulator_host=proxy.url``,
Azure with ``BlobEndpoint=<proxy.url>/devstoreaccount1`` in the connection string. Requests
and responses pass through unchanged (``Host`` too, so signatures still verify), except
``Expect: 100-continue`` (the proxy answers ``100 Continue`` itself) and the hop-by-hop
``Connection``/``Keep-Alive`` headers. Bodies may use ``Content-Length`` or chunked
transfer encoding.

Scripting faults. Each call adds a :class:`Rule` and returns it::

    from tests.support.faultproxy import FaultProxy, match

    with FaultProxy(emulator_url) as proxy:
        box = from_url("s3://bkt/run", endpoint_url=proxy.url)
        rule = proxy.drop_response(match(method="PUT", path=r"/k1(\\?|$)"))
        assert box.put_if_absent("k1", b"x") is True
        assert rule.hits == 1 and rule.upstream_statuses == [200]
        assert proxy.count(match(method="PUT")) == 2   # the SDK retried

* ``drop_response(when, nth=1, times=1)``: forward the request, read the store's whole
  response (so the store has acted on it), then close the client's connection without
  sending any of it: the "lost response" fault.
* ``drop_request(when, nth=1, times=1)``: close the client's connection without forwarding.
* ``respond(status, when, nth=1, times=1, body=b"", headers=None)``: answer ``status``
  instead of forwarding; the store never sees the request.
* ``fail(status=503, ...)``: ``respond`` with an empty body (500/502/503/504 are retried by
  every SDK).
* ``s3_conflict(when, ...)``: ``respond(409, ...)`` with S3's ``ConditionalRequestConflict``
  XML error body.

``when`` is a predicate on :class:`Request`; :func:`match` builds one from the method, a
regular expression searched in the request target (path and query string, as sent), header
regular expressions, and any extra predicate. A rule counts every request it matches; it
acts on matching requests number ``nth`` to ``nth + times - 1`` (1-based; ``times=None``
acts on every one from ``nth`` on). When several rules act on one request, the one added
first wins. ``rule.hits`` counts the requests a rule acted on, ``rule.fired`` is a
``threading.Event`` set on its first action, and ``proxy.requests`` lists every request
seen, in arrival order. ``proxy.clear()`` removes all rules. ``then=callback`` runs each
time the rule acts, before the client hears anything; ``then=proxy.stop_listening`` makes
every later connection attempt fail with "connection refused" (an endpoint that went away).

The proxy is for tests only: it trusts its input, buffers whole bodies in memory and opens
one upstream connection per request.
"""

from __future__ import annotations

import re
import socket
import socketserver
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, BinaryIO, cast
from urllib.parse import urlsplit

__all__ = ["S3_CONDITIONAL_CONFLICT", "FaultProxy", "Request", "Rule", "match"]

#: The body S3 sends with ``409 ConditionalRequestConflict``.
S3_CONDITIONAL_CONFLICT = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>ConditionalRequestConflict</Code>'
    b"<Message>A conflicting operation occurred. If using PutObject you can retry the "
    b"request.</Message><RequestId>faultproxy</RequestId><HostId>faultproxy</HostId></Error>"
)

_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "expect"})
_TIMEOUT = 60.0


@dataclass
class Request:
    """One request as the proxy saw it."""

    method: str
    #: The request target as sent: path and query string (``/bkt/key?x-id=PutObject``).
    target: str
    #: Headers with lowercased names (the last value wins for repeated names).
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        """The target without its query string."""
        return self.target.split("?", 1)[0]

    @property
    def query(self) -> str:
        """The query string, without ``?``."""
        return self.target.partition("?")[2]


Predicate = Callable[[Request], bool]


def match(
    method: str | None = None,
    path: str | None = None,
    headers: Mapping[str, str] | None = None,
    where: Predicate | None = None,
) -> Predicate:
    """A predicate that holds when every given criterion holds.

    Args:
        method: the HTTP method, e.g. ``"PUT"`` (case-insensitive).
        path: a regular expression searched (``re.search``) in the request target.
        headers: header name → regular expression searched in its value; the header must
            be present.
        where: any further predicate on the :class:`Request`.
    """
    pattern = re.compile(path) if path is not None else None
    header_patterns = {name.lower(): re.compile(rx) for name, rx in (headers or {}).items()}

    def predicate(request: Request) -> bool:
        if method is not None and request.method != method.upper():
            return False
        if pattern is not None and not pattern.search(request.target):
            return False
        for name, rx in header_patterns.items():
            value = request.headers.get(name)
            if value is None or not rx.search(value):
                return False
        return where is None or where(request)

    return predicate


@dataclass
class Rule:
    """A scripted fault: what to do with which matching requests."""

    when: Predicate
    action: str  # "drop-response", "drop-request" or "respond"
    nth: int = 1
    times: int | None = 1
    status: int = 0
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    #: Matching requests seen so far.
    seen: int = 0
    #: Requests this rule acted on.
    hits: int = 0
    #: Statuses the store answered to requests whose response this rule dropped.
    upstream_statuses: list[int] = field(default_factory=list)
    fired: threading.Event = field(default_factory=threading.Event)
    #: Called (in the proxy's thread) each time the rule acts, before the client hears
    #: anything: e.g. ``proxy.stop_listening`` so that the SDK's retry finds nothing there.
    then: Callable[[], None] | None = None

    def _acts_on(self) -> bool:
        """Count one matching request; whether this rule acts on it."""
        self.seen += 1
        return self.seen >= self.nth and (self.times is None or self.seen < self.nth + self.times)


class _ClientGone(Exception):
    """The client closed its connection."""


def _read_line(stream: BinaryIO) -> bytes:
    line = stream.readline(65537)
    if not line:
        raise _ClientGone
    return line


def _read_head(stream: BinaryIO) -> tuple[bytes, list[tuple[str, str]]]:
    """Read a start line and headers; raise ``_ClientGone`` at a clean EOF."""
    start = _read_line(stream)
    while start in (b"\r\n", b"\n"):  # tolerate stray blank lines between messages
        start = _read_line(stream)
    headers: list[tuple[str, str]] = []
    while True:
        line = _read_line(stream)
        if line in (b"\r\n", b"\n"):
            return start.rstrip(b"\r\n"), headers
        name, _, value = line.decode("latin-1").partition(":")
        headers.append((name.strip(), value.strip()))


def _read_exact(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise _ClientGone
    return data


def _read_chunked(stream: BinaryIO) -> tuple[bytes, bytes]:
    """Read a chunked body; return (raw bytes as sent, decoded body)."""
    raw = bytearray()
    body = bytearray()
    while True:
        line = _read_line(stream)
        raw += line
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while True:  # trailers, up to the blank line
                trailer = _read_line(stream)
                raw += trailer
                if trailer in (b"\r\n", b"\n"):
                    return bytes(raw), bytes(body)
        chunk = _read_exact(stream, size)
        raw += chunk
        body += chunk
        raw += _read_exact(stream, 2)


def _header(headers: Iterable[tuple[str, str]], name: str) -> str | None:
    found = None
    for key, value in headers:
        if key.lower() == name:
            found = value
    return found


def _read_body(stream: BinaryIO, headers: list[tuple[str, str]]) -> tuple[bytes, bytes] | None:
    """(raw, decoded) body delimited by the headers; ``None`` if not delimited."""
    if "chunked" in (_header(headers, "transfer-encoding") or "").lower():
        return _read_chunked(stream)
    length = _header(headers, "content-length")
    if length is not None:
        body = _read_exact(stream, int(length))
        return body, body
    return None


def _serialize(start: bytes, headers: Iterable[tuple[str, str]], body: bytes = b"") -> bytes:
    lines = [start] + [f"{k}: {v}".encode("latin-1") for k, v in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        proxy = self.server.proxy
        self.connection.settimeout(_TIMEOUT)
        proxy._track(self.connection, add=True)
        try:
            while self._one_exchange(proxy):
                pass
        except (_ClientGone, OSError, ValueError):
            pass
        finally:
            proxy._track(self.connection, add=False)

    def _one_exchange(self, proxy: FaultProxy) -> bool:
        """Relay one request; return whether the client connection stays open."""
        start, headers = _read_head(cast(BinaryIO, self.rfile))
        method, target, _ = start.decode("latin-1").split(" ", 2)
        if "100-continue" in (_header(headers, "expect") or "").lower():
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.wfile.flush()
        delimited = _read_body(cast(BinaryIO, self.rfile), headers)
        raw_body, body = delimited if delimited is not None else (b"", b"")
        request = Request(method, target, {k.lower(): v for k, v in headers}, body)
        rule = proxy._decide(request)
        keep_alive = "close" not in (_header(headers, "connection") or "").lower()

        if rule is not None and rule.then is not None and rule.action != "drop-response":
            rule.then()
        if rule is not None and rule.action == "drop-request":
            return False
        if rule is not None and rule.action == "respond":
            try:
                reason = HTTPStatus(rule.status).phrase
            except ValueError:
                reason = "Fault"
            reply = [("Content-Length", str(len(rule.body))), *rule.headers.items()]
            if not keep_alive:
                reply.append(("Connection", "close"))
            payload = b"" if method == "HEAD" else rule.body
            self.wfile.write(
                _serialize(f"HTTP/1.1 {rule.status} {reason}".encode(), reply, payload)
            )
            self.wfile.flush()
            return keep_alive

        forwarded = [(k, v) for k, v in headers if k.lower() not in _HOP_BY_HOP]
        forwarded.append(("Connection", "close"))
        with socket.create_connection(proxy._upstream, timeout=_TIMEOUT) as upstream:
            upstream.sendall(_serialize(start, forwarded, raw_body))
            with upstream.makefile("rb") as ustream:
                status_line, rheaders = _read_head(ustream)
                status = int(status_line.split(b" ", 2)[1])
                while 100 <= status < 200:
                    status_line, rheaders = _read_head(ustream)
                    status = int(status_line.split(b" ", 2)[1])
                if method == "HEAD" or status in (204, 304):
                    rbody: bytes | None = b""
                else:
                    read = _read_body(ustream, rheaders)
                    rbody = read[0] if read is not None else None
                if rbody is None:  # delimited by the end of the connection
                    rbody = ustream.read()
                    keep_alive = False
        if rule is not None:  # drop-response: the store has acted; the client hears nothing
            with proxy._lock:
                rule.upstream_statuses.append(status)
            if rule.then is not None:
                rule.then()
            return False
        reply = [(k, v) for k, v in rheaders if k.lower() not in _HOP_BY_HOP]
        if not keep_alive:
            reply.append(("Connection", "close"))
        self.wfile.write(_serialize(status_line, reply, rbody))
        self.wfile.flush()
        return keep_alive


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    proxy: FaultProxy


class FaultProxy:
    """A loopback proxy to one upstream HTTP server, with scripted faults.

    Args:
        upstream: the emulator's base URL, e.g. ``http://127.0.0.1:9000`` (only its host
            and port are used; the path is kept from each request).

    Use it as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream must be http://host:port, not {upstream!r}")
        self._upstream = (parts.hostname, parts.port)
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._connections: set[socket.socket] = set()
        self.requests: list[Request] = []
        self._server: _Server | None = None
        self._listening: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: where SDKs should connect."""
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        """Listen on a free loopback port and serve in a background thread."""
        server = _Server(("127.0.0.1", 0), _Handler)
        server.proxy = self
        self._server = self._listening = server
        self._thread = threading.Thread(target=server.serve_forever, name="faultproxy", daemon=True)
        self._thread.start()
        return self

    def stop_listening(self) -> None:
        """Refuse new connections from now on (connections already open carry on).

        Safe to call from a rule's ``then`` callback.
        """
        with self._lock:
            server, self._listening = self._listening, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def stop(self) -> None:
        """Stop serving and close every open connection."""
        self.stop_listening()
        if self._server is None:
            return
        self._server = None
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting ----------------------------------------------------------------------------

    def add(self, rule: Rule) -> Rule:
        """Add ``rule`` after the existing ones and return it."""
        if rule.nth < 1 or (rule.times is not None and rule.times < 1):
            raise ValueError("nth and times count from 1")
        with self._lock:
            self._rules.append(rule)
        return rule

    def drop_response(
        self,
        when: Predicate,
        nth: int = 1,
        times: int | None = 1,
        then: Callable[[], None] | None = None,
    ) -> Rule:
        """Forward, let the store act, then close the client connection with no response."""
        return self.add(Rule(when, "drop-response", nth, times, then=then))

    def drop_request(
        self,
        when: Predicate,
        nth: int = 1,
        times: int | None = 1,
        then: Callable[[], None] | None = None,
    ) -> Rule:
        """Close the client connection without forwarding the request."""
        return self.add(Rule(when, "drop-request", nth, times, then=then))

    def respond(
        self,
        status: int,
        when: Predicate,
        nth: int = 1,
        times: int | None = 1,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        then: Callable[[], None] | None = None,
    ) -> Rule:
        """Answer ``status`` (with ``body`` and ``headers``) instead of forwarding."""
        rule = Rule(when, "respond", nth, times, status, body, dict(headers or {}), then=then)
        return self.add(rule)

    def fail(self, when: Predicate, status: int = 503, nth: int = 1, times: int | None = 1) -> Rule:
        """Answer ``status`` (a 5xx) with an empty body instead of forwarding."""
        return self.respond(status, when, nth, times)

    def s3_conflict(self, when: Predicate, nth: int = 1, times: int | None = 1) -> Rule:
        """Answer S3's ``409 ConditionalRequestConflict`` instead of forwarding."""
        return self.respond(
            409, when, nth, times, S3_CONDITIONAL_CONFLICT, {"Content-Type": "application/xml"}
        )

    def clear(self) -> None:
        """Remove every rule (requests already logged stay in ``requests``)."""
        with self._lock:
            self._rules.clear()

    def count(self, when: Predicate) -> int:
        """How many requests seen so far satisfy ``when``."""
        with self._lock:
            return sum(1 for request in self.requests if when(request))

    # -- internals ----------------------------------------------------------------------------

    def _decide(self, request: Request) -> Rule | None:
        with self._lock:
            self.requests.append(request)
            chosen: Rule | None = None
            for rule in self._rules:
                if rule.when(request) and rule._acts_on() and chosen is None:
                    chosen = rule
            if chosen is not None:
                chosen.hits += 1
                chosen.fired.set()
            return chosen

    def _track(self, conn: Any, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)
