#!/usr/bin/env bash
# Batched decode on the lent one-GPU machine (issue 18; docs/benchmarks.md): the decode kernels' tests on the GPU,
# this build against a base build in alternating runs, and the table beside llama.cpp (CUDA, Vulkan with KHR
# cooperative matrices only, Vulkan with NVIDIA's coopmat2).
#
#   [BASE=path/to/greta-vk] [LAB=path] bash tools/bench/batched_lab.sh pack  # here, after the build: fills .carry/
#                                                                            # (~30 MiB; greta-vk-base, greta-vk-lab)
#   bash tools/bench/batched_lab.sh STEP...                        # there, carrying .carry and .peer
# Steps: setup (binaries, loader, fixtures, the 8B and 7B files under /tmp) | peer (starts llama.cpp's builds from
# .peer, ../shared/peer/make-kit.sh's kit, detached: about 6 minutes, during which no benchmark should run) |
# check (the decode kernels' and the batched GEMMs' tests; after running peer builds, which it waits for) |
# check-tiles (the f16 GEMM's other tiles: K groups, split-K, every tile greta-vk tune tries; a call of its own) |
# ab (S_TG of base and new alternating: base is AB_BASE, else greta-vk-base where packed, else greta-vk; AB_BASE_ENV,
# AB_NEW_ENV "VAR=VALUE ..." for each side, AB_ENV for both; AB_MODELS "l8 l7", AB_NPL "1 4", AB_ROUNDS 2, AB_NTG 64;
# AB_BASE e.g. .carry/greta-vk-lab) | ab-pp (the same for prefill: pp512, and S_PP of 16 prompts) | profile, trace
# (greta-vk's per-op shares, --profile, or a Chrome trace of 8 steps into $OUT, for AB_MODELS at AB_NPL; OBSERVE_G:
# another binary) | table-l8, table-l7 (batched_report.py: GRETA and the peers whose builds are done, --npp 512
# --ntg 128 --npl TABLE_NPL, by default 1,4,16,32,64; a few minutes each with all three).
# A call's device time is at most 10 minutes, so a lease runs e.g. `setup check ab peer`, then `table-l8`, then
# `table-l7`, each call within the machine's 30 s of warmth after the last. Logs go to $OUT (else ./out).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
# shellcheck source=lent_gpu.sh
. "$ROOT/tools/bench/lent_gpu.sh"

pack() {
  local b=$ROOT/build base=${BASE:-} lab=${LAB:-}
  rm -rf "$C"
  mkdir -p "$C"
  if [ -n "$base" ]; then cp "$base" "$C/greta-vk-base" || return 1; fi
  if [ -n "$lab" ]; then cp "$lab" "$C/greta-vk-lab" || return 1; fi
  lent_pack_bin "$C" "$b/greta-vk" "$b/tests/vk/greta_vk_backend_tests" ${base:+"$C/greta-vk-base"} \
    ${lab:+"$C/greta-vk-lab"} || return 1
  rm -f "$C/greta-vk-base" "$C/greta-vk-lab"
  lent_pack_fixtures "$C" || return 1
  du -sh "$C"
}

setup() {
  lent_setup "$C" || return 1
  say "machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/machine.txt"
  "$G" devices | head -3 | tee -a "$OUT/machine.txt"
  lent_synth "$G" "$C" 8b 7b
}

peer() { lent_peer "$ROOT/.peer" $PEER vulkan; }

# The tests of the decode kernels and fusions (the int8 matvec, its epilogues, the batched steps, the goldens beside
# other sequences) and of the batched steps' GEMMs (the int8 GEMM, the f16 GEMM's default tiles of 16-64 tokens):
# `check`. The f16 GEMM's tiles beyond those (K groups on five tiles, split-K, every tile greta-vk tune tries) are
# `check-tiles`, a call of their own: on the H200 the K-groups case alone took 100 s, and with every tile and every
# weight type the tests passed a call's 5 minutes (2026-12-04). The NVIDIA driver must stay loaded across the many
# instances a test process makes.
gpu_tests() {
  local log=$1 cases=$2 name
  # The driver compiles the tests' many pipelines on the CPU: beside llama.cpp's builds (the peer step) the tests did
  # not finish in a call's 10 minutes. Wait for running builds first.
  for name in bc bd; do
    if [ -f "$PEER/$name.started" ] && [ ! -f "$PEER/$name.done" ]; then
      echo "waiting for llama.cpp's $name build first"
      lent_peer_wait $PEER 480 $name > /dev/null
    fi
  done
  (cd /tmp && LD_PRELOAD=/usr/local/nvidia/lib64/libGLX_nvidia.so.0 "$C/greta_vk_backend_tests" --test-case="$cases" \
    2>&1 | tail -4 | tee "$OUT/$log")
}
check() {
  say "decode kernels and the batched steps' GEMMs on the GPU"
  gpu_tests check.log 'vk decode fusion*,vk int8-activation*,vk multi-token matvec*,vk batched*,vk golden: both prompts*,vk int8 cooperative-matrix GEMM*,vk decode attention*,vk coopmat matmul: the batched*'
}
check_tiles() {
  say "the f16 GEMM's tiles on the GPU"
  gpu_tests check-tiles.log 'vk coopmat matmul with*,every tile*'
}

