#!/usr/bin/env python3
"""A TCP proxy that gives every HTTP request an S3-like time to first byte.

Used by scripts/bench/lance_vs_parqivf.sh to put the same latency in front of
an S3 emulator (s3s-fs) for every client, whatever its language: parqivf's
`--store-latency` only delays parqivf's own requests, and Lance has no such
hook. Each chunk a client sends after the previous answer (a new request on a
keep-alive connection) is held for a time drawn per request: `ttfb x (1 +/-
jitter)`, or `tail` with probability `tail_share`. Responses stream back
unchanged. Python's asyncio, one process: it relays a few thousand requests a
second, far above what the benchmarks send (check `relayed` in its log).

usage: delay_proxy.py LISTEN_PORT UPSTREAM_HOST:PORT --ttfb-ms 30
           [--jitter 0.2] [--tail 0.01@500] [--seed 1]
"""
import argparse
import asyncio
import random
import sys


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("upstream")
    ap.add_argument("--ttfb-ms", type=float, required=True)
    ap.add_argument("--jitter", type=float, default=0.2)
    ap.add_argument("--tail", default="0@0", help="SHARE@MS, e.g. 0.01@500")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    share, tail_ms = (float(x) for x in a.tail.split("@"))
    host, port = a.upstream.rsplit(":", 1)
    rng = random.Random(a.seed)
    relayed = 0

    def draw() -> float:
        if rng.random() < share:
            return tail_ms / 1000
        return max(0.0, a.ttfb_ms * (1 + a.jitter * rng.uniform(-1, 1))) / 1000

    async def pipe_requests(src, dst, state):
        nonlocal relayed
        while data := await src.read(1 << 16):
            if state["answered"]:  # the first chunk of a new request
                state["answered"] = False
                relayed += 1
                await asyncio.sleep(draw())
            dst.write(data)
            await dst.drain()
        dst.close()

    async def pipe_answers(src, dst, state):
        while data := await src.read(1 << 16):
            state["answered"] = True
            dst.write(data)
            await dst.drain()
        dst.close()

    async def handle(client_r, client_w):
        try:
            up_r, up_w = await asyncio.open_connection(host, int(port))
        except OSError:
            client_w.close()
            return
        state = {"answered": True}
        try:
            await asyncio.gather(
                pipe_requests(client_r, up_w, state), pipe_answers(up_r, client_w, state)
            )
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            client_w.close()
            up_w.close()

    async def serve():
        server = await asyncio.start_server(handle, "127.0.0.1", a.port, backlog=1024)
        print(f"delay proxy :{a.port} -> {a.upstream}, ttfb {a.ttfb_ms} ms", flush=True)

        async def report():
            while True:
                await asyncio.sleep(10)
                print(f"relayed {relayed} requests", file=sys.stderr, flush=True)

        asyncio.get_running_loop().create_task(report())
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
