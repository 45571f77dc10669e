#!/usr/bin/env python3
"""Resident memory of `dqt serve` under its largest steps: after start-up, after --parallel long
prompts sent at once (each a prompt chunk in every slot), then after as many scored at once
(`echo` with `logprobs`). The server's memory should be set at start-up, not by these.

    python3 scripts/serve_long_prompt_memory.py /tmp/m2b/model.gguf --repeats 20

Prompts are "The state of the Union " repeated --repeats times (on a byte-level vocabulary, 23
tokens a repeat). Prints one JSON object.
"""
import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor

from serve_load_test import add_server_arguments, request, rss_kib, start_server


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_arguments(parser)
    parser.add_argument("--repeats", type=int, default=20, help="of the prompt's phrase")
    args = parser.parse_args()
    if not 1 <= args.parallel <= 64 or not 1 <= args.repeats <= 10000:
        sys.exit("serve_long_prompt_memory: --parallel must be 1..64 and --repeats 1..10000")

    process, host, port = start_server(args.dqt, args.model, args.parallel, 0, args.threads)
    try:
        prompt = "The state of the Union " * args.repeats
        result = {"model": args.model, "dqt": args.dqt, "parallel": args.parallel,
                  "rss_mib_after_start": round(rss_kib(process.pid) / 1024)}
        for name, extra in (("long", {}), ("scored", {"echo": True, "logprobs": 1})):
            body = json.dumps({"prompt": prompt, "max_tokens": 1, **extra})
            with ThreadPoolExecutor(args.parallel) as pool:
                answers = list(pool.map(lambda _: request(host, port, "POST", "/v1/completions", body),
                                        range(args.parallel)))
            statuses = sorted({status for status, _ in answers})
            if statuses != [200]:
                sys.exit(f"serve_long_prompt_memory: {name} prompts answered {statuses}: "
                         f"{answers[0][1][:200]!r}")
            result["prompt_tokens"] = json.loads(answers[0][1])["usage"]["prompt_tokens"]
            result[f"rss_mib_after_{args.parallel}_{name}"] = round(rss_kib(process.pid) / 1024)
        print(json.dumps(result, indent=1))
    finally:
        process.terminate()
        process.wait(timeout=30)


if __name__ == "__main__":
    main()
