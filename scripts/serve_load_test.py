#!/usr/bin/env python3
"""Load test of `dqt serve`: starts it on a loopback port, sends a bounded mix of requests from
several client threads (valid, streamed, scored (echo and logprobs), streams the client abandons
after the first chunk, malformed, oversized), and checks that the server answers every one as it
should, stays up, frees every slot, and that its resident memory returns to its level after a
warm-up (the same mix, so the allocator's high-water mark of every request shape is set before
it is measured).

    python3 scripts/serve_load_test.py runs/tern/checkpoint.dqt --requests 1000 --concurrency 16

Only the standard library; loopback only. Prints one JSON object (counts by kind and status,
RSS before and after, the server's /health at the end) and exits 1 when a check failed.
"""
import argparse
import http.client
import json
import pathlib
import random
import re
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

REPO = pathlib.Path(__file__).resolve().parent.parent


def rss_kib(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def heap_in_use_bytes(pid):
    """glibc's bytes in use over all arenas (malloc_stats, through gdb; it prints to the server's
    log): what the process holds, without the freed memory its heaps keep."""
    subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "call (void)malloc_stats()"], capture_output=True,
                   check=True)
    totals = pathlib.Path("/tmp/dqt-serve-load.log").read_text().split("Total (incl. mmap):")
    found = re.search(r"in use bytes\s*=\s*([0-9]+)", totals[-1]) if len(totals) > 1 else None
    if not found:
        sys.exit("serve_load_test: no malloc_stats totals in the server's log")
    return int(found.group(1))


def add_server_arguments(parser):
    """The flags of the server a load runs against: model, --dqt, --parallel, --threads."""
    parser.add_argument("model", help="a checkpoint or GGUF file")
    parser.add_argument("--dqt", default=str(REPO / "build" / "dqt"))
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)


def start_server(dqt, model, parallel, queue, threads):
    log = open("/tmp/dqt-serve-load.log", "w")
    process = subprocess.Popen([dqt, "serve", model, "--port", "0", "--parallel", str(parallel), "--queue",
                                str(queue), "--threads", str(threads)], stdout=log, stderr=log)
    for _ in range(600):
        text = pathlib.Path("/tmp/dqt-serve-load.log").read_text()
        found = re.search(r" on http://([0-9.]+):([0-9]+)/v1", text)
        if found:
            return process, found.group(1), int(found.group(2))
        if process.poll() is not None:
            sys.exit(f"serve_load_test: dqt serve exited: {text.strip()}")
        time.sleep(0.1)
    process.kill()
    sys.exit("serve_load_test: dqt serve did not start within 60 s")


