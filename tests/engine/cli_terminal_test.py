#!/usr/bin/env python3
"""greta-vk as a person or a supervisor drives it: chat on a terminal (a pseudo-terminal: keys, Ctrl-C, Ctrl-D),
and run / synth receiving SIGINT or SIGTERM part-way. One scenario per call, registered in CTest
(tests/engine/CMakeLists.txt):

  cli_terminal_test.py SCENARIO GRETA_VK MODEL [WORK_DIR]

Scenarios:
  chat-ctrl-c       Ctrl-C mid-reply stops the reply and returns to the prompt; Ctrl-C at an empty prompt leaves (0)
  chat-editing      arrow keys edit the line, Up recalls it, /save and /bye work on a terminal
  chat-sigterm      SIGTERM while chat waits for input (on a pipe) leaves at once with 143
  run-sigint        run stops at SIGINT, still prints its summary (stop: interrupted), exits 130
  run-prompts-sigint  run --prompts-file too: the finished prompts' results, the others marked interrupted, exit 130
  synth-sigint      synth stops at SIGINT / SIGTERM, removes its partial file, exits 130 / 143
  synth-sigterm
Prints "PASS" and exits 0, or says what went wrong and exits 1.
"""
import json
import os
import pty
import select
import signal
import subprocess
import sys
import termios
import time


def fail(message, output=b""):
    sys.stdout.write("FAIL: %s\n" % message)
    if output:
        sys.stdout.write("--- output so far:\n%s\n" % output.decode("utf-8", "replace"))
    sys.exit(1)


def default_signals():
    # A test runner may start us with SIGINT ignored (a shell's background job); greta-vk keeps an ignored SIGINT
    # ignored, as a background job should, so give the child the default disposition.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class Terminal:
    """greta-vk on a pseudo-terminal: bytes typed into it, its output (stdout and stderr) read back."""

    def __init__(self, argv):
        env = dict(os.environ, TERM="xterm", LC_ALL="C.UTF-8", HOME=os.environ.get("WORK_DIR", "/nonexistent"))
        env.pop("EDITRC", None)
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            default_signals()
            os.execve(argv[0], argv, env)
        self.output = b""
        self.status = None

    def read(self, timeout):
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # the child closed the terminal
            data = b""
        if not data:
            return False
        self.output += data
        return True

    def expect(self, needle, after=0, timeout=15.0):
        """Waits until `needle` appears in the output past offset `after`; returns the offset just past it."""
        deadline = time.monotonic() + timeout
        while True:
            at = self.output.find(needle, after)
            if at >= 0:
                return at + len(needle)
            left = deadline - time.monotonic()
            if left <= 0 or (not self.read(min(left, 0.2)) and self.exited()):
                fail("waited for %r" % needle, self.output)

    def type(self, data):
        os.write(self.fd, data)

    def wait_for_editor(self, timeout=10.0):
        """Waits until the line editor has the terminal (canonical mode off): keys typed before that are echoed by the
        terminal itself, as in any shell's type-ahead, which would blur what the test checks."""
        deadline = time.monotonic() + timeout
        while termios.tcgetattr(self.fd)[3] & termios.ICANON:
            if time.monotonic() > deadline or self.exited():
                fail("the line editor never took the terminal", self.output)
            self.read(0.01)

    def exited(self):
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
        return self.status is not None

    def wait_exit(self, timeout=15.0):
        deadline = time.monotonic() + timeout
        while not self.exited():
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                fail("greta-vk did not exit", self.output)
            self.read(0.1)
        while self.read(0.05):
            pass
        if os.WIFSIGNALED(self.status):
            return -os.WTERMSIG(self.status)
        return os.WEXITSTATUS(self.status)


def chat_argv(greta, model, *extra):
    return [greta, "chat", model, "--temp", "0", "--backend", "cpu", *extra]


def chat_ctrl_c(greta, model, work):
    # -n -1: the greedy reply of this model runs on until the context is full; with 8192 tokens of context (four times
    # what it was trained for: a warning) that takes seconds, time enough to interrupt it.
    t = Terminal(chat_argv(greta, model, "-n", "-1", "--ctx", "8192"))
    at = t.expect(b"> ")
    t.wait_for_editor()
    t.type(b"Hello there\r")
    at = t.expect(b" was a little girl", at)  # the reply streams
    t.type(b"\x03")
    at = t.expect(b"(reply stopped", at, timeout=10)
    at = t.expect(b"> ", at)
    if t.exited():
        fail("chat ended at Ctrl-C mid-reply", t.output)
    t.wait_for_editor()
    t.type(b"\x03")  # at an empty prompt: leaves
    code = t.wait_exit()
    if code != 0:
        fail("chat exited with %d after Ctrl-C at an empty prompt, expected 0" % code, t.output)


