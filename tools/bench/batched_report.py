#!/usr/bin/env python3
"""GRETA's batched bench next to llama.cpp's on the same file (issue 18), Python's standard library only.

Runs `greta-vk bench MODEL --batched --npp .. --ntg .. --npl .. -o json` and, where llama.cpp's tools are present,
`llama-batched-bench -m MODEL -npp .. -ntg .. -npl .. -fa on -c N` (N: the KV positions the largest batch needs;
without it llama-batched-bench skips, silently, the batches that do not fit its default context), parses the markdown
table llama-batched-bench prints, and prints one table per (PP, TG): B, GRETA's S_PP and S_TG (tokens/s), llama.cpp's,
and the ratios GRETA / llama.cpp. Without llama.cpp it says so in one line and prints GRETA's columns only.

  python3 tools/bench/batched_report.py MODEL.gguf [--npp 512 --ntg 128 --npl 1,4,16,64] [--backend vk]
  python3 tools/bench/batched_report.py MODEL.gguf --llama-batched-bench ~/llama.cpp/build/bin/llama-batched-bench \\
      --llama-args "-ngl 99" --json
  python3 tools/bench/batched_report.py MODEL.gguf --llama-args "-ngl 99" \\
      --peer "CUDA=/tmp/peer/bc/bin/llama-batched-bench" \\
      --peer "KHR=/tmp/peer/bd/bin/llama-batched-bench GGML_VK_DISABLE_COOPMAT2=1" \\
      --peer "coopmat2=/tmp/peer/bd/bin/llama-batched-bench"

llama-batched-bench is looked up on PATH unless --llama-batched-bench names it (--no-llama: GRETA only). --peer
LABEL=PATH [VAR=VALUE ...] (repeatable, instead) runs several builds, each under its label with those environment
variables, in its own directory (where a build's libraries may lie), each with its own columns and ratios. They
run one after the other, GRETA first. Exit status 1 when any fails (its last output lines are printed).
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LLAMA_TOOL = "llama-batched-bench"


class ReportError(Exception):
    pass


def int_list(text, what):
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("%s %r: comma-separated integers" % (what, text))
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError("%s %r: comma-separated integers >= 0" % (what, text))
    return values


def joined(values):
    return ",".join(str(v) for v in values)


def run(argv, what, env=None, cwd=None):
    """Runs argv (with `env` added to the environment, in `cwd`); (stdout, stderr) as text. Raises ReportError with
    the output's tail when it fails."""
    shown = " ".join(["%s=%s" % (k, shlex.quote(v)) for k, v in sorted((env or {}).items())] +
                     [shlex.quote(a) for a in argv])
    print("running: %s" % shown, file=sys.stderr, flush=True)
    try:
        out = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=dict(os.environ, **(env or {})), cwd=cwd)
    except OSError as e:
        raise ReportError("%s could not be started: %s" % (what, e))
    stdout = out.stdout.decode("utf-8", "replace")
    stderr = out.stderr.decode("utf-8", "replace")
    if out.returncode != 0:
        tail = "\n".join((stdout + "\n" + stderr).strip().splitlines()[-20:])
        raise ReportError("%s exited with %d:\n%s" % (what, out.returncode, tail))
    return stdout, stderr


# ---- GRETA --------------------------------------------------------------------------------------------------------

def run_greta(args):
    argv = [args.greta, "bench", args.model, "--batched", "--npp", joined(args.npp), "--ntg", joined(args.ntg),
            "--npl", joined(args.npl), "-o", "json"]
    if args.backend:
        argv += ["--backend", args.backend]
    stdout, _ = run(argv, "greta-vk bench --batched")
    try:
        rows = json.loads(stdout)
    except ValueError as e:
        raise ReportError("greta-vk bench -o json printed no JSON (%s): %r" % (e, stdout[:300]))
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ReportError("greta-vk bench -o json: expected an array of objects, got %r" % stdout[:300])
    for r in rows:
        for key in ("pp", "tg", "b", "s_pp", "s_tg"):
            if key not in r:
                raise ReportError("greta-vk bench -o json: a row without %r: %r" % (key, r))
    return argv, rows


# ---- llama.cpp ----------------------------------------------------------------------------------------------------

def executable(path, what):
    found = shutil.which(path) if os.sep not in path else path
    if not (found and os.path.isfile(found) and os.access(found, os.X_OK)):
        raise ReportError("%s %s: not an executable file" % (what, path))
    return os.path.abspath(found)


