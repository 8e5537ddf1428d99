"""scripts/fault_proxy.py against a real S3 API (moto_server).

Self-contained (no conftest fixtures): uses the moto_server of scripts/test.sh
when AWS_ENDPOINT is set (bucket PARQIVF_S3_BUCKET), else starts one from the
venv (skipped when moto_server is not installed). Each test starts its own proxy
subprocess; everything started here is stopped by fixture finalizers.

Requests are plain http.client requests with a dummy SigV4 ``Authorization``
header: moto does not check signatures, but it answers anonymous (header-less)
requests for existing private objects with 403.
"""

import http.client
import os
import pathlib
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PROXY = REPO / "scripts" / "fault_proxy.py"
AUTH = {
    "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20240101/us-east-1/s3/aws4_request, "
                     "SignedHeaders=host, Signature=0000"
}
BINARY = {**AUTH, "Content-Type": "application/octet-stream"}
VERSION = "idx/versions/00000000000000000001.json"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(endpoint, method, path, body=None, headers=AUTH):
    """One request on a fresh connection: (status, headers, body)."""
    url = urllib.parse.urlsplit(endpoint)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


def wait_ready(endpoint, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            call(endpoint, "GET", "/")
            return True
        except OSError:
            time.sleep(0.05)
    return False


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def s3_bucket(request, tmp_path_factory):
    """(endpoint, bucket) of a moto_server S3 API on loopback."""
    endpoint = os.environ.get("AWS_ENDPOINT")
    if endpoint:
        if not endpoint.startswith("http://"):
            pytest.skip(f"fault_proxy speaks plain HTTP only; AWS_ENDPOINT is {endpoint}")
        if not wait_ready(endpoint, 2):
            pytest.skip(f"AWS_ENDPOINT {endpoint} does not answer")
        bucket = os.environ.get("PARQIVF_S3_BUCKET", "fault-proxy-test")
    else:
        exe = pathlib.Path(sys.executable).with_name("moto_server")
        moto = str(exe) if exe.exists() else shutil.which("moto_server")
        if moto is None:
            pytest.skip("moto_server is not installed (pip install 'moto[server]')")
        port = free_port()
        log = open(tmp_path_factory.mktemp("moto") / "moto.log", "wb")
        proc = subprocess.Popen([moto, "-H", "127.0.0.1", "-p", str(port)],
                                stdout=log, stderr=subprocess.STDOUT)
        request.addfinalizer(log.close)
        request.addfinalizer(lambda: stop(proc))
        endpoint = f"http://127.0.0.1:{port}"
        if not wait_ready(endpoint):
            pytest.skip(f"moto_server did not start on {endpoint}")
        bucket = "fault-proxy-test"
    status, _, body = call(endpoint, "PUT", f"/{bucket}")
    assert status in (200, 409), body  # 409: it exists (BucketAlreadyOwnedByYou)
    return endpoint, bucket


@pytest.fixture
def prefix(s3_bucket):
    """A fresh /bucket/key-prefix for one test's objects."""
    return f"/{s3_bucket[1]}/fault-proxy/{uuid.uuid4().hex}"


@pytest.fixture
def fault_proxy(request, s3_bucket, tmp_path):
    """Starts scripts/fault_proxy.py with extra CLI arguments; returns
    (endpoint, process, path of its stderr log)."""
    procs = []

    def start(*args):
        log = tmp_path / f"proxy-{len(procs)}.log"
        with open(log, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, str(PROXY), "--upstream", s3_bucket[0], *args],
                stdout=subprocess.PIPE, stderr=err)
        procs.append(proc)
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        line = proc.stdout.readline().decode() if ready else ""
        assert line.startswith("listening on http://127.0.0.1:"), (line, log.read_text())
        return line.split()[-1], proc, log

    def finish():
        for proc in procs:
            stop(proc)
            proc.stdout.close()

    request.addfinalizer(finish)
    return start


