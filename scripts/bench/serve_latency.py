#!/usr/bin/env python3
"""serve_latency.py URL QUERIES.npy GT.npy [--k 10] [--nprobe N] [--rerank R] [--n 300] [--token T]
    [--warm-novel M | --no-warming] [--client httplib|one-write] [--packed]
One query per HTTP request to a running `parqivf serve`, sequentially on one
keep-alive connection (the storage-resident target of issue 12): a warming
pass, then the measured pass over the first N queries; prints one JSON line
with p50/p99 latency in ms, QPS and recall@k against GT. With
--idle-floor MS it also measures the host's own floor for a request that
waits MS first: GET /healthz, 100 times on the same connection, each after
the client slept MS (the server and client idle meanwhile, as during a
query's round of that time to first byte), and adds its p50 as
idle_floor_p50_ms: what any server pays on this host to answer after an
idle wait, beyond the wait itself (and idle_floor_mean_ms). With
--idle-floor 0 the 1,000 requests go back to back: the floor of an HTTP
exchange on this connection, with this client, however fast the server's
search. The warming pass
sends the same N queries, or with --warm-novel M the M queries after them,
so that a cache of postings lists is measured on queries it never saw, or
with --no-warming none (a first pass over empty caches).

--client picks the HTTP client: `httplib` (Python's http.client, the
default, as every earlier figure) or `one-write` (each request written in
one send, as curl sends a small POST, and the response read by its
Content-Length). http.client sends a body over 2,000 bytes (a 128-d query
in JSON is about 2,300) in a second send after the headers, and parses the
response headers with the email package: on a 2-vCPU host that was about
0.1 ms a request, which the server does not spend. --packed sends each
vector as base64 of its little-endian floats (docs/http.md): a 128-d query
is then a 700-byte body, which http.client sends with its headers."""
import argparse, base64, http.client, json, socket, time, urllib.parse
import numpy as np


class OneWrite:
    """A keep-alive HTTP/1.1 client that writes each request in one send."""

    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.file = self.sock.makefile("rb")

    def request(self, method, path, body=None, headers=None):
        body = body.encode() if isinstance(body, str) else (body or b"")
        head = [f"{method} {path} HTTP/1.1", "Host: parqivf", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        status = int(self.file.readline().split()[1])
        length = None
        while (line := self.file.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            elif name.strip().lower() == b"transfer-encoding":
                raise SystemExit("one-write client: chunked responses are not read")
        if length is None:
            raise SystemExit("one-write client: a response without Content-Length")
        return status, self.file.read(length)


class HttpLib:
    """Python's http.client on one keep-alive connection."""

    def __init__(self, host, port):
        self.conn = http.client.HTTPConnection(host, port)

    def request(self, method, path, body=None, headers=None):
        self.conn.request(method, path, body=body, headers=headers or {})
        resp = self.conn.getresponse()
        return resp.status, resp.read()

ap = argparse.ArgumentParser()
ap.add_argument("url"); ap.add_argument("queries"); ap.add_argument("gt")
ap.add_argument("--k", type=int, default=10); ap.add_argument("--nprobe", type=int, default=None,
                help="lists a query probes; without it the server's default (the index's recall target)")
ap.add_argument("--rerank", type=int, default=None); ap.add_argument("--n", type=int, default=300)
ap.add_argument("--label", default="")
ap.add_argument("--token", default=None, help="bearer token of a server started with one")
ap.add_argument("--warm-novel", type=int, default=0,
                help="warm with the M queries after the measured ones instead of the measured ones")
ap.add_argument("--idle-floor", type=float, default=None, metavar="MS",
                help="also measure GET /healthz after MS ms of idling (the host's wake-up floor)")
ap.add_argument("--no-warming", action="store_true",
                help="no warming pass: measure the first pass over the server's caches")
ap.add_argument("--client", choices=("httplib", "one-write"), default="httplib",
                help="the HTTP client (see the module's docstring)")
ap.add_argument("--packed", action="store_true",
                help="send each vector packed: base64 of its little-endian floats (docs/http.md)")
a = ap.parse_args()
every = np.load(a.queries).astype(np.float32)
q = every[: a.n]
warming = every[a.n : a.n + a.warm_novel] if a.warm_novel else q
gt = np.load(a.gt)[: a.n, : a.k]
u = urllib.parse.urlparse(a.url)
conn = (OneWrite if a.client == "one-write" else HttpLib)(u.hostname, u.port)
lat, hits = [], 0
headers = {"Content-Type": "application/json"}
if a.token:
    headers["Authorization"] = f"Bearer {a.token}"
for warm in ((False,) if a.no_warming else (True, False)):
    for i in range(len(warming if warm else q)):
        v = (warming if warm else q)[i]
        body = {"vector": base64.b64encode(v.astype("<f4").tobytes()).decode() if a.packed else v.tolist(),
                "k": a.k}
        if a.nprobe is not None:
            body["nprobe"] = a.nprobe
        if a.rerank is not None:
            body["rerank"] = a.rerank
        data = json.dumps(body)
        t = time.perf_counter()
        status, out = conn.request("POST", u.path, body=data, headers=headers)
        dt = time.perf_counter() - t
        if status != 200:
            raise SystemExit(f"HTTP {status}: {out[:300]!r}")
        if not warm:
            lat.append(dt)
            ids = [h["rowid"] for h in json.loads(out)["results"][0]["hits"]]
            hits += len(set(ids) & set(gt[i].tolist()))
lat = np.array(lat) * 1000
out = {"label": a.label, "client": a.client, "packed": a.packed, "nprobe": a.nprobe, "rerank": a.rerank, "queries": len(q),
       "p50_ms": round(float(np.percentile(lat, 50)), 3), "p99_ms": round(float(np.percentile(lat, 99)), 3),
       "qps": round(len(q) / (lat.sum() / 1000), 1), "recall": round(hits / (len(q) * a.k), 4)}
if a.idle_floor is not None:
    floor = []
    for _ in range(100 if a.idle_floor > 0 else 1000):
        if a.idle_floor > 0:
            time.sleep(a.idle_floor / 1000)
        t = time.perf_counter()
        conn.request("GET", "/healthz")
        floor.append((time.perf_counter() - t) * 1000)
    out["idle_floor_p50_ms"] = round(float(np.percentile(floor, 50)), 3)
    out["idle_floor_mean_ms"] = round(float(np.mean(floor)), 3)
print(json.dumps(out), flush=True)
