#!/usr/bin/env python3
"""Fault-injecting HTTP/1.1 proxy for S3-API traffic on loopback (stdlib only).

Purpose
-------
Reproduces transport faults between parqivf (the Rust ``object_store`` client)
and an S3 API such as moto_server, in particular the *lost response*: the
store applies a write, but the client never sees the answer, so its retry of
a conditional PUT (``If-None-Match: *``) meets ``412 Precondition Failed``.

Usage
-----
::

    python scripts/fault_proxy.py --upstream http://127.0.0.1:PORT \\
        [--lose-response REGEX] [--fail-before REGEX] [--times N] [--delay-ms MS]

The proxy listens on 127.0.0.1 on a free port (or ``--port``) and prints
exactly one first line to stdout, ``listening on http://127.0.0.1:<port>``;
point the client (``AWS_ENDPOINT``) at that URL. Every request is logged to
stderr as one line: method, path, status and the fault applied, if any.
SIGTERM or SIGINT stops it with exit status 0.

Faults apply to the first N (``--times``, default 1) requests whose
``METHOD PATH`` string, e.g. ``PUT /bucket/idx/versions/00000000000000000001.json``,
matches the regex (``re.search``); each regex counts its own matches. PATH is
the path part of the request target (an absolute URI is reduced to its path;
the query string is not part of it); a regex that does not match the raw,
percent-encoded path is also tried on the decoded path.

``--lose-response REGEX``
    forward the request, read the whole upstream response (the write has
    landed), then close the client connection without sending a byte of it.
``--fail-before REGEX``
    do not forward; close the client connection without a response (the write
    never happens).
``--delay-ms MS``
    sleep MS milliseconds before forwarding each request.

Forwarding
----------
Each client connection is served by its own daemon thread, which reads
requests in a loop (``Content-Length`` or chunked bodies; chunked bodies are
de-chunked and sent on with a ``Content-Length``; ``Expect: 100-continue`` is
answered by the proxy itself and not forwarded). Each request goes upstream on
a new connection with ``Connection: close``; the response is read to EOF,
re-framed with a ``Content-Length`` (HEAD, 1xx, 204 and 304 responses keep
their headers and have no body) and relayed, so the client connection stays
alive unless the client asked to close it or the upstream response was
truncated. The ``Host`` header and all other end-to-end headers are passed
through unchanged so that SigV4 signatures stay valid. Bodies are bytes
end to end.
"""

from __future__ import annotations

import argparse
import re
import signal
import socket
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from io import BytesIO
from typing import BinaryIO

MAX_LINE = 65536
MAX_HEADERS = 200
# Hop-by-hop headers (RFC 9110 section 7.6.1) plus the framing headers that the
# proxy rewrites itself; none of them is forwarded as received.
HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate",
    "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade",
}


class ClientGone(Exception):
    """The client closed its connection (between or in the middle of requests)."""


class BadMessage(Exception):
    """A request or response that does not parse as HTTP/1.x."""


@dataclass
class Message:
    start: str  # request line or status line
    headers: list[tuple[str, str]]
    body: bytes = b""
    complete: bool = True  # False: the upstream response was truncated

    def get(self, name: str) -> str | None:
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def tokens(self, name: str) -> set[str]:
        """Comma-separated, lower-cased tokens of every header named ``name``."""
        name = name.lower()
        return {
            token.strip().lower()
            for key, value in self.headers if key.lower() == name
            for token in value.split(",") if token.strip()
        }


@dataclass
class Fault:
    """One regex fault: applies to the first ``times`` matching requests."""

    name: str
    pattern: re.Pattern[str] | None
    times: int
    used: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, method: str, path: str) -> str | None:
        """Counts a match and returns a description like ``lose-response 1/1``."""
        if self.pattern is None:
            return None
        subjects = [f"{method} {path}"]
        decoded = urllib.parse.unquote(path)
        if decoded != path:
            subjects.append(f"{method} {decoded}")
        if not any(self.pattern.search(s) for s in subjects):
            return None
        with self.lock:
            if self.used >= self.times:
                return None
            self.used += 1
            return f"{self.name} {self.used}/{self.times}"


def log(message: str) -> None:
    sys.stderr.write(f"fault_proxy: {message}\n")
    sys.stderr.flush()


# --- HTTP parsing ---------------------------------------------------------

def read_line(stream: BinaryIO, *, eof_ok: bool = False) -> bytes:
    line = stream.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise BadMessage("line too long")
    if not line:
        if eof_ok:
            return b""
        raise ClientGone("EOF in the middle of a message")
    return line


