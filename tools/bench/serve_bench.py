#!/usr/bin/env python3
"""Load generator for greta-vk serve (or any OpenAI-compatible server), Python's standard library only.

N concurrent clients each send streamed chat or completions requests back to back, for D seconds or until R requests
are done, and the run prints throughput (requests/s, generated tokens/s) and latency percentiles: time to first token
(TTFT), inter-token latency (ITL: the gap between consecutive streamed chunks that carry text, one per token unless a
token completes no character) and end-to-end request time.

  python3 tools/bench/serve_bench.py --url http://127.0.0.1:8080 --clients 16 --duration 30 [--endpoint chat]
  python3 tools/bench/serve_bench.py --requests 200 --max-tokens 64 --json

Generated and prompt token counts come from the server's usage (stream_options.include_usage).
"""
import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse

PROMPTS = [
    "Once upon a time", "The little dog", "Lily wanted to", "Tom and his mom went to the park", "One day, a bird",
    "The sun was shining and", "A big red ball", "Sara had a toy car that", "In a small house there lived",
    "The cat and the mouse",
]


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = 0
        self.errors = 0
        self.error_samples = []
        self.generated = 0
        self.prompt = 0
        self.ttft, self.itl, self.e2e = [], [], []

    def add(self, ttft, gaps, e2e, usage):
        with self.lock:
            self.ok += 1
            if ttft is not None:
                self.ttft.append(ttft)
            self.itl.extend(gaps)
            self.e2e.append(e2e)
            if usage:
                self.generated += usage.get("completion_tokens", 0)
                self.prompt += usage.get("prompt_tokens", 0)

    def fail(self, what):
        with self.lock:
            self.errors += 1
            if len(self.error_samples) < 5:
                self.error_samples.append(what)


def one_request(conn, args, path, i, headers):
    prompt = PROMPTS[i % len(PROMPTS)] if args.prompt is None else args.prompt
    body = {"max_tokens": args.max_tokens, "temperature": args.temperature, "stream": True,
            "stream_options": {"include_usage": True}}
    if args.model:
        body["model"] = args.model
    if args.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    start = time.perf_counter()
    conn.request("POST", path, body=json.dumps(body), headers=headers)
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:200].decode("utf-8", "replace")))
    first, last, gaps, usage, done = None, None, [], None, False
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        payload = line[6:]
        if payload == b"[DONE]":
            done = True
            r.read()
            break
        chunk = json.loads(payload)
        if "error" in chunk:
            raise RuntimeError("stream error: %s" % chunk["error"].get("message"))
        if chunk.get("usage"):
            usage = chunk["usage"]
        for c in chunk.get("choices", []):
            text = c.get("delta", {}).get("content") if args.endpoint == "chat" else c.get("text")
            if text:
                now = time.perf_counter()
                if first is None:
                    first = now
                else:
                    gaps.append(now - last)
                last = now
    if not done:
        raise RuntimeError("the stream ended without [DONE]")
    return (first - start if first is not None else None), gaps, time.perf_counter() - start, usage


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080", help="the server (default %(default)s)")
    ap.add_argument("--endpoint", choices=["chat", "completions"], default="completions")
    ap.add_argument("--clients", "-c", type=int, default=8, help="concurrent clients (default %(default)s)")
    ap.add_argument("--duration", "-d", type=float, default=None, help="seconds to run (default 10 unless --requests)")
    ap.add_argument("--requests", "-r", type=int, default=None, help="requests to send in all")
    ap.add_argument("--max-tokens", "-n", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--prompt", default=None, help="one prompt for every request (default: a rotating set)")
    ap.add_argument("--model", default=None, help="the model id to send (default: none, the server's own)")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args()
    if args.duration is None and args.requests is None:
        args.duration = 10.0

    url = urllib.parse.urlparse(args.url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    prefix = url.path.rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[:-3]
    path = prefix + ("/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions")
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = "Bearer " + args.api_key

    stats = Stats()
    counter = {"next": 0}
    lock = threading.Lock()
    start = time.perf_counter()
    deadline = start + args.duration if args.duration else None

    def client():
        conn = http.client.HTTPConnection(host, port, timeout=600)
        while True:
            with lock:
                i = counter["next"]
                if (args.requests is not None and i >= args.requests) or (deadline and time.perf_counter() >= deadline):
                    break
                counter["next"] += 1
            try:
                stats.add(*one_request(conn, args, path, i, headers))
            except (OSError, http.client.HTTPException, RuntimeError, ValueError) as e:
                stats.fail("%s: %s" % (type(e).__name__, e))
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=600)
        conn.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start

    ms = lambda v: None if v is None else round(v * 1e3, 2)
    result = {
        "url": args.url, "endpoint": args.endpoint, "clients": args.clients, "max_tokens": args.max_tokens,
        "seconds": round(elapsed, 3), "requests": stats.ok, "errors": stats.errors,
        "requests_per_s": round(stats.ok / elapsed, 3) if elapsed > 0 else 0,
        "prompt_tokens": stats.prompt, "generated_tokens": stats.generated,
        "generated_tokens_per_s": round(stats.generated / elapsed, 2) if elapsed > 0 else 0,
        "ttft_ms": {"p50": ms(percentile(stats.ttft, 50)), "p99": ms(percentile(stats.ttft, 99))},
        "itl_ms": {"p50": ms(percentile(stats.itl, 50)), "p99": ms(percentile(stats.itl, 99))},
        "e2e_ms": {"p50": ms(percentile(stats.e2e, 50)), "p99": ms(percentile(stats.e2e, 99))},
    }
    if stats.error_samples:
        result["error_samples"] = stats.error_samples
    if args.json:
        print(json.dumps(result))
    else:
        fmt = lambda v: "-" if v is None else "%.1f" % v
        print("%s %s: %d clients, max_tokens %d, %.1f s" % (args.url, path, args.clients, args.max_tokens, elapsed))
        print("  requests   %d ok, %d failed: %.2f requests/s" % (stats.ok, stats.errors, result["requests_per_s"]))
        print("  tokens     %d generated: %.1f tokens/s (%d prompt tokens)" %
              (stats.generated, result["generated_tokens_per_s"], stats.prompt))
        for name, key in (("TTFT", "ttft_ms"), ("ITL", "itl_ms"), ("E2E", "e2e_ms")):
            print("  %-10s p50 %s ms, p99 %s ms" % (name, fmt(result[key]["p50"]), fmt(result[key]["p99"])))
        for e in stats.error_samples:
            print("  error: %s" % e)
    return 1 if stats.errors else 0


if __name__ == "__main__":
    sys.exit(main())
