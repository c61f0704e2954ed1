"""The fault proxy itself, against a stdlib HTTP server: forwarding is faithful, faults fire
exactly on the scripted requests. The S3, GCS and Azure tests rely on both."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.faultproxy import S3_CONDITIONAL_CONFLICT, FaultProxy, match


class _Store(BaseHTTPRequestHandler):
    """Stores PUT bodies by path; GET/HEAD return them. Records every request it handles."""

    protocol_version = "HTTP/1.1"
    data: dict[str, bytes] = {}  # noqa: RUF012 - replaced per server below
    seen: list[str] = []  # noqa: RUF012 - replaced per server below

    def log_message(self, *args: object) -> None:  # keep test output quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()  # the CRLF after a chunk, or ending the trailers
                if size == 0:
                    return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def do_PUT(self) -> None:
        self.seen.append(f"PUT {self.path}")
        self.data[self.path] = self._body()
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self.seen.append(f"GET {self.path}")
        body = self.data.get(self.path)
        if body is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.seen.append(f"HEAD {self.path}")
        body = self.data.get(self.path, b"")
        self.send_response(200 if self.path in self.data else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()


@pytest.fixture
def store() -> Iterator[type[_Store]]:
    handler = type("Store", (_Store,), {"data": {}, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    yield handler
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(store: type[_Store]) -> Iterator[FaultProxy]:
    with FaultProxy(store.url) as running:  # type: ignore[attr-defined]
        yield running


def _connect(proxy: FaultProxy) -> http.client.HTTPConnection:
    port = int(proxy.url.rsplit(":", 1)[1])
    return http.client.HTTPConnection("127.0.0.1", port, timeout=10)


def test_forwards_bodies_on_one_keep_alive_connection(
    proxy: FaultProxy, store: type[_Store]
) -> None:
    conn = _connect(proxy)
    conn.request("PUT", "/a", body=b"plain")
    assert conn.getresponse().read() == b""
    # Chunked upload with Expect: 100-continue, on the same client connection.
    conn.putrequest("PUT", "/b")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.putheader("Expect", "100-continue")
    conn.endheaders()
    conn.send(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    reply = conn.getresponse()
    assert (reply.status, reply.read()) == (201, b"")
    conn.request("GET", "/b")
    assert conn.getresponse().read() == b"abcde"
    conn.request("HEAD", "/a")
    head = conn.getresponse()
    assert (head.status, head.getheader("Content-Length"), head.read()) == (200, "5", b"")
    assert store.data == {"/a": b"plain", "/b": b"abcde"}
    assert [r.method + " " + r.target for r in proxy.requests] == [
        "PUT /a",
        "PUT /b",
        "GET /b",
        "HEAD /a",
    ]


def test_drop_response_reaches_the_store_but_not_the_client(
    proxy: FaultProxy, store: type[_Store]
) -> None:
    rule = proxy.drop_response(match(method="PUT", path="^/k$"), nth=2)
    conn = _connect(proxy)
    conn.request("PUT", "/k", body=b"one")
    first = conn.getresponse()
    assert (first.status, first.read()) == (201, b"")  # the 1st matching request passes
    conn.request("PUT", "/k", body=b"two")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        conn.getresponse()
    assert store.data["/k"] == b"two"  # the store acted on the dropped request
    assert (rule.hits, rule.upstream_statuses, rule.fired.is_set()) == (1, [201], True)
    conn = _connect(proxy)
    conn.request("PUT", "/k", body=b"three")  # times=1: the 3rd passes again
    assert conn.getresponse().status == 201


def test_respond_answers_without_forwarding(proxy: FaultProxy, store: type[_Store]) -> None:
    conflict = proxy.s3_conflict(match(method="PUT", headers={"If-None-Match": r"\*"}))
    failing = proxy.fail(match(path="^/x"), status=503, times=2)
    conn = _connect(proxy)
    conn.request("PUT", "/c", body=b"v", headers={"If-None-Match": "*"})
    reply = conn.getresponse()
    assert (reply.status, reply.read()) == (409, S3_CONDITIONAL_CONFLICT)
    statuses = []
    for _ in range(3):
        conn.request("GET", "/x")
        response = conn.getresponse()
        response.read()
        statuses.append(response.status)
    assert statuses == [503, 503, 404]
    assert (conflict.hits, failing.hits, failing.seen) == (1, 2, 3)
    assert store.seen == ["GET /x"]  # only the request no rule answered reached the store


def test_drop_request_never_reaches_the_store(proxy: FaultProxy, store: type[_Store]) -> None:
    proxy.drop_request(match(method="PUT"), times=None)
    conn = _connect(proxy)
    conn.request("PUT", "/gone", body=b"v")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        conn.getresponse()
    assert store.data == {}
    assert proxy.count(match(method="PUT")) == 1
