#!/usr/bin/env python3
"""greta-vk serve driven over loopback HTTP, Python's standard library only. One scenario per call, registered in
CTest with the label "server" (tests/server/CMakeLists.txt):

  server_test.py SCENARIO GRETA_VK MODEL [--soak-requests N]

Each scenario starts its own server(s) on port 0 (`--backend cpu`), parses the port from stderr, waits for /health,
and ends them with SIGTERM, checking that they exit 0.

Scenarios:
  api           chat, completions (plain and streamed), models, tokenize/detokenize, health, the /metrics gauges,
                logprobs / top_logprobs, n=3 choices, stop strings never emitted, usage (prompt tokens = /tokenize's
                count, completion tokens = the tokens generated), seeds reproduce
  concurrent    32 streamed completions at once (--parallel 8, temperature 0, different prompts and lengths): each is
                token for token what `greta-vk run -p PROMPT -n N --temp 0 --json` gives for that prompt alone
  disconnect    clients that go away mid-stream (FIN, RST, before the first byte, non-streamed), then 100 requests:
                the KV pages and running requests go back to 0, the cancellations are counted, no crash
  bad-requests  a corpus of bad requests, each with its status and OpenAI's error object; API keys; 429 when the queue
                is full; slow clients (silent, trickling headers); the server stays healthy and serves afterwards
  soak          N short requests (default 2000) from 8 client threads: every one complete; the server's RSS after
                them within a few MB of its RSS after the first 200 (--rss-growth-kb 0 under ASan, whose quarantine
                of freed memory makes RSS grow: LeakSanitizer's check at exit stands in)
  sigterm       SIGTERM while long requests stream: they finish (or are cancelled at --shutdown-timeout), the
                process exits 0 in time
Prints "PASS" and exits 0, or says what went wrong ("FAIL: ...", the server's last log lines) and exits 1.
The harness (the server process, HTTP and SSE helpers, /metrics) is server_harness.py; the bad-request corpus is
bad_requests.py.
"""
import argparse
import collections
import concurrent.futures
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

# server_harness.py and bad_requests.py lie next to this file; run from any directory (CTest runs it by absolute
# path), and no __pycache__ left in the source tree.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bad_requests import bad_corpus  # noqa: E402
from server_harness import (HOST, Server, TestFailure, check, check_error, gather, get_json, metrics,  # noqa: E402
                            post_json, raw_request, read_until, request, send_huge, stream, tokenize, wait_idle)


# ---- scenario: api ------------------------------------------------------------------------------------------------