def parse_peer(text):
    """--peer "LABEL=PATH [VAR=VALUE ...]" -> (label, path, env)."""
    words = shlex.split(text)
    if not words or "=" not in words[0] or words[0].startswith("="):
        raise ReportError('--peer %r: expected "LABEL=PATH [VAR=VALUE ...]"' % text)
    label, path = words[0].split("=", 1)
    env = {}
    for w in words[1:]:
        var, eq, value = w.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
            raise ReportError("--peer %r: %r is not VAR=VALUE" % (text, w))
        env[var] = value
    return label, executable(path, "--peer " + label), env


def find_peers(args):
    """The llama-batched-bench builds to run as [(label, path, env)], or [] with the reason."""
    if args.no_llama:
        return [], "--no-llama"
    if args.peer:
        peers = [parse_peer(p) for p in args.peer]
        labels = [p[0] for p in peers]
        if len(set(labels)) != len(labels):
            raise ReportError("--peer: every label once (%s)" % ", ".join(labels))
        return peers, None
    if args.llama_batched_bench:
        return [("llama.cpp", executable(args.llama_batched_bench, "--llama-batched-bench"), {})], None
    path = shutil.which(LLAMA_TOOL)
    if path:
        return [("llama.cpp", path, {})], None
    return [], "%s is not on PATH and neither --llama-batched-bench nor --peer was given" % LLAMA_TOOL


def parse_llama_table(text):
    """The rows of llama-batched-bench's markdown table:
    |    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
    |-------|--------|------|--------|----------|----------|----------|----------|----------|----------|
    |   512 |    128 |    1 |    640 |    0.143 |  3580.65 |    1.004 |   127.50 |    1.147 |   557.98 |
    as dicts with GRETA's JSON keys (pp, tg, b, n_kv, t_pp, s_pp, t_tg, s_tg, t, s). Columns are found by name."""
    names = {"PP": "pp", "TG": "tg", "B": "b", "N_KV": "n_kv", "T_PP s": "t_pp", "S_PP t/s": "s_pp",
             "T_TG s": "t_tg", "S_TG t/s": "s_tg", "T s": "t", "S t/s": "s"}
    columns, rows = None, []
    for line in text.splitlines():
        line = line.strip()
        if not (line.startswith("|") and line.endswith("|")):
            continue
        cells = [c.strip() for c in line[1:-1].split("|")]
        if columns is None:
            if "PP" in cells and "S_TG t/s" in cells:
                columns = [names.get(c) for c in cells]
            continue
        if all(re.fullmatch(r":?-+:?", c) for c in cells):  # the separator line
            continue
        if len(cells) != len(columns):
            continue
        row = {}
        try:
            for key, cell in zip(columns, cells):
                if key in ("pp", "tg", "b", "n_kv"):
                    row[key] = int(cell)
                elif key:
                    row[key] = float(cell)
        except ValueError:
            continue  # not a data row
        if all(k in row for k in ("pp", "tg", "b", "s_pp", "s_tg")):
            rows.append(row)
    if columns is None:
        raise ReportError("no | PP | TG | B | ... | S_TG t/s | ... table in llama-batched-bench's output")
    return rows


def run_llama(args, label, path, env):
    # The KV positions the largest batch needs (llama-batched-bench: pl * (pp + tg) without -pps), a little over.
    ctx = max(b * (p + g) for p in args.npp for g in args.ntg for b in args.npl) + 256
    argv = [path, "-m", os.path.abspath(args.model), "-npp", joined(args.npp), "-ntg", joined(args.ntg), "-npl",
            joined(args.npl), "-fa", "on", "-c", str(ctx)] + shlex.split(args.llama_args)
    stdout, stderr = run(argv, "%s (%s)" % (LLAMA_TOOL, label), env, os.path.dirname(path))
    try:
        rows = parse_llama_table(stdout)
    except ReportError:
        rows = parse_llama_table(stdout + "\n" + stderr)  # some builds log the table to stderr
    return argv, rows


# ---- the report ---------------------------------------------------------------------------------------------------

def combine(greta_rows, peers):
    """One entry per GRETA row (in its order), with each peer's numbers and the ratios GRETA / peer where it has
    that row (None where it printed none). peers: [(label, rows)]."""
    out = []
    for g in greta_rows:
        entry = {"pp": g["pp"], "tg": g["tg"], "b": g["b"], "greta_s_pp": g["s_pp"], "greta_s_tg": g["s_tg"],
                 "peers": {}}
        for label, rows in peers:
            lr = next((r for r in rows if (r["pp"], r["tg"], r["b"]) == (g["pp"], g["tg"], g["b"])), None)
            entry["peers"][label] = {
                "s_pp": lr["s_pp"] if lr else None, "s_tg": lr["s_tg"] if lr else None,
                "ratio_s_pp": g["s_pp"] / lr["s_pp"] if lr and lr["s_pp"] > 0 else None,
                "ratio_s_tg": g["s_tg"] / lr["s_tg"] if lr and lr["s_tg"] > 0 else None}
        out.append(entry)
    return out


