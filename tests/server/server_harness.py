"""The harness of server_test.py (tests/server): greta-vk serve started and stopped (Server: port 0, the port parsed
from stderr, /health waited for, SIGTERM and exit 0 checked, RSS read from /proc), HTTP helpers over http.client
(request, post_json, get_json), streamed completions read as server-sent events (stream) and their chunks checked and
gathered (gather), /metrics parsed (metrics, wait_idle), OpenAI's error object checked (check_error), and raw sockets
for what http.client cannot send (raw_request, read_until, send_huge). Python's standard library only."""
import collections
import http.client
import json
import re
import signal
import socket
import subprocess
import threading
import time

HOST = "127.0.0.1"


class TestFailure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise TestFailure(message)


# ---- the server process -------------------------------------------------------------------------------------------

class Server:
    """`greta-vk serve MODEL --port 0 --backend cpu ARGS...`: started, its port parsed, /health waited for."""

    running = []  # for the failure report

    def __init__(self, binary, model, *args, ready_timeout=60):
        self.argv = [binary, "serve", model, "--port", "0", "--backend", "cpu", *args]
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        self.log = collections.deque(maxlen=400)  # the last lines of stderr (drained all the time: the pipe never fills)
        self.port = None
        self._port_known = threading.Event()
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        Server.running.append(self)
        if not self._port_known.wait(ready_timeout):
            raise TestFailure("no 'listening on' line from %s" % " ".join(self.argv))
        deadline = time.monotonic() + ready_timeout
        while True:
            check(self.proc.poll() is None, "the server exited with %s before it was ready" % self.proc.returncode)
            try:
                status, _, _ = request(self.port, "GET", "/health", timeout=5)
                if status == 200:
                    break
                check(status == 503, "/health answered %d while loading" % status)
            except OSError:
                pass
            check(time.monotonic() < deadline, "the server was not ready within %d s" % ready_timeout)
            time.sleep(0.05)
        # The line is written before /health turns 200; the reader thread may take a moment to drain the pipe.
        line_deadline = time.monotonic() + 5
        while not any("ready:" in line for line in self.log) and time.monotonic() < line_deadline:
            time.sleep(0.02)
        check(any("ready:" in line for line in self.log), "/health is 200 but no 'ready' line was printed")

    def _read_stderr(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.log.append(line)
            if self.port is None:
                m = re.search(r"greta-vk serve: listening on http://127\.0\.0\.1:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    self._port_known.set()

    def rss_kb(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise TestFailure("no VmRSS in /proc/%d/status" % self.proc.pid)

    def stop(self, timeout=30):
        """SIGTERM; the server must exit 0 within `timeout` seconds. Returns the seconds it took."""
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise TestFailure("the server did not exit within %d s of SIGTERM" % timeout)
        self._reader.join(5)
        Server.running.remove(self)
        check(code == 0, "the server exited with %d after SIGTERM" % code)
        check(any("greta-vk serve: stopped" in line for line in self.log), "no 'stopped' line after SIGTERM")
        return time.monotonic() - start

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# ---- HTTP helpers -------------------------------------------------------------------------------------------------

def encode_body(body):
    if body is None or isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body).encode()


def request(port, method, path, body=None, headers=None, timeout=60, conn=None):
    """One request; (status, headers with lower-case names, body bytes). `conn`: a kept-alive connection to reuse."""
    own = conn is None
    if own:
        conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    h = {"Content-Type": "application/json"} if body is not None else {}
    h.update(headers or {})
    try:
        conn.request(method, path, body=encode_body(body), headers=h)
        r = conn.getresponse()
        data = r.read()
    finally:
        if own:
            conn.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def post_json(port, path, body, headers=None, expect=200, timeout=60, conn=None):
    status, hdrs, data = request(port, "POST", path, body, headers, timeout, conn)
    check(status == expect, "POST %s %s: status %d (expected %d): %s" % (path, json.dumps(body)[:200] if not
          isinstance(body, (bytes, str)) else "", status, expect, data[:500]))
    check(hdrs.get("content-type", "").startswith("application/json"), "POST %s: content-type %s" %
          (path, hdrs.get("content-type")))
    return json.loads(data)


def get_json(port, path, headers=None):
    status, _, data = request(port, "GET", path, headers=headers)
    check(status == 200, "GET %s: %d %s" % (path, status, data[:300]))
    return json.loads(data)


def stream(port, path, body, headers=None, timeout=120, conn=None):
    """A streamed completion: (the chunks as JSON objects, whether "data: [DONE]" ended it)."""
    own = conn is None
    if own:
        conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    chunks, done = [], False
    try:
        conn.request("POST", path, body=encode_body(dict(body, stream=True)), headers=h)
        r = conn.getresponse()
        if r.status != 200:
            raise TestFailure("streamed POST %s: status %d: %s" % (path, r.status, r.read()[:300]))
        check(r.getheader("Content-Type", "").startswith("text/event-stream"), "stream content-type %s" %
              r.getheader("Content-Type"))
        while True:
            line = r.readline()
            if not line:
                break
            check(line.endswith(b"\n"), "an SSE line without its newline: %r" % line)
            line = line.rstrip(b"\r\n")
            if not line or line.startswith(b":"):  # event separator, keep-alive comment
                continue
            check(line.startswith(b"data: "), "an SSE line that is not data: %r" % line[:200])
            payload = line[6:]
            if payload == b"[DONE]":
                done = True
                rest = r.read()
                check(rest.strip() == b"", "bytes after [DONE]: %r" % rest[:200])
                break
            chunks.append(json.loads(payload))
    finally:
        if own:
            conn.close()
    return chunks, done


def gather(chunks, n=1, chat=False):
    """Per-choice text, finish reasons, logprob entries and the usage from a stream's chunks; checks their shape."""
    texts, finish = [""] * n, [None] * n
    logprobs = [[] for _ in range(n)]
    usage, ids, roles = None, set(), [0] * n
    for i, c in enumerate(chunks):
        ids.add(c["id"])
        check(c["object"] == ("chat.completion.chunk" if chat else "text_completion"), "chunk object %r" % c["object"])
        check(isinstance(c["created"], int) and c["model"], "chunk fields: %r" % c)
        if c.get("usage") is not None:
            check(c["choices"] == [] and i == len(chunks) - 1, "usage only in a last chunk without choices: %r" % c)
            usage = c["usage"]
            continue
        check(len(c["choices"]) == 1, "one choice per chunk: %r" % c)
        ch = c["choices"][0]
        k = ch["index"]
        check(0 <= k < n, "choice index %r" % k)
        check(finish[k] is None, "a chunk for choice %d after its finish_reason" % k)
        if chat:
            delta = ch["delta"]
            if "role" in delta:
                check(delta["role"] == "assistant" and roles[k] == 0 and texts[k] == "", "role chunk: %r" % c)
                roles[k] += 1
            texts[k] += delta.get("content") or ""
            if ch["logprobs"] is not None:
                logprobs[k] += ch["logprobs"]["content"]
        else:
            texts[k] += ch["text"]
            if ch["logprobs"] is not None:
                lp = ch["logprobs"]
                check(len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 1, "logprobs %r" % lp)
                logprobs[k].append(lp)
        if ch["finish_reason"] is not None:
            check(ch["finish_reason"] in ("stop", "length"), "finish_reason %r" % ch["finish_reason"])
            finish[k] = ch["finish_reason"]
    check(len(ids) <= 1, "chunks of one response carry different ids: %s" % ids)
    check(all(f is not None for f in finish), "a choice without finish_reason: %r" % finish)
    if chat:
        check(all(r == 1 for r in roles), "each chat choice opens with one role chunk: %r" % roles)
    return texts, finish, logprobs, usage


def metrics(port):
    """/metrics as {name or name{labels}: value}; checks the exposition format's shape."""
    status, hdrs, data = request(port, "GET", "/metrics")
    check(status == 200, "/metrics: %d" % status)
    check(hdrs.get("content-type", "").startswith("text/plain"), "/metrics content-type %s" % hdrs.get("content-type"))
    out, types = {}, {}
    for line in data.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            continue
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)', line)
        check(m, "a /metrics line that is not Prometheus text: %r" % line)
        out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
        out.setdefault(m.group(1), float(m.group(3)))  # the first sample of each name, without its labels
    out["__types__"] = types
    return out


def wait_idle(port, deadline_s=20):
    """Polls /metrics until nothing runs, waits or holds KV pages; returns the last metrics."""
    deadline = time.monotonic() + deadline_s
    while True:
        m = metrics(port)
        if m["greta:kv_cache_pages_used"] == 0 and m["greta:num_requests_running"] == 0 and \
                m["greta:num_requests_waiting"] == 0:
            return m
        check(time.monotonic() < deadline, "not idle %d s later: running %g, waiting %g, KV pages used %g" %
              (deadline_s, m["greta:num_requests_running"], m["greta:num_requests_waiting"],
               m["greta:kv_cache_pages_used"]))
        time.sleep(0.1)


def tokenize(port, text, **opts):
    return post_json(port, "/tokenize", dict(content=text, **opts))["tokens"]


def check_error(status, hdrs, data, expect_status, expect_code=None, expect_param=None, what=""):
    """OpenAI's error object: {"error": {"message", "type", "param", "code"}} with the expected status."""
    check(status == expect_status, "%s: status %d, expected %d: %s" % (what, status, expect_status, data[:300]))
    check(hdrs.get("content-type", "").startswith("application/json"), "%s: content-type %s" %
          (what, hdrs.get("content-type")))
    try:
        body = json.loads(data)
    except ValueError:
        raise TestFailure("%s: the error body is not JSON: %r" % (what, data[:300]))
    check(isinstance(body, dict) and set(body) == {"error"}, "%s: not an error object: %r" % (what, body))
    e = body["error"]
    check(set(e) == {"message", "type", "param", "code"}, "%s: error fields %r" % (what, sorted(e)))
    check(isinstance(e["message"], str) and e["message"], "%s: empty message" % what)
    check(isinstance(e["type"], str) and e["type"], "%s: type %r" % (what, e["type"]))
    check(e["param"] is None or isinstance(e["param"], str), "%s: param %r" % (what, e["param"]))
    check(e["code"] is None or isinstance(e["code"], str), "%s: code %r" % (what, e["code"]))
    if expect_code is not None:
        check(e["code"] == expect_code, "%s: code %r, expected %r" % (what, e["code"], expect_code))
    if expect_param is not None:
        check(e["param"] == expect_param, "%s: param %r, expected %r" % (what, e["param"], expect_param))
    return e


# ---- raw sockets --------------------------------------------------------------------------------------------------

def raw_request(port, path, body):
    data = json.dumps(body).encode()
    head = ("POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" %
            (path, HOST, port, len(data))).encode()
    sock = socket.create_connection((HOST, port), timeout=30)
    sock.sendall(head + data)
    return sock


def read_until(sock, needle, count, limit=1 << 20):
    got = b""
    while got.count(needle) < count:
        chunk = sock.recv(65536)
        check(chunk, "the server closed the connection early: %r" % got[-300:])
        got += chunk
        check(len(got) < limit, "too much before %d x %r" % (count, needle))
    return got


def send_huge(port, size):
    """A POST with a `size`-byte body; the server may answer before reading it all. (status, headers, body)."""
    sock = socket.create_connection((HOST, port), timeout=30)
    head = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % size).encode()
    sock.sendall(head)
    block = b" " * 65536
    sent = 0
    try:
        while sent < size:
            sent += sock.send(block[:min(len(block), size - sent)])
    except (BrokenPipeError, ConnectionResetError):
        pass
    data = b""
    try:
        while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + content_length(data):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    sock.close()
    check(data.startswith(b"HTTP/1.1 "), "no HTTP answer to a %d-byte body (sent %d bytes): %r" % (size, sent, data[:200]))
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    hdrs = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:])}
    return int(lines[0].split()[1]), hdrs, body


def content_length(data):
    m = re.search(rb"\r\ncontent-length: *(\d+)", data, re.I)
    return int(m.group(1)) if m else 0