def chat_editing(greta, model, work):
    saved = os.path.join(work, "chat_editing.json")
    if os.path.exists(saved):
        os.remove(saved)
    t = Terminal(chat_argv(greta, model, "-n", "8"))
    at = t.expect(b"> ")
    t.wait_for_editor()
    # "Hello here", four times Left, "t": "Hello there" only if the arrow keys move the cursor.
    t.type(b"Hello here" + b"\x1b[D" * 4 + b"t\r")
    at = t.expect(b" was a little girl named Lily", at)
    at = t.expect(b"> ", at)
    t.wait_for_editor()
    t.type(b"\x1b[A\r")  # Up: the last line again
    at = t.expect(b"> ", t.expect(b"Hello there", at))
    t.wait_for_editor()
    t.type(b"/save " + saved.encode() + b"\r")
    at = t.expect(b"saved 2 exchanges", at)
    t.wait_for_editor()
    t.type(b"/bye\r")
    code = t.wait_exit()
    if code != 0:
        fail("chat exited with %d after /bye" % code, t.output)
    if b"^[[" in t.output:
        fail("escape sequences were echoed instead of moving the cursor", t.output)
    with open(saved, encoding="utf-8") as f:
        messages = json.load(f)["messages"]
    users = [m["content"] for m in messages if m["role"] == "user"]
    if users != ["Hello there", "Hello there"]:
        fail("the saved user messages are %r" % users, t.output)
    os.remove(saved)


def chat_sigterm(greta, model, work):
    # A supervisor's SIGTERM while chat waits for input on a pipe: it leaves at once with 143 (128 + SIGTERM).
    p = subprocess.Popen(chat_argv(greta, model, "-n", "4"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, preexec_fn=default_signals)
    p.stdin.write(b"Hello there\n")
    p.stdin.flush()
    reply = p.stdout.readline()  # the first reply: chat is waiting for the next message now
    p.send_signal(signal.SIGTERM)
    try:
        _, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        fail("chat did not leave at SIGTERM")
    if p.returncode != 143 or not reply:
        fail("chat exited with %d after SIGTERM (reply %r), expected 143" % (p.returncode, reply), err)


def run_sigint(greta, model, work):
    p = subprocess.Popen([greta, "run", model, "-p", "Once upon a time", "-n", "-1", "--ctx", "8192", "--temp", "0",
                          "--backend", "cpu"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=default_signals)
    first = p.stdout.read(16)  # generation has started
    if not first:
        fail("no output from run")
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    if p.returncode != 130:
        fail("run exited with %d after SIGINT, expected 130" % p.returncode, err)
    if b"stop: interrupted" not in err:
        fail("no summary with 'stop: interrupted'", err)


def run_prompts_sigint(greta, model, work):
    prompts = os.path.join(work, "interrupted_prompts.txt")
    with open(prompts, "w") as f:
        f.write("Once upon a time\nThe little dog\nLily wanted to\nThe sun\n")
    # Generation to a context of 8192 (past the model's 2048): seconds per prompt, time enough to interrupt.
    p = subprocess.Popen([greta, "run", model, "--prompts-file", prompts, "--parallel", "2", "-n", "-1", "--ctx", "8192",
                          "--temp", "0", "--json", "--backend", "cpu"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=default_signals)
    time.sleep(1.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    os.remove(prompts)
    if p.returncode != 130:
        fail("run --prompts-file exited with %d after SIGINT, expected 130" % p.returncode, err)
    if b"stop: interrupted" not in err:
        fail("no summary with 'stop: interrupted'", err)
    lines = [json.loads(line) for line in out.decode().splitlines()]
    if len(lines) != 4 or [r["index"] for r in lines] != [0, 1, 2, 3]:
        fail("expected one JSON object per prompt, in order", out)
    if not any(r.get("stop") == "interrupted" for r in lines):
        fail("no prompt marked interrupted", out)


def synth_signal(greta, vocab, work, sig):
    out = os.path.join(work, "synth_interrupted_%d.gguf" % sig)  # one per scenario: they may run side by side
    for path in (out, out + ".part"):
        if os.path.exists(path):
            os.remove(path)
    # About 200 MiB of q4_K on one thread: half a minute, interrupted as soon as the partial file exists.
    p = subprocess.Popen([greta, "synth", out, "--dim", "2048", "--layers", "8", "--heads", "16", "--ffn", "5632",
                          "--type", "q4_k", "-j", "1", "-q", "--vocab-from", vocab],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=default_signals)
    deadline = time.monotonic() + 15
    while not os.path.exists(out + ".part"):
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            fail("synth wrote no partial file", p.communicate()[1])
        time.sleep(0.02)
    p.send_signal(sig)
    _, err = p.communicate(timeout=30)
    if p.returncode != 128 + sig:
        fail("synth exited with %d after signal %d, expected %d" % (p.returncode, sig, 128 + sig), err)
    if os.path.exists(out + ".part") or os.path.exists(out):
        fail("synth left its file behind", err)
    if b"interrupted" not in err:
        fail("synth did not say it was interrupted", err)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    scenario, greta, model = sys.argv[1:4]
    work = sys.argv[4] if len(sys.argv) > 4 else os.getcwd()
    os.environ["WORK_DIR"] = work
    scenarios = {
        "chat-ctrl-c": lambda: chat_ctrl_c(greta, model, work),
        "chat-editing": lambda: chat_editing(greta, model, work),
        "chat-sigterm": lambda: chat_sigterm(greta, model, work),
        "run-sigint": lambda: run_sigint(greta, model, work),
        "run-prompts-sigint": lambda: run_prompts_sigint(greta, model, work),
        "synth-sigint": lambda: synth_signal(greta, model, work, signal.SIGINT),
        "synth-sigterm": lambda: synth_signal(greta, model, work, signal.SIGTERM),
    }
    if scenario not in scenarios:
        sys.exit("unknown scenario %s (%s)" % (scenario, ", ".join(scenarios)))
    scenarios[scenario]()
    print("PASS")


if __name__ == "__main__":
    main()