# s_tg GRETA MODEL B [VAR=VALUE...]: S_TG (tokens/s) of one batched bench run of B sequences.
s_tg() {
  local g=$1 m=$2 n=$3
  shift 3
  env ${AB_ENV:-} "$@" "$g" bench "/tmp/$m.gguf" --batched --npp 512 --ntg "${AB_NTG:-64}" --npl "$n" 2>/dev/null |
    awk -F'|' '/^\|/ {v = $(NF - 3)} END {gsub(/ /, "", v); print v}'
}

ab() {
  local base=${AB_BASE:-$C/greta-vk-base} m n r line
  [ -x "$base" ] || base=$G
  say "S_TG, base ($(basename "$base") ${AB_BASE_ENV:-}) / new (greta-vk ${AB_NEW_ENV:-}), alternating; both: ${AB_ENV:-}"
  for m in ${AB_MODELS:-l8 l7}; do
    for n in ${AB_NPL:-1 4}; do
      line="$m B=$n:"
      for r in $(seq 1 "${AB_ROUNDS:-2}"); do
        line+=" base $(s_tg "$base" "$m" "$n" ${AB_BASE_ENV:-}) new $(s_tg "$G" "$m" "$n" ${AB_NEW_ENV:-})"
      done
      echo "$line" | tee -a "$OUT/ab.log"
    done
  done
}

# pp512 GRETA MODEL [VAR=VALUE...] / s_pp GRETA MODEL [VAR=VALUE...]: tokens/s of one prompt of 512 (`bench -p 512 -n 0
# -r 5`) and S_PP of 16 prompts of 512 (`bench --batched --npp 512 --npl 16`, 4 decode steps).
pp512() {
  local g=$1 m=$2
  shift 2
  env ${AB_ENV:-} "$@" "$g" bench "/tmp/$m.gguf" -p 512 -n 0 -r 5 2>/dev/null | awk -F'|' '/pp512/ {gsub(/ /, "", $8); print $8}'
}
s_pp() {
  local g=$1 m=$2
  shift 2
  env ${AB_ENV:-} "$@" "$g" bench "/tmp/$m.gguf" --batched --npp 512 --ntg 4 --npl 16 2>/dev/null |
    awk -F'|' '/^\|/ {v = $7} END {gsub(/ /, "", v); print v}'
}

# ab-pp: prefill of base and new alternating, as ab's decode (the same AB_* variables but AB_NPL).
ab_pp() {
  local base=${AB_BASE:-$C/greta-vk-base} m r line
  [ -x "$base" ] || base=$G
  say "pp512 and S_PP at 16, base ($(basename "$base") ${AB_BASE_ENV:-}) / new (greta-vk ${AB_NEW_ENV:-}), alternating"
  for m in ${AB_MODELS:-l8 l7}; do
    for r in $(seq 1 "${AB_ROUNDS:-2}"); do
      line="$m pp512: base $(pp512 "$base" "$m" ${AB_BASE_ENV:-}) new $(pp512 "$G" "$m" ${AB_NEW_ENV:-})"
      line+="; S_PP: base $(s_pp "$base" "$m" ${AB_BASE_ENV:-}) new $(s_pp "$G" "$m" ${AB_NEW_ENV:-})"
      echo "$line" | tee -a "$OUT/ab-pp.log"
    done
  done
}

# observe profile|trace: greta-vk's per-op shares (--profile, 32 steps) or a Chrome trace of 8 steps into $OUT, for
# AB_MODELS at AB_NPL, with AB_NEW_ENV (OBSERVE_G: another binary, e.g. .carry/greta-vk-lab).
observe() {
  local kind=$1 m n extra
  for m in ${AB_MODELS:-l8 l7}; do
    for n in ${AB_NPL:-1 4}; do
      say "$m B=$n: $kind (${AB_NEW_ENV:-})"
      if [ "$kind" = profile ]; then extra=(--ntg 32 --profile); else extra=(--ntg 8 --trace "$OUT/trace-$m-$n.json"); fi
      env ${AB_ENV:-} ${AB_NEW_ENV:-} "${OBSERVE_G:-$G}" bench "/tmp/$m.gguf" --batched --npp 512 --npl "$n" "${extra[@]}" 2>&1 |
        tee -a "$OUT/$kind.log" | tail -40
    done
  done
}

table() {
  local m=$1 peers=()
  if lent_peer_wait $PEER 300 bc; then peers+=(--peer "CUDA=$PEER/bc/bin/llama-batched-bench"); fi
  if lent_peer_wait $PEER 1 bd; then
    peers+=(--peer "KHR=$PEER/bd/bin/llama-batched-bench GGML_VK_DISABLE_COOPMAT2=1")
    peers+=(--peer "coopmat2=$PEER/bd/bin/llama-batched-bench")
  fi
  say "$m: GRETA beside llama.cpp"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/table-$m.txt"
  python3 "$ROOT/tools/bench/batched_report.py" "/tmp/$m.gguf" --greta "$G" --npp 512 --ntg 128 --npl "${TABLE_NPL:-1,4,16,32,64}" \
    --llama-args "-ngl 99" "${peers[@]}" 2>&1 | tee -a "$OUT/table-$m.txt"
}

[ $# -gt 0 ] || { sed -n 2,20p "$0"; exit 2; }
lent_env "$C"
for step in "$@"; do
  case $step in
    pack) pack ;; setup) setup ;; peer) peer ;; check) check ;; check-tiles) check_tiles ;; ab) ab ;; ab-pp) ab_pp ;;
    profile | trace) observe "$step" ;; table-l8) table l8 ;; table-l7) table l7 ;;
    *) echo "batched_lab.sh: unknown step $step"; exit 2 ;;
  esac
done