def scenario_api(args):
    s = Server(args.binary, args.model, "--parallel", "4")
    p = s.port
    alias = os.path.basename(args.model)[:-len(".gguf")]

    # health, models
    status, _, data = request(p, "GET", "/health")
    check(status == 200 and json.loads(data) == {"status": "ok"}, "/health: %d %r" % (status, data))
    models = get_json(p, "/v1/models")
    check(models["object"] == "list" and [m["id"] for m in models["data"]] == [alias], "/v1/models: %r" % models)
    check(models["data"][0]["object"] == "model", "/v1/models entry: %r" % models["data"][0])
    check(get_json(p, "/models") == models, "/models differs from /v1/models")

    # tokenize / detokenize: BOS added by default, special text parsed only when asked
    prompt = "Once upon a time"
    ids = tokenize(p, prompt)
    check(ids == [1, 403, 407, 261, 378], "/tokenize %r: %r" % (prompt, ids))
    check(tokenize(p, prompt, add_special=False) == ids[1:], "/tokenize add_special false")
    pieces = tokenize(p, prompt, with_pieces=True)
    check([t["id"] for t in pieces] == ids and "".join(t["piece"] for t in pieces[1:]) == " " + prompt,
          "/tokenize with_pieces: %r" % pieces)
    check(tokenize(p, "<s>Hi", parse_special=True)[:2] == [1, 1], "/tokenize parse_special: <s> is BOS")
    check(tokenize(p, "<s>Hi")[1] != 1, "/tokenize without parse_special: <s> is text")
    detok = post_json(p, "/detokenize", {"tokens": ids[1:]})
    check(detok == {"content": prompt}, "/detokenize: %r" % detok)
    # with BOS in front, SPM's leading space stays (llama.cpp's detokenize does the same)
    detok = post_json(p, "/detokenize", {"tokens": ids})
    check(detok["content"].strip() == prompt, "/detokenize with BOS: %r" % detok)

    # completions: text, usage (prompt tokens = /tokenize's count), finish reason
    body = {"model": alias, "prompt": prompt, "max_tokens": 20, "temperature": 0}
    r = post_json(p, "/v1/completions", body)
    check(r["object"] == "text_completion" and r["model"] == alias and r["id"].startswith("cmpl-"), "completion: %r" % r)
    check(len(r["choices"]) == 1 and r["choices"][0]["index"] == 0 and r["choices"][0]["logprobs"] is None, "%r" % r)
    reference = r["choices"][0]["text"]
    check(reference.startswith(", there was a little girl named Lily"), "greedy completion: %r" % reference)
    check(r["choices"][0]["finish_reason"] == "length", "finish_reason %r" % r["choices"][0]["finish_reason"])
    u = r["usage"]
    check(u["prompt_tokens"] == len(ids) and u["completion_tokens"] == 20 and u["total_tokens"] == len(ids) + 20,
          "usage %r" % u)
    check(u["prompt_tokens_details"]["cached_tokens"] <= u["prompt_tokens"], "cached tokens %r" % u)
    # the same prompt as token ids, as ["text"], and through the unversioned path
    r2 = post_json(p, "/v1/completions", dict(body, prompt=ids))
    check(r2["choices"][0]["text"] == reference and r2["usage"]["prompt_tokens"] == len(ids), "prompt as ids: %r" % r2)
    r3 = post_json(p, "/completions", dict(body, prompt=[prompt]))
    check(r3["choices"][0]["text"] == reference, "prompt as [text]: %r" % r3)
    # streamed: the same text, usage last, then [DONE]
    chunks, done = stream(p, "/v1/completions", dict(body, stream_options={"include_usage": True}))
    check(done, "no [DONE]")
    texts, finish, _, usage = gather(chunks)
    check(texts[0] == reference and finish == ["length"], "streamed completion %r / %r" % (texts, finish))
    check(usage is not None and usage["completion_tokens"] == 20 and usage["prompt_tokens"] == len(ids),
          "streamed usage %r" % usage)
    chunks, done = stream(p, "/v1/completions", body)
    check(done and all(c.get("usage") is None for c in chunks), "usage without include_usage")
    # null is the same as absent
    r4 = post_json(p, "/v1/completions", dict(body, stop=None, n=None, seed=None, top_p=None, user=None))
    check(r4["choices"][0]["text"] == reference, "null fields change the result: %r" % r4)

    # chat: non-streamed and streamed agree; usage counts the template's tokens
    messages = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "Tell me a story."}]
    chat = {"messages": messages, "max_tokens": 16, "temperature": 0}
    r = post_json(p, "/v1/chat/completions", chat)
    check(r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-") and r["model"] == alias, "chat %r" % r)
    msg = r["choices"][0]["message"]
    check(msg["role"] == "assistant" and isinstance(msg["content"], str) and msg["content"], "chat message %r" % msg)
    check(r["choices"][0]["finish_reason"] in ("stop", "length"), "chat finish %r" % r["choices"][0])
    cu = r["usage"]
    content_tokens = len(tokenize(p, "You tell stories.", add_special=False)) + \
        len(tokenize(p, "Tell me a story.", add_special=False))
    check(cu["prompt_tokens"] >= content_tokens and cu["total_tokens"] == cu["prompt_tokens"] + cu["completion_tokens"],
          "chat usage %r (the messages alone are %d tokens)" % (cu, content_tokens))
    check(cu["completion_tokens"] <= 16, "chat completion tokens %r" % cu)
    chunks, done = stream(p, "/v1/chat/completions", dict(chat, stream_options={"include_usage": True}))
    texts, finish, _, usage = gather(chunks, chat=True)
    check(done and texts[0] == msg["content"] and finish[0] == r["choices"][0]["finish_reason"],
          "streamed chat %r vs %r" % (texts, msg))
    check(usage["prompt_tokens"] == cu["prompt_tokens"] and usage["completion_tokens"] == cu["completion_tokens"],
          "streamed chat usage %r vs %r" % (usage, cu))
    # content as text parts, and "developer" as the system role, give the same prompt
    parts = [{"role": "developer", "content": [{"type": "text", "text": "You tell "}, {"type": "text", "text": "stories."}]},
             messages[1]]
    r5 = post_json(p, "/chat/completions", dict(chat, messages=parts))
    check(r5["choices"][0]["message"]["content"] == msg["content"] and r5["usage"]["prompt_tokens"] == cu["prompt_tokens"],
          "text parts / developer role: %r" % r5)

    # logprobs: chat (token, logprob, bytes, top_logprobs), greedy = the most likely token
    r = post_json(p, "/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=3))
    content = r["choices"][0]["logprobs"]["content"]
    check(len(content) == r["usage"]["completion_tokens"], "one logprob entry per generated token: %d vs %r" %
          (len(content), r["usage"]))
    check(b"".join(bytes(e["bytes"]) for e in content).decode() == r["choices"][0]["message"]["content"],
          "the logprob entries' bytes are not the text")
    for e in content:
        check(set(e) == {"token", "logprob", "bytes", "top_logprobs"} and e["logprob"] <= 0, "logprob entry %r" % e)
        top = e["top_logprobs"]
        check(len(top) == 3 and all(set(t) == {"token", "logprob", "bytes"} for t in top), "top_logprobs %r" % top)
        check(all(top[i]["logprob"] >= top[i + 1]["logprob"] for i in range(2)), "top_logprobs not sorted: %r" % top)
        check(top[0]["token"] == e["token"] and abs(top[0]["logprob"] - e["logprob"]) < 1e-6,
              "at temperature 0 the sampled token is the most likely: %r" % e)
    r = post_json(p, "/v1/chat/completions", dict(chat, logprobs=True))
    check(all(e["top_logprobs"] == [] for e in r["choices"][0]["logprobs"]["content"]), "logprobs without top_logprobs")
    chunks, _ = stream(p, "/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=2))
    _, _, lps, _ = gather(chunks, chat=True)
    check([e["token"] for e in lps[0]] == [e["token"] for e in content] and all(len(e["top_logprobs"]) == 2
          for e in lps[0]), "streamed chat logprobs")
    # completions' legacy shape: tokens, token_logprobs, top_logprobs (dicts), text_offset
    r = post_json(p, "/v1/completions", dict(body, logprobs=2))
    lp = r["choices"][0]["logprobs"]
    check(len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == 20,
          "completion logprobs lengths %r" % {k: len(v) for k, v in lp.items()})
    check("".join(lp["tokens"]) == reference, "completion logprob tokens %r vs %r" % (lp["tokens"], reference))
    offsets = [0]
    for t in lp["tokens"][:-1]:
        offsets.append(offsets[-1] + len(t.encode()))
    check(lp["text_offset"] == offsets, "text_offset %r vs %r" % (lp["text_offset"], offsets))
    check(all(len(t) <= 2 and max(t.values()) == chosen for t, chosen in zip(lp["top_logprobs"], lp["token_logprobs"])),
          "completion top_logprobs %r" % lp["top_logprobs"][:3])
    chunks, _ = stream(p, "/v1/completions", dict(body, logprobs=0))
    _, _, lps, _ = gather(chunks)
    check([x["tokens"][0] for x in lps[0]] == lp["tokens"], "streamed completion logprobs")

    # n = 3: three choices, each its own sampler (seed + choice); usage counts all of them
    for path, is_chat in (("/v1/completions", False), ("/v1/chat/completions", True)):
        req = dict(chat if is_chat else body, n=3, temperature=1.0, seed=7, max_tokens=12)
        req.update({"logprobs": True} if is_chat else {"logprobs": 0})
        r = post_json(p, path, req)
        check([c["index"] for c in r["choices"]] == [0, 1, 2], "n=3 indices: %r" % r["choices"])
        counts = [len(c["logprobs"]["content"] if is_chat else c["logprobs"]["tokens"]) for c in r["choices"]]
        check(r["usage"]["completion_tokens"] == sum(counts), "n=3 usage %r vs tokens %r" % (r["usage"], counts))
        texts_n = [c["message"]["content"] if is_chat else c["text"] for c in r["choices"]]
        check(len(set(texts_n)) > 1, "n=3 at temperature 1 gave three equal texts: %r" % texts_n)
        again = post_json(p, path, req)
        check([c["message"]["content"] if is_chat else c["text"] for c in again["choices"]] == texts_n,
              "n=3 with a seed is not reproducible")
        chunks, done = stream(p, path, dict(req, stream_options={"include_usage": True}))
        st, fin, _, usage = gather(chunks, n=3, chat=is_chat)
        check(done and st == texts_n and fin == [c["finish_reason"] for c in r["choices"]],
              "streamed n=3 %r vs %r" % (st, texts_n))
        check(usage["completion_tokens"] == r["usage"]["completion_tokens"], "streamed n=3 usage")
    # a seed reproduces, another seed differs
    t = lambda seed: post_json(p, "/v1/completions", dict(body, temperature=1.2, seed=seed, max_tokens=30))["choices"][0]["text"]
    a = t(123)
    check(t(123) == a, "the same seed gave different texts")
    check(any(t(s) != a for s in (124, 125, 126)), "three other seeds all gave the seed-123 text")

    # stop strings: the text ends before the first occurrence, and the stop string is never sent, including when it
    # spans tokens; finish_reason "stop"
    long_ref = post_json(p, "/v1/completions", dict(body, max_tokens=60))["choices"][0]["text"]
    pieces_ref = post_json(p, "/v1/completions", dict(body, max_tokens=60, logprobs=0))["choices"][0]["logprobs"]["tokens"]
    boundary = len(pieces_ref[0]) + len(pieces_ref[1])  # a stop string across the 2nd/3rd token boundary
    stops = ["Lily", long_ref[boundary - 2:boundary + 3], ".", "girl named", ["zebra", "little"], "l"]
    for stop in stops:
        first = min((long_ref.find(x) for x in ([stop] if isinstance(stop, str) else stop) if x in long_ref))
        expected = long_ref[:first]
        r = post_json(p, "/v1/completions", dict(body, max_tokens=60, stop=stop))
        check(r["choices"][0]["text"] == expected and r["choices"][0]["finish_reason"] == "stop",
              "stop %r: %r, expected %r" % (stop, r["choices"][0]["text"], expected))
        chunks, _ = stream(p, "/v1/completions", dict(body, max_tokens=60, stop=stop, logprobs=0))
        texts, finish, lps, _ = gather(chunks)
        check(texts[0] == expected and finish == ["stop"], "streamed stop %r: %r" % (stop, texts[0]))
        for x in [stop] if isinstance(stop, str) else stop:
            check(all(x not in (c["choices"][0]["text"] if c["choices"] else "") for c in chunks),
                  "a chunk carries the stop string %r" % x)
    r = post_json(p, "/v1/chat/completions", dict(chat, max_tokens=40, stop=["zebra-never"]))
    check(r["choices"][0]["finish_reason"] == "length", "an unmatched stop string ended generation: %r" % r)

    # streamed tokens leave at once: the time to the first text chunk is milliseconds for this model (with Nagle's
    # algorithm on, the client's delayed ACK held every response's first chunk ~40 ms)
    ttfts = []
    conn = http.client.HTTPConnection(HOST, p, timeout=30)  # kept alive: past TCP's quick-ACK start, as clients are
    for _ in range(8):
        start = time.monotonic()
        conn.request("POST", "/v1/completions", body=json.dumps(dict(body, max_tokens=4, stream=True)),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        while b'"text":"' not in resp.readline():
            pass
        ttfts.append(time.monotonic() - start)
        resp.read()
    conn.close()
    ttfts = ttfts[1:]
    ttft = sorted(ttfts)[len(ttfts) // 2]
    check(ttft < 0.03, "the first streamed token took %.0f ms (median of 7): %s" %
          (ttft * 1e3, ["%.1f" % (t * 1e3) for t in ttfts]))

    # metrics: the gauges the Gateway API Inference Extension reads, counters, histograms
    m = metrics(p)
    for name, kind in (("greta:num_requests_waiting", "gauge"), ("greta:num_requests_running", "gauge"),
                       ("greta:kv_cache_usage_perc", "gauge"), ("greta:kv_cache_pages_used", "gauge"),
                       ("greta:kv_cache_pages_total", "gauge"), ("greta:prompt_tokens_total", "counter"),
                       ("greta:generation_tokens_total", "counter"), ("greta:request_success_total", "counter"),
                       ("greta:time_to_first_token_seconds", "histogram"),
                       ("greta:inter_token_latency_seconds", "histogram"),
                       ("greta:e2e_request_latency_seconds", "histogram")):
        check(m["__types__"].get(name) == kind, "/metrics: %s is %r, expected %s" % (name, m["__types__"].get(name), kind))
    label = '{model_name="%s"}' % alias
    check(0 <= m["greta:kv_cache_usage_perc" + label] <= 1, "kv_cache_usage_perc %r" % m["greta:kv_cache_usage_perc"])
    check(m["greta:num_requests_waiting" + label] == 0, "waiting %r" % m["greta:num_requests_waiting"])
    check(m["greta:kv_cache_pages_total" + label] > 0, "kv_cache_pages_total %r" % m["greta:kv_cache_pages_total"])
    check(m["greta:generation_tokens_total" + label] >= 20, "generation_tokens_total")
    check(m["greta:time_to_first_token_seconds_count"] >= 10, "ttft count %r" % m["greta:time_to_first_token_seconds_count"])
    check(m['greta:request_success_total{model_name="%s",finished_reason="length"}' % alias] >= 5, "success counter")
    s.stop()


# ---- scenario: concurrent -----------------------------------------------------------------------------------------

def concurrent_prompts():
    starts = ["Once upon a time", "The little dog", "Lily wanted to", "Tom and his mom", "One day, a bird",
              "The sun was", "A big red ball", "Sara had a toy"]
    ends = ["", " in the park", ", and", " <s>"]  # " <s>": special-token text, parsed by run and by the server
    return [a + b for b in ends for a in starts]


def run_reference(args, prompt, n):
    out = subprocess.run([args.binary, "run", args.model, "-p", prompt, "-n", str(n), "--temp", "0", "--backend", "cpu",
                          "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    check(out.returncode == 0, "greta-vk run -p %r failed: %s" % (prompt, out.stderr.decode()[-500:]))
    return json.loads(out.stdout)


def scenario_concurrent(args):
    prompts = concurrent_prompts()
    lengths = [8 + (i * 7) % 41 for i in range(len(prompts))]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        refs = list(pool.map(lambda i: run_reference(args, prompts[i], lengths[i]), range(len(prompts))))
    s = Server(args.binary, args.model, "--parallel", "8")
    p = s.port
    # The server tokenizes a raw prompt as run does: BOS added, special-token text parsed.
    for prompt, ref in zip(prompts, refs):
        check(tokenize(p, prompt, parse_special=True) == ref["prompt_tokens"],
              "prompt %r: /tokenize (parse_special) %r, run %r" % (prompt, tokenize(p, prompt, parse_special=True),
                                                                 ref["prompt_tokens"]))

    barrier = threading.Barrier(len(prompts))

    def one(i):
        barrier.wait(60)
        return stream(p, "/v1/completions", {"prompt": prompts[i], "max_tokens": lengths[i], "temperature": 0,
                                             "logprobs": 0, "stream_options": {"include_usage": True}})

    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        results = list(pool.map(one, range(len(prompts))))
    for i, ((chunks, done), ref) in enumerate(zip(results, refs)):
        check(done, "prompt %d: no [DONE]" % i)
        texts, finish, lps, usage = gather(chunks)
        pieces = [x["tokens"][0] for x in lps[0]]
        what = "prompt %d %r (-n %d)" % (i, prompts[i], lengths[i])
        check(texts[0] == ref["text"], "%s: server %r, run %r" % (what, texts[0], ref["text"]))
        check(len(pieces) == len(ref["tokens"]), "%s: %d tokens, run %d" % (what, len(pieces), len(ref["tokens"])))
        check("".join(pieces) == ref["text"], "%s: the token pieces are not the text" % what)
        check(usage["prompt_tokens"] == len(ref["prompt_tokens"]), "%s: prompt tokens %d, run %d" %
              (what, usage["prompt_tokens"], len(ref["prompt_tokens"])))
        check(usage["completion_tokens"] == len(ref["tokens"]), "%s: usage %r, run %d tokens" %
              (what, usage, len(ref["tokens"])))
        check(finish[0] == ("length" if ref["stop"] in ("max_tokens", "context_full") else "stop"),
              "%s: finish %r, run %r" % (what, finish[0], ref["stop"]))
    m = wait_idle(p)
    check(m["greta:generation_tokens_total"] == sum(len(r["tokens"]) for r in refs), "generation_tokens_total %g" %
          m["greta:generation_tokens_total"])
    s.stop()


# ---- scenario: disconnect -----------------------------------------------------------------------------------------

def scenario_disconnect(args):
    s = Server(args.binary, args.model, "--parallel", "8")
    p = s.port
    long_stream = {"prompt": "Once upon a time", "max_tokens": 100000, "temperature": 0, "stream": True}
    gone = 0
    # 1. a few chunks read, then an orderly close (FIN)
    for path in ("/v1/completions", "/v1/chat/completions"):
        body = dict(long_stream)
        if "chat" in path:
            body = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 100000, "temperature": 0,
                    "stream": True}
        sock = raw_request(p, path, body)
        got = read_until(sock, b"data: ", 4)
        check(got.startswith(b"HTTP/1.1 200"), "stream status line: %r" % got[:100])
        sock.close()
        gone += 1
    # 2. a reset (SO_LINGER 0) mid-stream
    sock = raw_request(p, "/v1/completions", long_stream)
    read_until(sock, b"data: ", 3)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()
    gone += 1
    # 3. gone before the first byte of the answer
    sock = raw_request(p, "/v1/completions", long_stream)
    sock.close()
    gone += 1
    # 4. a non-streamed request whose client goes away while it generates
    sock = raw_request(p, "/v1/completions", dict(long_stream, stream=False))
    time.sleep(0.3)
    sock.close()
    gone += 1
    # 5. several at once (all admitted: --parallel 8)
    socks = [raw_request(p, "/v1/completions", dict(long_stream, prompt="The little dog %d" % i)) for i in range(6)]
    for sock in socks:
        read_until(sock, b"data: ", 2)
    for sock in socks:
        sock.close()
    gone += len(socks)
    gone_at = time.monotonic()

    # 100 more requests (4 clients), all complete
    def short(i):
        r = post_json(p, "/v1/completions", {"prompt": "Lily wanted to %d" % i, "max_tokens": 8, "temperature": 0})
        return r["choices"][0]["finish_reason"]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        reasons = list(pool.map(short, range(100)))
    check(all(r in ("stop", "length") for r in reasons), "finish reasons %r" % collections.Counter(reasons))
    m = wait_idle(p, 15)
    cancelled = m.get('greta:request_failure_total{model_name="%s",reason="cancelled"}' %
                      os.path.basename(args.model)[:-5], 0)
    print("disconnects: %d, counted as cancelled: %d, %.1f s after the last one" % (gone, cancelled,
                                                                                   time.monotonic() - gone_at))
    check(cancelled == gone, "%d clients went away, %d requests counted as cancelled" % (gone, cancelled))
    check(m["greta:kv_cache_usage_perc"] == 0, "kv_cache_usage_perc %g" % m["greta:kv_cache_usage_perc"])
    status, _, _ = request(p, "GET", "/health")
    check(status == 200, "/health after the disconnects: %d" % status)
    s.stop()


# ---- scenario: bad-requests ---------------------------------------------------------------------------------------

def slow_client_checks(port, timeout_s):
    """A client that stops mid-headers, and one that trickles a header byte at a time. Prints what happened."""
    # a) silent after a partial request line: dropped after --timeout (httplib closes, no status line)
    sock = socket.create_connection((HOST, port), timeout=timeout_s + 10)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-")
    start = time.monotonic()
    data = sock.recv(65536)
    dropped_after = time.monotonic() - start
    sock.close()
    print("slow client, silent mid-headers: dropped after %.1f s, answer %r" % (dropped_after, data[:60]))
    check(dropped_after < timeout_s + 3, "a silent client was kept %.1f s (--timeout %d)" % (dropped_after, timeout_s))
    check(data == b"" or data.startswith(b"HTTP/1.1 4"), "a silent client got %r" % data[:100])
    # b) silent after the headers, mid-body
    sock = socket.create_connection((HOST, port), timeout=timeout_s + 10)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
    start = time.monotonic()
    data = sock.recv(65536)
    dropped_after = time.monotonic() - start
    sock.close()
    print("slow client, silent mid-body: dropped after %.1f s, answer %r" % (dropped_after, data[:60]))
    check(dropped_after < timeout_s + 3, "a client silent mid-body was kept %.1f s (--timeout %d)" %
          (dropped_after, timeout_s))
    # c) trickling: a byte of header every timeout/2 s, for a while. httplib's timeout is per read, so a client
    #    that keeps sending a byte now and then is not dropped by it; what matters is that others are still served.
    trickle = [socket.create_connection((HOST, port), timeout=30) for _ in range(4)]
    for t in trickle:
        t.sendall(b"GET /health HTTP/1.1\r\nX-Slow: ")
    start = time.monotonic()
    alive = True
    while time.monotonic() - start < timeout_s * 2.5:
        for t in trickle:
            try:
                t.sendall(b"a")
            except OSError:
                alive = False
        status, _, _ = request(port, "GET", "/health", timeout=5)
        check(status == 200, "/health while slow clients trickle: %d" % status)
        time.sleep(timeout_s / 2)
    for t in trickle:
        t.close()
    print("slow clients trickling a header byte every %.1f s: %s after %.1f s (others served meanwhile)" %
          (timeout_s / 2, "still connected" if alive else "dropped", time.monotonic() - start))


def scenario_bad_requests(args):
    alias = os.path.basename(args.model)[:-len(".gguf")]
    timeout_s = 2
    s = Server(args.binary, args.model, "--ctx", "64", "--parallel", "2", "--timeout", str(timeout_s))
    p = s.port
    failures = []
    for what, path, body, status, code, param in bad_corpus(alias):
        try:
            st, hdrs, data = request(p, "POST", path, body)
            check_error(st, hdrs, data, status, code, param, what)
        except TestFailure as e:
            failures.append(str(e))
    # routes and methods
    for method, path, status in (("GET", "/nope", 404), ("POST", "/v1/nope", 404), ("GET", "/v1/chat/completions", 404),
                                 ("DELETE", "/v1/models", 404)):
        try:
            st, hdrs, data = request(p, method, path)
            check_error(st, hdrs, data, status, what="%s %s" % (method, path))
        except TestFailure as e:
            failures.append(str(e))
    # 10 MB body → 413 (before the model sees it)
    st, hdrs, data = send_huge(p, 10 << 20)
    try:
        check_error(st, hdrs, data, 413, what="10 MB body")
    except TestFailure as e:
        failures.append(str(e))
    # malformed HTTP
    sock = socket.create_connection((HOST, p), timeout=10)
    sock.sendall(b"GARBAGE\r\n\r\n")
    data = sock.recv(65536)
    sock.close()
    if not data.startswith(b"HTTP/1.1 400"):
        failures.append("malformed HTTP: %r" % data[:100])
    check(not failures, "%d bad requests answered wrongly:\n  %s" % (len(failures), "\n  ".join(failures)))
    m = metrics(p)
    check(m['greta:request_failure_total{model_name="%s",reason="400"}' % alias] >= 50, "400s counted in /metrics")

    slow_client_checks(p, timeout_s)
    # still healthy, still serving
    status, _, _ = request(p, "GET", "/health")
    check(status == 200, "/health after the corpus: %d" % status)
    r = post_json(p, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8})
    check(r["choices"][0]["finish_reason"] in ("stop", "length"), "a normal request after the corpus: %r" % r)
    s.stop()

    # API keys: the API needs one, /health and /metrics do not
    s = Server(args.binary, args.model, "--api-key", "sesame", "--api-key", "second-key")
    p = s.port
    body = {"prompt": "Hi", "max_tokens": 2}
    for headers, what in (({}, "no key"), ({"Authorization": "Bearer wrong"}, "wrong key"),
                          ({"Authorization": "sesame"}, "no Bearer"), ({"Authorization": "Bearer "}, "empty key"),
                          ({"Authorization": "Bearer sesam"}, "a prefix of the key"),
                          ({"Authorization": "Bearer sesame2"}, "the key and more")):
        st, hdrs, data = request(p, "POST", "/v1/completions", body, headers)
        check_error(st, hdrs, data, 401, "invalid_api_key", what=what)
        check(hdrs.get("www-authenticate") == "Bearer", "%s: WWW-Authenticate %r" % (what, hdrs.get("www-authenticate")))
    st, hdrs, data = request(p, "GET", "/v1/models")
    check_error(st, hdrs, data, 401, "invalid_api_key", what="/v1/models without a key")
    for key in ("sesame", "second-key"):
        post_json(p, "/v1/completions", body, headers={"Authorization": "Bearer " + key})
    check(get_json(p, "/v1/models", {"Authorization": "Bearer sesame"})["data"][0]["id"] == alias, "models with a key")
    for path in ("/health", "/metrics"):
        st, _, _ = request(p, "GET", path)
        check(st == 200, "%s with --api-key and no key: %d" % (path, st))
    s.stop()

    # a full queue → 429: one sequence, no queue, a long request in flight
    s = Server(args.binary, args.model, "--parallel", "1", "--max-queue", "0")
    p = s.port
    sock = raw_request(p, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 100000, "temperature": 0,
                                              "stream": True})
    read_until(sock, b"data: ", 2)
    st, hdrs, data = request(p, "POST", "/v1/completions", body)
    e = check_error(st, hdrs, data, 429, what="a request beyond --parallel 1 --max-queue 0")
    check(e["type"] == "rate_limit_error", "429 type %r" % e["type"])
    sock.close()
    wait_idle(p)
    deadline = time.monotonic() + 10
    while True:  # the cancelled request leaves the count of those in flight a moment after its pages
        st, _, data = request(p, "POST", "/v1/completions", body)
        if st == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    check(st == 200, "after the long request went away: %d %s" % (st, data[:200]))
    s.stop()


# ---- scenario: soak -----------------------------------------------------------------------------------------------

def scenario_soak(args):
    total, threads = args.soak_requests, 8
    s = Server(args.binary, args.model, "--parallel", "8", "--quiet")
    p = s.port
    prompts = ["Once upon a time", "The little dog", "Lily wanted to", "Tom and his mom"]
    lock = threading.Lock()
    state = {"next": 0, "done": 0, "rss_200": None, "errors": []}

    def work():
        conn = http.client.HTTPConnection(HOST, p, timeout=60)
        while True:
            with lock:
                i = state["next"]
                if i >= total or state["errors"]:
                    break
                state["next"] += 1
            try:
                kind = i % 4
                if kind == 0:
                    r = post_json(p, "/v1/completions", {"prompt": prompts[i % 4], "max_tokens": 4}, conn=conn)
                    reasons = [c["finish_reason"] for c in r["choices"]]
                    check(r["usage"]["completion_tokens"] <= 4, "usage %r" % r["usage"])
                elif kind == 1:
                    r = post_json(p, "/v1/chat/completions", {"messages": [{"role": "user", "content": prompts[i % 4]}],
                                                              "max_tokens": 4, "n": 2}, conn=conn)
                    reasons = [c["finish_reason"] for c in r["choices"]]
                    check(len(reasons) == 2, "n=2: %r" % r)
                elif kind == 2:
                    chunks, done = stream(p, "/v1/completions", {"prompt": prompts[i % 4], "max_tokens": 4,
                                                                 "stream_options": {"include_usage": True}}, conn=conn)
                    _, reasons, _, usage = gather(chunks)
                    check(done and usage is not None, "stream without [DONE] or usage")
                else:
                    chunks, done = stream(p, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                                      "max_tokens": 3, "stop": ["."]}, conn=conn)
                    _, reasons, _, _ = gather(chunks, chat=True)
                    check(done, "chat stream without [DONE]")
                check(all(r in ("stop", "length") for r in reasons), "finish reasons %r" % reasons)
            except (TestFailure, OSError, http.client.HTTPException, ValueError) as e:
                with lock:
                    state["errors"].append("request %d: %s: %s" % (i, type(e).__name__, e))
                break
            with lock:
                state["done"] += 1
                if state["done"] == 200:
                    state["rss_200"] = s.rss_kb()
        conn.close()

    start = time.monotonic()
    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    seconds = time.monotonic() - start
    check(not state["errors"], "soak failures:\n  " + "\n  ".join(state["errors"][:10]))
    check(state["done"] == total, "%d of %d requests completed" % (state["done"], total))
    wait_idle(p)
    rss_end = s.rss_kb()
    growth = rss_end - (state["rss_200"] or rss_end)
    print("soak: %d requests in %.1f s (%.0f/s), %d client threads; RSS %d kB after 200, %d kB after %d (%+d kB)" %
          (total, seconds, total / seconds, threads, state["rss_200"] or 0, rss_end, total, growth))
    if args.rss_growth_kb > 0:
        check(growth < args.rss_growth_kb, "RSS grew by %d kB between request 200 and %d (limit %d kB)" %
              (growth, total, args.rss_growth_kb))
    m = metrics(p)
    ok = sum(v for k, v in m.items() if k.startswith("greta:request_success_total{"))
    check(ok == total, "request_success_total %g, expected %d" % (ok, total))
    s.stop()


# ---- scenario: sigterm --------------------------------------------------------------------------------------------

def scenario_sigterm(args):
    # 1. in-flight requests shorter than --shutdown-timeout finish: their streams end with [DONE]
    s = Server(args.binary, args.model, "--parallel", "4", "--shutdown-timeout", "20")
    p = s.port
    results = {}

    def client(i, body):
        try:
            results[i] = stream(p, "/v1/completions", body)
        except Exception as e:  # noqa: BLE001 - reported below
            results[i] = e

    body = {"prompt": "Once upon a time", "max_tokens": 300, "temperature": 0}
    threads = [threading.Thread(target=client, args=(i, dict(body, prompt="%s %d" % (body["prompt"], i))))
               for i in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while metrics(p)["greta:num_requests_running"] < 3:
        check(time.monotonic() < deadline, "the three requests never ran together")
        time.sleep(0.01)
    took = s.stop(timeout=40)
    for t in threads:
        t.join(30)
    for i in range(3):
        r = results.get(i)
        check(isinstance(r, tuple), "request %d during shutdown: %r" % (i, r))
        chunks, done = r
        _, finish, _, _ = gather(chunks)
        check(done and finish == ["length"], "request %d during shutdown: done %r, finish %r" % (i, done, finish))
    print("SIGTERM with 3 short streams in flight: they finished, exit 0 after %.1f s" % took)

    # 2. a request longer than --shutdown-timeout: cancelled when it runs out, the stream ends with an error event,
    #    the process exits 0 soon after
    timeout_s = 1
    s = Server(args.binary, args.model, "--parallel", "2", "--shutdown-timeout", str(timeout_s))
    p = s.port
    sock = raw_request(p, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 100000, "temperature": 0,
                                              "stream": True})
    got = [read_until(sock, b"data: ", 3)]

    def reader():  # a client that keeps reading, as a streaming client does
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                got.append(chunk)
        except OSError:
            pass

    t = threading.Thread(target=reader)
    t.start()
    took = s.stop(timeout=timeout_s + 15)
    t.join(10)
    sock.close()
    tail = b"".join(got)[-3000:].decode("utf-8", "replace")
    last = [x for x in tail.split("\r\n") if x.startswith("data: ")][-1:]
    print("SIGTERM with a long stream in flight (--shutdown-timeout %d): exit 0 after %.1f s; the stream's last event: "
          "%r; its end: %r" % (timeout_s, took, last[0][:200] if last else None, tail[-7:]))
    check(took < timeout_s + 4, "shutdown took %.1f s with --shutdown-timeout %d" % (took, timeout_s))
    check(last and "the server is shutting down" in last[0], "the long stream did not end with the shutdown error")
    check(tail.endswith("0\r\n\r\n"), "the stream's chunked encoding was not terminated")

    # 3. a client that stopped reading (a small receive buffer, large chunks): the process still exits in time
    s = Server(args.binary, args.model, "--parallel", "2", "--shutdown-timeout", str(timeout_s))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect((HOST, s.port))
    data = json.dumps({"prompt": "Once upon a time", "max_tokens": 100000, "temperature": 0, "stream": True,
                       "logprobs": 5}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
    read_until(sock, b"data: ", 3)
    time.sleep(1)
    took = s.stop(timeout=timeout_s + 15)
    sock.close()
    print("SIGTERM with a stalled client (--shutdown-timeout %d): exit 0 after %.1f s" % (timeout_s, took))
    check(took < timeout_s + 4, "shutdown took %.1f s with a stalled client" % took)


SCENARIOS = {
    "api": scenario_api,
    "concurrent": scenario_concurrent,
    "disconnect": scenario_disconnect,
    "bad-requests": scenario_bad_requests,
    "soak": scenario_soak,
    "sigterm": scenario_sigterm,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    ap.add_argument("binary", help="greta-vk")
    ap.add_argument("model", help="a GGUF model (stories260K.gguf)")
    ap.add_argument("--soak-requests", type=int, default=2000)
    ap.add_argument("--rss-growth-kb", type=int, default=4096,
                    help="soak: allowed RSS growth after request 200 (0: printed, not checked)")
    args = ap.parse_args()
    start = time.monotonic()
    try:
        SCENARIOS[args.scenario](args)
    except (TestFailure, OSError, http.client.HTTPException, ValueError, KeyError) as e:
        print("FAIL: %s: %s" % (type(e).__name__ if not isinstance(e, TestFailure) else args.scenario, e))
        for s in list(Server.running):
            print("--- server log (last lines) of %s:" % " ".join(s.argv[1:]))
            print("\n".join(list(s.log)[-40:]))
            s.kill()
        sys.exit(1)
    print("PASS (%.1f s)" % (time.monotonic() - start))


if __name__ == "__main__":
    main()
