#!/bin/sh
# A stand-in for llama.cpp's llama-batched-bench in tools/bench/batched_report.py's test: prints that tool's table
# for the -npp, -ntg and -npl it is given, with S_PP 50 and S_TG $FAKE_S_TG (default 100) tokens/s.
npp=; ntg=; npl=
while [ $# -gt 0 ]; do
  case $1 in -npp) npp=$2; shift ;; -ntg) ntg=$2; shift ;; -npl) npl=$2; shift ;; esac
  shift
done
echo "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |"
echo "|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|"
for p in $(echo "$npp" | tr , ' '); do for g in $(echo "$ntg" | tr , ' '); do for b in $(echo "$npl" | tr , ' '); do
  echo "| $p | $g | $b | $((b * (p + g))) | 1.000 | 50.00 | 1.000 | ${FAKE_S_TG:-100}.00 | 2.000 | 75.00 |"
done; done; done
