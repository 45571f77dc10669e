#!/usr/bin/env python3
"""`dqt serve` beside llama.cpp's llama-server on the same GGUF file, the same slots, threads and
client load, in one process run: aggregate decode tokens/s with 1..S concurrent streams, and the
time to first token of a long prompt on an idle server and on one busy with S-1 streams.

    python3 scripts/bench_serve_side_by_side.py /tmp/m154/model.gguf \\
        --llama-server /tmp/llama.cpp/build/bin/llama-server --threads 2 --parallel 8 --streams 1 2 4 8

Each server is started on a free loopback port, warmed up with one request, and driven by the
same client: /v1/completions at temperature 0 with ignore_eos (both servers honour it), so every
request generates exactly --max-tokens tokens (checked on every answer's usage counts).
Aggregate tokens/s: streams x max_tokens over the wall time from the first request sent to the
last answer (prompts included, as a client sees it), best and median of --repeats. Time to
first token: from sending a --ttft-prompt-chars prompt with max_tokens 1 to its answer, median
of --repeats, alone and while S-1 requests of --busy-tokens decode. A long prompt's stall (with
--stall-prompt-chars): one streamed request decodes while a prompt of that many characters
arrives; the figure is the longest wait between two of the stream's events while that prompt
runs, beside the stream's median wait before it, median of --repeats. Every prompt begins
differently, so no server reuses a cached prompt. Prints one JSON line per figure; only the
standard library.

    python3 scripts/bench_serve_side_by_side.py /tmp/m154L/model.gguf --context 4096 \
        --streams 1 --stall-prompt-chars 3000       # the stall only matters with a long context
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

TEXT = ("The state of the union is strong, and the people of these united states have met the "
        "trials of the age with courage. We hold these truths to be self evident, that all men are "
        "created equal, that they are endowed with certain unalienable rights, and that among these "
        "are life, liberty and the pursuit of happiness. ")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body, timeout=600):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    connection.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    return connection, connection.getresponse()


def wait_ready(port, process, log_path):
    for _ in range(1200):
        if process.poll() is not None:
            sys.exit(f"bench_serve_side_by_side: the server exited: {open(log_path).read()[-2000:]}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    process.kill()
    sys.exit("bench_serve_side_by_side: the server did not become ready in 120 s")


def start(name, a, port):
    context = a.context
    if name == "dqt":
        command = [a.dqt, "serve", a.model, "--port", str(port), "--parallel", str(a.parallel), "--threads",
                   str(a.threads), "--context", str(context), "--queue", str(a.parallel)]
    else:  # llama-server: -c is the whole KV pool, shared by the slots
        command = [a.llama_server, "-m", a.model, "--host", "127.0.0.1", "--port", str(port), "-np",
                   str(a.parallel), "-t", str(a.threads), "-tb", str(a.threads), "-c", str(context * a.parallel),
                   "--no-webui"]
    log_path = f"/tmp/bench-serve-{name}.log"
    process = subprocess.Popen(command, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    wait_ready(port, process, log_path)
    return process


def complete(port, prompt, max_tokens, marks):
    """Sends one completion and reads its answer; records (sent, answered) in marks and returns its
    usage counts. Not streamed:
    the client shares the 2 cores with the server, and a stream's per-token events would charge
    the faster server more of the client's parsing."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    sent = time.perf_counter()
    connection, response = post(port, "/v1/completions", body)
    reply = response.read()
    connection.close()
    if response.status != 200:
        raise RuntimeError(f"status {response.status}: {reply[:300]}")
    usage = json.loads(reply)["usage"]
    if usage["completion_tokens"] != max_tokens:
        raise RuntimeError(f"asked {max_tokens} tokens, got {reply[:300]}")
    marks.append((sent, time.perf_counter()))
    return usage


PROMPTS_SENT = [0]