def test_passthrough_keep_alive_byte_exact(fault_proxy, s3_bucket, prefix):
    endpoint, proc, _ = fault_proxy()
    url = urllib.parse.urlsplit(endpoint)
    blob = os.urandom(1 << 20)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    sockets = []

    def exchange(method, path, body=None, headers=AUTH, **kw):
        conn.request(method, path, body=body, headers=headers, **kw)
        resp = conn.getresponse()
        data = resp.read()
        assert resp.getheader("Connection") == "keep-alive"
        sockets.append(conn.sock)
        return resp, data

    resp, _ = exchange("PUT", f"{prefix}/blob.parquet", blob, BINARY)
    assert resp.status == 200
    resp, data = exchange("GET", f"{prefix}/blob.parquet")
    assert resp.status == 200 and data == blob
    resp, data = exchange("HEAD", f"{prefix}/blob.parquet")
    assert resp.status == 200 and data == b""
    assert int(resp.getheader("Content-Length")) == len(blob)
    # A chunked request body is de-chunked and forwarded with a Content-Length.
    pieces = (blob[i:i + 100_000] for i in range(0, len(blob), 100_000))
    resp, _ = exchange("PUT", f"{prefix}/chunked.bin", pieces, BINARY, encode_chunked=True)
    assert resp.status == 200
    resp, data = exchange("GET", f"{prefix}/chunked.bin", headers={**AUTH, "Range": "bytes=5-"})
    assert resp.status == 206 and data == blob[5:]
    resp, _ = exchange("DELETE", f"{prefix}/blob.parquet")
    assert resp.status == 204
    resp, _ = exchange("GET", f"{prefix}/blob.parquet")
    assert resp.status == 404
    conn.close()
    # One client connection served all of them.
    assert all(s is sockets[0] for s in sockets), sockets
    # What landed in the store is byte-exact.
    status, _, data = call(s3_bucket[0], "GET", f"{prefix}/chunked.bin")
    assert status == 200 and data == blob
    assert proc.poll() is None


def test_expect_100_continue(fault_proxy, s3_bucket, prefix):
    endpoint, _, _ = fault_proxy()
    url = urllib.parse.urlsplit(endpoint)
    body = os.urandom(50_000)
    head = (f"PUT {prefix}/expect.bin HTTP/1.1\r\nHost: {url.netloc}\r\n"
            f"Authorization: {AUTH['Authorization']}\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n")
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(head.encode())
        assert sock.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        assert resp.status == 200, resp.read()
        resp.read()
    status, _, data = call(s3_bucket[0], "GET", f"{prefix}/expect.bin")
    assert status == 200 and data == body


def test_lose_response_after_conditional_put_landed(fault_proxy, s3_bucket, prefix):
    endpoint, proc, log = fault_proxy("--lose-response", "PUT .*/versions/")
    version = f"{prefix}/{VERSION}"
    conditional = {**BINARY, "If-None-Match": "*"}
    manifest = b'{"version": 1}'
    # Requests that do not match pass through.
    assert call(endpoint, "PUT", f"{prefix}/idx/data.parquet", b"PAR1", BINARY)[0] == 200
    # The matching conditional PUT lands, but its response is lost.
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        call(endpoint, "PUT", version, manifest, conditional)
    status, _, data = call(endpoint, "GET", version)
    assert status == 200 and data == manifest
    # The retry (not faulted: --times 1) meets the object the first attempt wrote.
    status, _, body = call(endpoint, "PUT", version, manifest, conditional)
    assert status == 412, body
    stop(proc)
    assert proc.returncode == 0
    lines = log.read_text().splitlines()
    assert any(f"PUT {version} -> 200 (lose-response 1/1" in line for line in lines), lines
    assert any(f"PUT {version} -> 412" in line for line in lines), lines


def test_fail_before_forwarding(fault_proxy, s3_bucket, prefix):
    endpoint, _, log = fault_proxy("--fail-before", "PUT .*/versions/", "--times", "2")
    version = f"{prefix}/{VERSION}"
    conditional = {**BINARY, "If-None-Match": "*"}
    for _ in range(2):
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            call(endpoint, "PUT", version, b"{}", conditional)
    assert call(s3_bucket[0], "GET", version)[0] == 404
    assert call(endpoint, "PUT", version, b"{}", conditional)[0] == 200
    assert "fail-before 2/2: not forwarded" in log.read_text()


def test_client_disconnect_and_delay(fault_proxy, prefix):
    endpoint, proc, _ = fault_proxy("--delay-ms", "300")
    url = urllib.parse.urlsplit(endpoint)
    # A client that goes away in the middle of a request body...
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(f"PUT {prefix}/cut HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
                     "only part".encode())
    # ... and one that sends garbage: neither stops the proxy.
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(b"NOT HTTP\r\n\r\n")
        assert sock.recv(100) == b""
    start = time.monotonic()
    assert call(endpoint, "GET", f"{prefix}/cut")[0] == 404
    assert time.monotonic() - start >= 0.3
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    assert proc.wait(5) == 0
