#!/usr/bin/env python3
"""Issue 6's benchmark table on one GPU machine, every figure beside the ceiling measured in the same run.

  python3 tools/bench/gpu_report.py [--build build] [--shared ../shared] [--models /tmp/greta-bench] [--backend vk]

1. Makes the two random-weight models of real shapes with `greta-vk synth` (skipped when the files exist):
   Llama-2-7B shape Q4_0 and Llama-3-8B shape Q4_K_M (the weights' values don't change the speed).
2. Measures the ceilings: shader-copy bandwidth (vk_copy_bench, read + write, 256 MiB) and, where PyTorch with CUDA
   is installed, its f16 GEMM rate at 8192^3 and 4096^3 (torch.matmul with PyTorch's default settings).
3. Runs `greta-vk bench -p 512 -n 128` on both models and vk_gemm_bench's f16 4096^3 case.
4. Prints one markdown table: pp512 and tg128 tokens/s, decode weight bytes/s as % of the copy bandwidth, prefill
   2 x params x tokens/s as % of the GEMM rate, and the coopmat GEMM as % of PyTorch's at the same shape.
Nothing is asserted: this is a report. Exit status is non-zero only when a tool fails.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MODELS = [
    ("7B Q4_0", "l7-q4_0.gguf",
     ["--arch", "llama", "--dim", "4096", "--layers", "32", "--heads", "32", "--kv-heads", "32", "--ffn", "11008",
      "--vocab-from", "{shared}/models/llama2-tiny-random.gguf", "--type", "q4_0"]),
    ("8B Q4_K_M", "l8-q4_k_m.gguf",
     ["--arch", "llama", "--dim", "4096", "--layers", "32", "--heads", "32", "--kv-heads", "8", "--ffn", "14336",
      "--vocab-from", "{shared}/vocab/ggml-vocab-llama-bpe.gguf.xz", "--type", "q4_k_m", "--rope-base", "500000"]),
]


def run(cmd, timeout=900):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    if done.returncode != 0:
        sys.exit(f"gpu_report: {cmd[0]} failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout


def torch_gemm_tflops(n):
    """PyTorch's f16 GEMM rate at n^3 (median of 20 after warm-up), or None without PyTorch/CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    for _ in range(5):
        a @ b
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return 2 * n ** 3 / times[len(times) // 2] / 1e12


def pct(x, ceiling):
    return f"{100 * x / ceiling:.1f} %" if ceiling else "n/a"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(ROOT), "shared"))
    ap.add_argument("--models", default="/tmp/greta-bench")
    ap.add_argument("--backend", default="vk")
    ap.add_argument("--reps", default="3")
    args = ap.parse_args()
    cli = os.path.join(args.build, "greta-vk")
    os.makedirs(args.models, exist_ok=True)

    copy = json.loads(run([os.path.join(args.build, "vk_copy_bench"), "--json", "--sizes", "256"]))
    copy_gbps = max(r["gbps"] for r in copy["results"] if r["method"].startswith("shader"))
    torch8k, torch4k = torch_gemm_tflops(8192), torch_gemm_tflops(4096)
    gemm = json.loads(run([os.path.join(args.build, "vk_gemm_bench"), "--json", "--mnk", "4096x4096x4096", "-t", "f16"]))
    coopmat = [r for r in gemm["results"] if "coopmat" in r["kernel"] and r["TFLOP/s"]]

    rows = []
    for label, name, synth in MODELS:
        path = os.path.join(args.models, name)
        if not os.path.exists(path):
            run([cli, "synth", path, "-q"] + [s.format(shared=args.shared) for s in synth])
        out = json.loads(run([cli, "bench", path, "-p", "512", "-n", "128", "-r", args.reps, "-o", "json",
                              "--backend", args.backend]))
        pp = next(r for r in out if r["test"] == "pp512")
        tg = next(r for r in out if r["test"] == "tg128")
        decode_gbps = tg["avg_ts"] * tg["model_bytes"] / 1e9
        prefill_tflops = 2 * pp["params"] * pp["avg_ts"] / 1e12
        rows.append((label, pp["avg_ts"], tg["avg_ts"], decode_gbps, prefill_tflops))

    print(f"\ndevice: {copy['device']}; driver: {copy['driver']}; backend: {args.backend}")
    print(f"ceilings: shader copy {copy_gbps:.0f} GB/s; PyTorch f16 GEMM "
          + (f"{torch8k:.0f} TFLOP/s at 8192^3, {torch4k:.0f} at 4096^3" if torch8k else "n/a (no PyTorch with CUDA)"))
    print("\n| model | pp512 t/s | tg128 t/s | decode GB/s (% copy) | prefill TFLOP/s (% GEMM rate) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, pp, tg, gbps, tflops in rows:
        print(f"| {label} | {pp:.0f} | {tg:.1f} | {gbps:.0f} ({pct(gbps, copy_gbps)}) | "
              f"{tflops:.1f} ({pct(tflops, torch8k)}) |")
    if coopmat:
        c = coopmat[0]
        print(f"\nvk_gemm_bench f16 4096^3 {c['kernel']}: {c['TFLOP/s']:.1f} TFLOP/s ({pct(c['TFLOP/s'], torch4k)} of "
              "PyTorch at 4096^3)")
    else:
        print("\nvk_gemm_bench f16 4096^3: no cooperative-matrix kernel on this device")


if __name__ == "__main__":
    main()