def request(host, port, method, path, body=None, read_all=True, timeout=120):
    """(status, body bytes); a stream the client abandons returns after its first chunk."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        # An abandoned stream reads its first chunk only; an error is read whole.
        data = response.read() if read_all or response.status != 200 else response.read1(64)
        return response.status, data
    finally:
        connection.close()  # an abandoned stream: the server sees the hang-up


def one(kind, host, port, context, rng):
    prompt = "The state of the Union " * rng.randint(1, 3)
    if kind == "valid":
        body = {"prompt": prompt, "max_tokens": rng.randint(1, 24), "temperature": rng.choice([0, 0.8])}
        return request(host, port, "POST", "/v1/completions", json.dumps(body))
    if kind == "chat":
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": rng.randint(1, 24)}
        return request(host, port, "POST", "/v1/chat/completions", json.dumps(body))
    if kind == "stream":
        body = {"prompt": prompt, "max_tokens": rng.randint(1, 24), "stream": True}
        return request(host, port, "POST", "/v1/completions", json.dumps(body))
    if kind == "scored":  # prompts scored (echo and logprobs; one or two), and a few tokens or none after each
        prompts = prompt if rng.random() < 0.5 else [prompt, "Fellow citizens " * rng.randint(1, 3)]
        body = {"prompt": prompts, "max_tokens": rng.randint(0, 4), "echo": True, "logprobs": rng.randint(0, 5)}
        return request(host, port, "POST", "/v1/completions", json.dumps(body))
    if kind == "abandoned":
        body = {"prompt": prompt, "max_tokens": context // 2, "stream": True}
        return request(host, port, "POST", "/v1/completions", json.dumps(body), read_all=False)
    if kind == "malformed":
        body = rng.choice(['{"prompt": ', '[1, 2, 3]', '{"prompt": 7}', '{"prompt": "a", "max_tokens": "x"}',
                           '{"prompt": "a", "temperature": -3}', '{"messages": [{"role": "robot"}]}',
                           '{"prompt": "a", "logprobs": 9}', '{"prompt": "a", "echo": true, "logprobs": "1"}',
                           '\xff\xfe not json'])
        path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        return request(host, port, "POST", path, body.encode("utf-8", "surrogateescape"))
    if kind == "oversized":
        if rng.random() < 0.5:  # a prompt longer than the context
            return request(host, port, "POST", "/v1/completions", json.dumps({"prompt": "x" * (context + 10)}))
        return request(host, port, "POST", "/v1/completions", b'{"prompt": "' + b"x" * (9 << 20) + b'"}')
    raise ValueError(kind)


EXPECTED = {  # the statuses each kind may get: 503 where every slot may be busy
    "valid": {200, 503}, "chat": {200, 503}, "stream": {200, 503}, "scored": {200, 503}, "abandoned": {200, 503},
    "malformed": {400}, "oversized": {400, 413},
}
MIX = (["valid"] * 30 + ["chat"] * 15 + ["stream"] * 20 + ["scored"] * 10 + ["abandoned"] * 10 + ["malformed"] * 15
       + ["oversized"] * 10)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_arguments(parser)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--queue", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=1000, help="requests of the mix before the idle RSS")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", choices=sorted(EXPECTED), help="a load of this kind alone (the warm-up keeps the mix)")
    parser.add_argument("--rss-every", type=int, default=0,
                        help="also record the RSS after every this many requests of the load (0: only at its end)")
    parser.add_argument("--malloc-stats", action="store_true",
                        help="with --rss-every: also record glibc's heap bytes in use after each round (needs gdb)")
    args = parser.parse_args()
    if not 1 <= args.requests <= 100000 or not 0 <= args.warmup <= 100000 or not 1 <= args.concurrency <= 256:
        sys.exit("serve_load_test: --requests must be 1..100000, --warmup 0..100000 and --concurrency 1..256")
    if args.rss_every < 0:
        sys.exit("serve_load_test: --rss-every must not be negative")

    process, host, port = start_server(args.dqt, args.model, args.parallel, args.queue, args.threads)
    failures = []
    try:
        models = json.loads(request(host, port, "GET", "/v1/models")[1])
        context = models["data"][0]["context_length"]
        # Warm-up: the load's mix (slots and caches used, scratch grown, every request shape's
        # allocations made once), then the idle RSS.
        warm = random.Random(0)
        warm_kinds = [(warm.choice(MIX), warm.randrange(1 << 30)) for _ in range(args.warmup)]

        def warm_up(kind_and_seed):
            try:
                one(kind_and_seed[0], host, port, context, random.Random(kind_and_seed[1]))
            except (OSError, http.client.HTTPException):
                pass  # counted in the load below, not here

        with ThreadPoolExecutor(args.concurrency) as pool:
            list(pool.map(warm_up, warm_kinds))
        rss_before = rss_kib(process.pid)

        rng = random.Random(args.seed)
        kinds = [rng.choice([args.only] if args.only else MIX) for _ in range(args.requests)]
        seeds = [rng.randrange(1 << 30) for _ in range(args.requests)]
        counts, lock = {}, threading.Lock()
        start = time.monotonic()

        def run(i):
            kind = kinds[i]
            try:
                status, body = one(kind, host, port, context, random.Random(seeds[i]))
            except (OSError, http.client.HTTPException) as error:
                status, body = f"error: {type(error).__name__}", b""
            ok = status in EXPECTED[kind]
            try:
                if ok and kind in ("valid", "chat") and status == 200:
                    ok = json.loads(body)["usage"]["completion_tokens"] >= 1
                if ok and kind == "scored" and status == 200:  # one entry per prompt and completion token
                    answer = json.loads(body)
                    listed = sum(len(choice["logprobs"]["token_logprobs"]) for choice in answer["choices"])
                    ok = listed == answer["usage"]["total_tokens"]
                if ok and isinstance(status, int) and status >= 400:
                    ok = "error" in json.loads(body)
            except (ValueError, KeyError):
                ok = False
            with lock:
                key = f"{kind} {status}"
                counts[key] = counts.get(key, 0) + 1
                if not ok:
                    failures.append(f"request {i} ({kind}): {status} {body[:200]!r}")

        rss_by_round, heap_by_round = [], []  # with --rss-every: after each round of that many requests
        round_size = args.rss_every or args.requests
        with ThreadPoolExecutor(args.concurrency) as pool:
            for first in range(0, args.requests, round_size):
                list(pool.map(run, range(first, min(first + round_size, args.requests))))
                if args.rss_every:
                    rss_by_round.append(rss_kib(process.pid))
                    if args.malloc_stats:
                        heap_by_round.append(heap_in_use_bytes(process.pid))
        seconds = time.monotonic() - start
        # Abandoned streams free their slots at the engine's next step.
        health = {}
        for _ in range(100):
            health = json.loads(request(host, port, "GET", "/health")[1])
            if health["slots_busy"] == 0 and health["queued"] == 0:
                break
            time.sleep(0.1)
        if health.get("slots_busy") != 0 or health.get("queued") != 0:
            failures.append(f"slots still busy after the load: {health}")
        rss_after = rss_kib(process.pid)
        if process.poll() is not None:
            failures.append("the server exited during the load")
        if rss_after > rss_before * 1.10 + 2048:
            failures.append(f"resident memory grew from {rss_before} KiB to {rss_after} KiB")
        print(json.dumps({"requests": args.requests, "concurrency": args.concurrency, "parallel": args.parallel,
                          "queue": args.queue, "seconds": round(seconds, 1), "by_kind_and_status": dict(sorted(counts.items())),
                          "rss_kib_after_warmup": rss_before, "rss_kib_after_load": rss_after,
                          "rss_kib_by_round": rss_by_round, "heap_in_use_bytes_by_round": heap_by_round,
                          "health": health,
                          "failures": failures[:20]}, indent=1))
    finally:
        process.terminate()
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            code = "killed"
        if code != 0:
            failures.append(f"dqt serve exited with {code} on SIGTERM")
            print(f"serve_load_test: dqt serve exited with {code} on SIGTERM", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