def fmt(v, ratio=False):
    if v is None:
        return "—"
    return "%.2fx" % v if ratio else "%.2f" % v


def print_tables(model, greta_rows, peers, peer_note):
    g0 = greta_rows[0] if greta_rows else {}
    print("model %s | GRETA: %s on %s, KV %s" % (os.path.basename(model), g0.get("backend", "?"), g0.get("device", "?"),
                                                 g0.get("kv_type", "?")))
    if not peers:
        print("llama.cpp: not run (%s): GRETA's columns only" % peer_note)
    entries = combine(greta_rows, peers)
    shapes = []
    for e in entries:
        if (e["pp"], e["tg"]) not in shapes:
            shapes.append((e["pp"], e["tg"]))
    header = ["B", "GRETA S_PP", "GRETA S_TG"]
    for label, _ in peers:
        header += ["%s S_PP" % label, "%s S_TG" % label, "S_PP GRETA/%s" % label, "S_TG GRETA/%s" % label]
    for pp, tg in shapes:
        print()
        print("PP %d, TG %d (tokens/s)" % (pp, tg))
        print()
        print("| " + " | ".join(header) + " |")
        print("|" + "---:|" * len(header))
        for e in entries:
            if (e["pp"], e["tg"]) != (pp, tg):
                continue
            cells = [str(e["b"]), fmt(e["greta_s_pp"]), fmt(e["greta_s_tg"])]
            for label, _ in peers:
                p = e["peers"][label]
                cells += [fmt(p["s_pp"]), fmt(p["s_tg"]), fmt(p["ratio_s_pp"], True), fmt(p["ratio_s_tg"], True)]
            print("| " + " | ".join(cells) + " |")
    if any(p["s_tg"] is None for e in entries for p in e["peers"].values()):
        print()
        print("—: llama-batched-bench printed no row for that batch")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="a GGUF model (MODEL.gguf)")
    ap.add_argument("--greta", default=os.path.join(REPO_ROOT, "build", "greta-vk"),
                    help="greta-vk (default: build/greta-vk under the repository root)")
    ap.add_argument("--llama-batched-bench", metavar="PATH",
                    help="llama.cpp's llama-batched-bench (default: %s on PATH, if there)" % LLAMA_TOOL)
    ap.add_argument("--peer", action="append", metavar='"LABEL=PATH [VAR=VALUE ...]"',
                    help="a llama-batched-bench build under a label, with environment variables (repeatable)")
    ap.add_argument("--no-llama", action="store_true", help="GRETA only, even if llama-batched-bench is on PATH")
    ap.add_argument("--llama-args", default="", metavar="ARGS",
                    help='more arguments for llama-batched-bench, e.g. "-ngl 99" (one string, shell-split)')
    ap.add_argument("--npp", type=lambda s: int_list(s, "--npp"), default=[512], help="prompt tokens (default 512)")
    ap.add_argument("--ntg", type=lambda s: int_list(s, "--ntg"), default=[128], help="generated tokens (default 128)")
    ap.add_argument("--npl", type=lambda s: int_list(s, "--npl"), default=[1, 4, 16, 64],
                    help="sequences per batch (default 1,4,16,64)")
    ap.add_argument("--backend", help="greta-vk's --backend (cpu, vk, hip)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the tables")
    args = ap.parse_args()

    try:
        if not os.path.isfile(args.model):
            raise ReportError("%s: no such file" % args.model)
        if not (os.path.isfile(args.greta) and os.access(args.greta, os.X_OK)):
            raise ReportError("%s: no greta-vk there (build it, or give --greta PATH)" % args.greta)
        peers, peer_note = find_peers(args)
        greta_argv, greta_rows = run_greta(args)
        peer_runs = []  # (label, env, argv, rows)
        for label, path, env in peers:
            argv, rows = run_llama(args, label, path, env)
            peer_runs.append((label, env, argv, rows))
    except ReportError as e:
        print("batched_report: %s" % e, file=sys.stderr)
        sys.exit(1)

    table_peers = [(label, rows) for label, _, _, rows in peer_runs]
    if args.json:
        json.dump({"model": args.model,
                   "greta": {"command": greta_argv, "rows": greta_rows},
                   "llama_cpp": [{"label": label, "env": env, "command": argv, "rows": rows}
                                 for label, env, argv, rows in peer_runs] if peer_runs else {"not_run": peer_note},
                   "table": combine(greta_rows, table_peers)}, sys.stdout, indent=2)
        print()
    else:
        print_tables(args.model, greta_rows, table_peers, peer_note)


if __name__ == "__main__":
    main()