def fresh_prompt(length_chars):
    """A prompt no earlier request began with: llama-server reuses a slot's cached prompt prefix,
    which would time a prompt it never computes."""
    PROMPTS_SENT[0] += 1
    text = f"{PROMPTS_SENT[0]}. " + TEXT * (1 + length_chars // len(TEXT))
    return text[:length_chars]


def aggregate(port, a, streams):
    """Tokens/s of each repeat."""
    rates = []
    for _ in range(a.repeats):
        marks = []
        threads = [threading.Thread(target=complete, args=(port, fresh_prompt(a.prompt_chars), a.max_tokens, marks))
                   for i in range(streams)]
        begin = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if len(marks) != streams:
            sys.exit("bench_serve_side_by_side: a stream failed")
        rates.append(streams * a.max_tokens / (max(m[1] for m in marks) - begin))
    return rates


def ttft(port, a, busy_streams):
    samples = []
    for _ in range(a.repeats):
        busy_marks, threads = [], []
        for i in range(busy_streams):
            threads.append(threading.Thread(target=complete, args=(port, fresh_prompt(a.prompt_chars), a.busy_tokens,
                                                                 busy_marks)))
            threads[-1].start()
        if busy_streams:
            time.sleep(a.busy_wait)  # their prompts are in, their decoding is on
        marks = []
        complete(port, fresh_prompt(a.ttft_prompt_chars), 1, marks)
        for t in threads:
            t.join()
        samples.append(marks[0][1] - marks[0][0])  # the whole one-token answer: a chunk may carry no text
    return statistics.median(samples)


def stall(port, a):
    """(longest wait between the live stream's events while the long prompt runs, median wait
    before it, the long prompt's time to its one-token answer), seconds."""
    body = {"prompt": fresh_prompt(a.prompt_chars), "max_tokens": a.context - a.prompt_chars - 1, "temperature": 0,
            "ignore_eos": True, "stream": True}
    connection, response = post(port, "/v1/completions", body)
    if response.status != 200:
        raise RuntimeError(f"status {response.status}: {response.read()[:300]}")
    arrivals = []

    def read_events():
        for line in response:
            if line.startswith(b"data: "):
                arrivals.append(time.perf_counter())

    reader = threading.Thread(target=read_events)
    reader.start()
    time.sleep(a.busy_wait)  # the stream is decoding
    marks = []
    complete(port, fresh_prompt(a.stall_prompt_chars), 1, marks)
    sent, answered = marks[0]
    time.sleep(a.busy_wait)  # events after the long prompt, to close the last gap in its window
    connection.sock.shutdown(socket.SHUT_RDWR)  # the reader sees the end; the server cancels the stream
    reader.join()
    connection.close()
    before = [t1 - t0 for t0, t1 in zip(arrivals, arrivals[1:]) if t1 < sent]
    during = [t1 - t0 for t0, t1 in zip(arrivals, arrivals[1:]) if t1 > sent and t0 < answered]
    if len(before) < 2 or not during:
        raise RuntimeError("stall: the live stream sent too few events around the long prompt")
    return max(during), statistics.median(before), answered - sent


def warm_up(port, a):
    """One request before the timed ones; returns its prompt's token count."""
    marks = []
    return complete(port, fresh_prompt(a.prompt_chars), a.max_tokens, marks)["prompt_tokens"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", help="a GGUF file both servers load")
    p.add_argument("--dqt", default=os.path.join(os.path.dirname(__file__), "..", "build", "dqt"))
    p.add_argument("--llama-server", help="llama.cpp's llama-server binary (omit to time dqt alone)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--parallel", type=int, default=8, help="slots of each server")
    p.add_argument("--context", type=int, default=512, help="positions per slot")
    p.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--prompt-chars", type=int, default=16, help="prompt length of the throughput streams")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--ttft-prompt-chars", type=int, default=128, help="the time-to-first-token prompt")
    p.add_argument("--busy-tokens", type=int, default=256, help="what the busy streams generate meanwhile")
    p.add_argument("--busy-wait", type=float, default=1.0, help="seconds between the busy streams and the probe")
    p.add_argument("--stall-prompt-chars", type=int, default=0,
                   help="time a live stream's longest wait while a prompt this long arrives (0: not timed)")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    if max(a.streams) > a.parallel:
        sys.exit("bench_serve_side_by_side: --streams beyond --parallel would queue, not batch")
    servers = ["dqt"] + (["llama-server"] if a.llama_server else [])
    for name in servers:
        port = free_port()
        process = start(name, a, port)
        try:
            prompt_tokens = warm_up(port, a)
            for streams in a.streams:
                rates = aggregate(port, a, streams)
                print(json.dumps({"server": name, "figure": "aggregate_tokens_per_s", "streams": streams,
                                  "best": round(max(rates), 2), "median": round(statistics.median(rates), 2),
                                  "max_tokens": a.max_tokens,
                                  "prompt_tokens": prompt_tokens, "threads": a.threads, "parallel": a.parallel}),
                      flush=True)
            if a.stall_prompt_chars:
                samples = [stall(port, a) for _ in range(a.repeats)]
                print(json.dumps({"server": name, "figure": "stall_s", "longest_wait": round(
                    statistics.median(s[0] for s in samples), 4), "wait_before": round(
                    statistics.median(s[1] for s in samples), 4), "long_prompt_answer": round(
                    statistics.median(s[2] for s in samples), 4), "prompt_chars": a.stall_prompt_chars,
                                  "threads": a.threads}), flush=True)
            for busy in (0, a.parallel - 1):
                print(json.dumps({"server": name, "figure": "ttft_s", "busy_streams": busy,
                                  "value": round(ttft(port, a, busy), 4), "prompt_chars": a.ttft_prompt_chars,
                                  "threads": a.threads}), flush=True)
        finally:
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    main()