def read_head(stream: BinaryIO) -> tuple[str, list[tuple[str, str]]] | None:
    """Start line and headers up to the blank line; None at a clean EOF."""
    line = read_line(stream, eof_ok=True)
    while line in (b"\r\n", b"\n"):  # tolerate blank lines between messages
        line = read_line(stream, eof_ok=True)
    if not line:
        return None
    start = line.decode("latin-1").rstrip("\r\n")
    headers: list[tuple[str, str]] = []
    while True:
        line = read_line(stream)
        if line in (b"\r\n", b"\n"):
            return start, headers
        if len(headers) >= MAX_HEADERS:
            raise BadMessage("too many headers")
        text = line.decode("latin-1").rstrip("\r\n")
        if text[:1] in (" ", "\t") and headers:  # obsolete line folding
            key, value = headers[-1]
            headers[-1] = (key, f"{value} {text.strip()}")
            continue
        key, sep, value = text.partition(":")
        if not sep or not key or key != key.strip():
            raise BadMessage(f"bad header line {text!r}")
        headers.append((key, value.strip()))


def read_exact(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise ClientGone(f"EOF after {len(data)} of {size} body bytes")
    return data


def read_chunked(stream: BinaryIO) -> bytes:
    """A chunked body, de-chunked; trailers are read and dropped."""
    parts = []
    while True:
        size_line = read_line(stream).split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise BadMessage(f"bad chunk size {size_line!r}") from None
        if size == 0:
            break
        parts.append(read_exact(stream, size))
        if read_line(stream) not in (b"\r\n", b"\n"):
            raise BadMessage("chunk not followed by CRLF")
    while read_line(stream) not in (b"\r\n", b"\n"):  # trailer section
        pass
    return b"".join(parts)


def content_length(message: Message) -> int | None:
    values = {v.strip() for k, v in message.headers if k.lower() == "content-length"}
    if not values:
        return None
    if len(values) != 1 or not next(iter(values)).isdigit():
        raise BadMessage(f"bad Content-Length {values}")
    return int(values.pop())


def serialize(start: str, headers: list[tuple[str, str]], body: bytes = b"") -> bytes:
    head = start + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return head.encode("latin-1") + body


def request_path(target: str) -> str:
    """The path part of a request target (origin form or absolute URI)."""
    if "://" in target.split("?", 1)[0]:
        return urllib.parse.urlsplit(target).path or "/"
    return target.split("?", 1)[0]


# --- The proxy ------------------------------------------------------------

class Proxy:
    def __init__(self, upstream: str, lose: Fault, fail: Fault, delay_s: float):
        url = urllib.parse.urlsplit(upstream)
        if url.scheme != "http" or not url.hostname:
            raise SystemExit(f"--upstream must be an http:// URL, not {upstream!r}")
        self.upstream = (url.hostname, url.port or 80)
        self.lose, self.fail, self.delay_s = lose, fail, delay_s

    def serve_client(self, client: socket.socket, peer: tuple) -> None:
        stream = client.makefile("rb", buffering=65536)
        try:
            while self.one_exchange(client, stream):
                pass
        except (ClientGone, BadMessage, OSError) as exc:
            log(f"client {peer[0]}:{peer[1]}: {type(exc).__name__}: {exc}")
        finally:
            stream.close()
            close_hard(client)

    def one_exchange(self, client: socket.socket, stream: BinaryIO) -> bool:
        """Serves one request; returns whether the client connection stays open."""
        head = read_head(stream)
        if head is None:
            return False
        request = Message(*head)
        try:
            method, target, version = request.start.split(" ")
        except ValueError:
            raise BadMessage(f"bad request line {request.start!r}") from None
        path = request_path(target)

        connection = request.tokens("connection")
        keep_alive = (
            "close" not in connection
            if version == "HTTP/1.1" else "keep-alive" in connection
        )
        chunked = "chunked" in request.tokens("transfer-encoding")
        length = None if chunked else content_length(request)
        if "100-continue" in request.tokens("expect") and (chunked or length):
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if chunked:
            request.body = read_chunked(stream)
        elif length:
            request.body = read_exact(stream, length)

        fault = self.fail.take(method, path)
        if fault:
            log(f"{method} {path} -> no response ({fault}: not forwarded)")
            close_hard(client)
            return False
        if self.delay_s:
            time.sleep(self.delay_s)

        # Connection-listed headers are hop-by-hop too (RFC 9110 section 7.6.1).
        drop = HOP_BY_HOP | connection | {"content-length", "expect"}
        headers = [(k, v) for k, v in request.headers if k.lower() not in drop]
        if request.body or length is not None or chunked:
            headers.append(("Content-Length", str(len(request.body))))
        headers.append(("Connection", "close"))
        try:
            response = self.forward(
                serialize(f"{method} {target} HTTP/1.1", headers, request.body), method)
        except (OSError, BadMessage) as exc:
            log(f"{method} {path} -> 502 (upstream: {type(exc).__name__}: {exc})")
            body = f"fault_proxy: upstream error: {exc}\n".encode()
            client.sendall(serialize("HTTP/1.1 502 Bad Gateway", [
                ("Content-Type", "text/plain"), ("Content-Length", str(len(body))),
                ("Connection", "close")], body))
            return False
        status = response.start.split(" ", 2)[1] if " " in response.start else "?"

        fault = self.lose.take(method, path)
        if fault:
            log(f"{method} {path} -> {status} ({fault}: response dropped)")
            close_hard(client)
            return False

        keep_alive = keep_alive and response.complete
        note = "" if response.complete else " (upstream response truncated)"
        # Logged before the client can see the answer: a client that stops
        # the proxy once answered still finds the line.
        log(f"{method} {path} -> {status}{note}")
        client.sendall(relay_bytes(response, method, keep_alive))
        return keep_alive

    def forward(self, request: bytes, method: str) -> Message:
        """Sends ``request`` on a new upstream connection; the response read to EOF."""
        with socket.create_connection(self.upstream, timeout=60) as upstream:
            upstream.sendall(request)
            chunks = []
            while data := upstream.recv(262144):
                chunks.append(data)
        return parse_response(b"".join(chunks), method)


def parse_response(raw: bytes, method: str) -> Message:
    stream = BytesIO(raw)
    while True:
        try:
            head = read_head(stream)
        except ClientGone:
            raise BadMessage("upstream closed in the middle of the headers") from None
        if head is None:
            raise BadMessage("upstream closed without a response")
        response = Message(*head)
        parts = response.start.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise BadMessage(f"bad status line {response.start!r}")
        code = int(parts[1])
        if code >= 200 or code == 101:
            break  # 1xx other than 101 are interim responses: skip them
    if method == "HEAD" or code < 200 or code in (204, 304):
        return response
    body_start = stream.tell()
    try:
        if "chunked" in response.tokens("transfer-encoding"):
            response.body = read_chunked(stream)
        elif (length := content_length(response)) is not None:
            response.body = read_exact(stream, length)
        else:
            response.body = stream.read()  # delimited by EOF: all of it
    except (ClientGone, BadMessage):
        # The body ends early (or its chunking is broken): relay it as it came,
        # with its own framing headers, and close; the client sees the fault.
        response.complete = False
        response.body = raw[body_start:]
    return response


def relay_bytes(response: Message, method: str, keep_alive: bool) -> bytes:
    """The response as sent to the client, framed by Content-Length."""
    code = int(response.start.split(" ", 2)[1])
    reason = response.start.split(" ", 2)[2] if response.start.count(" ") >= 2 else ""
    bodiless = method == "HEAD" or code < 200 or code in (204, 304)
    reframe = not bodiless and response.complete
    drop = HOP_BY_HOP | response.tokens("connection")
    if not response.complete:  # relayed verbatim: keep the upstream framing
        drop = drop - {"transfer-encoding"} - {"content-length"}
    if reframe:
        drop = drop | {"content-length"}
    headers = [(k, v) for k, v in response.headers if k.lower() not in drop]
    if reframe:
        headers.append(("Content-Length", str(len(response.body))))
    headers.append(("Connection", "keep-alive" if keep_alive else "close"))
    return serialize(f"HTTP/1.1 {code} {reason}".rstrip(), headers, response.body)


def close_hard(sock: socket.socket) -> None:
    """Shuts both directions down (the peer sees EOF at once), then closes."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Fault-injecting HTTP/1.1 proxy for S3-API traffic on loopback.")
    parser.add_argument("--upstream", required=True, help="http://HOST:PORT of the S3 API")
    parser.add_argument("--lose-response", metavar="REGEX",
                        help="forward, then close the client connection without the response")
    parser.add_argument("--fail-before", metavar="REGEX",
                        help="close the client connection without forwarding")
    parser.add_argument("--times", type=int, default=1, metavar="N",
                        help="apply each regex fault to the first N matches (default 1)")
    parser.add_argument("--delay-ms", type=float, default=0, metavar="MS",
                        help="delay every request by MS milliseconds before forwarding")
    parser.add_argument("--port", type=int, default=0, help="listen port (default: a free one)")
    args = parser.parse_args(argv)

    def fault(name: str, regex: str | None) -> Fault:
        return Fault(name, re.compile(regex) if regex is not None else None, args.times)

    proxy = Proxy(args.upstream, fault("lose-response", args.lose_response),
                  fault("fail-before", args.fail_before), args.delay_ms / 1000)

    def stop(signum, _frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", args.port))
    server.listen(128)
    print(f"listening on http://127.0.0.1:{server.getsockname()[1]}", flush=True)
    log(f"upstream {args.upstream}; lose-response={args.lose_response!r} "
        f"fail-before={args.fail_before!r} times={args.times} delay-ms={args.delay_ms:g}")
    try:
        while True:
            client, peer = server.accept()
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=proxy.serve_client, args=(client, peer),
                             daemon=True).start()
    finally:
        server.close()


if __name__ == "__main__":
    sys.exit(main())
