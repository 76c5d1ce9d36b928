#!/usr/bin/env bash
# The layer split on a machine with two GPUs (the lent `nvidia-h200-x2`; docs/benchmarks.md, "Two GPUs"): the goldens
# over both GPUs and the split's speed beside one GPU's, with llama.cpp's `-sm layer` where its kit is there.
#
#   bash tools/bench/two_gpus.sh pack         # here, after the build: fills .carry/ (about 60 MiB)
#   bash tools/bench/two_gpus.sh STEP...      # there; STEP: setup | peer | peer-wait | check | cli | bench | hip-bench |
#                                             # peer-bench (peer starts llama.cpp's build; the bench steps want it done)
#
# Expects, in the repository root, what `two_gpus.sh pack` gathers on the build machine (a build configured with
# -DGRETA_HIP_CUDA=ON): .carry/ with greta-vk, the Vulkan and HIP backend test binaries, the HIP plugin's CUDA build
# (libgreta_hip_cuda.so), ../shared's loader and glvnd packages (device/) and its models, golden, next and vocab,
# which the tests find at the GRETA_SHARED_DIR they were built with; and, for the peer steps, .peer/
# (../shared/peer/make-kit.sh's kit). Carry both. Logs go to $OUT (else ./out). Every step can run again: the
# models and llama.cpp's build are made once per machine, under /tmp.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
# shellcheck source=lent_gpu.sh
. "$ROOT/tools/bench/lent_gpu.sh"
M8=/tmp/l8.gguf
export GRETA_HIP_PLUGIN=$C/libgreta_hip_cuda.so

pack() {
  local b=$ROOT/build
  rm -rf "$C"
  lent_pack_bin "$C" "$b/greta-vk" "$b/tests/vk/greta_vk_backend_tests" "$b/tests/hip/greta_hip_backend_tests" \
    "$b/libgreta_hip_cuda.so" || return 1
  lent_pack_fixtures "$C" || return 1
  du -sh "$C"
}

setup() {
  lent_setup "$C" || return 1
  say "machine"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
    --format=csv | tee "$OUT/machine.txt"
  nvidia-smi topo -m | tee -a "$OUT/machine.txt"
  nproc | tee -a "$OUT/machine.txt"
  "$G" devices | tee -a "$OUT/machine.txt"
  lent_synth "$G" "$C" 8b
}

# llama.cpp's CUDA build (sm_90) of llama-bench and llama-batched-bench, detached: it goes on after the call.
peer() { lent_peer "$ROOT/.peer" $PEER; }

peer_wait() { lent_peer_wait $PEER "$1" bc; }  # peer_wait SECONDS: true once llama.cpp's build has finished well

check() {
  say "goldens over two Vulkan GPUs"
  GRETA_REQUIRE_TWO_GPUS=1 run check-vk.log "$C"/greta_vk_backend_tests -tc='*two GPUs*,*many passes*' -s
  say "goldens over two HIP GPUs (the CUDA build)"
  GRETA_REQUIRE_TWO_GPUS=1 GRETA_HIP_REQUIRE_DEVICE=1 run check-hip.log \
    "$C"/greta_hip_backend_tests -tc='*two GPUs*,*many passes*' -s
}

cli() {
  say "the CLI on both GPUs"
  for b in vk hip; do
    run check-cli.log "$G" run "$C"/shared/models/stories260K-q8_0.gguf -p "Once upon a time" -n 24 --temp 0 \
      --backend $b --devices 0,1 --tensor-split 1,3
  done
}

bench() {
  say "8B Q4_K_M, Vulkan: one GPU, both GPUs even and 1:3"
  run bench-vk.log "$G" bench $M8 -p 512,4096 -n 128 -r 3 --device 0
  run bench-vk.log "$G" bench $M8 -p 512,4096 -n 128 -r 3 --devices 0,1
  run bench-vk.log "$G" bench $M8 -p 512,4096 -n 128 -r 3 --devices 0,1 --tensor-split 1,3
  run bench-vk.log "$G" bench $M8 --batched --npp 512 --ntg 128 --npl 1,16,64 --device 0
  run bench-vk.log "$G" bench $M8 --batched --npp 512 --ntg 128 --npl 1,16,64 --devices 0,1
  say "8B Q4_K_M under --device-memory-limit 4G: one GPU (the rest on the CPU) and both GPUs"
  run bench-limit.log "$G" bench $M8 -p 32 -n 8 -r 1 --device 0 --device-memory-limit 4G
  run bench-limit.log "$G" bench $M8 -p 512 -n 128 -r 3 --devices 0,1 --device-memory-limit 4G
  run bench-limit.log "$G" bench $M8 --batched --npp 512 --ntg 128 --npl 1,16 --devices 0,1 --device-memory-limit 4G
}

hip_bench() {
  say "8B Q4_K_M, HIP (CUDA build): one GPU, both GPUs"
  run bench-hip.log "$G" bench $M8 -p 512 -n 128 -r 2 --backend hip --device 0
  run bench-hip.log "$G" bench $M8 -p 512 -n 128 -r 2 --backend hip --devices 0,1
}

peer_bench() {
  peer_wait 400 || return 1
  say "llama.cpp CUDA, same file: one GPU, -sm layer even and 1:3"
  local B=$PEER/bc/bin
  run peer.log "$B/llama-bench" -m $M8 -ngl 99 -fa 1 -p 512,4096 -n 128 -r 3 -sm none -mg 0
  run peer.log "$B/llama-bench" -m $M8 -ngl 99 -fa 1 -p 512,4096 -n 128 -r 3 -sm layer
  run peer.log "$B/llama-bench" -m $M8 -ngl 99 -fa 1 -p 512,4096 -n 128 -r 3 -sm layer -ts 1/3
  run peer.log "$B/llama-batched-bench" -m $M8 -ngl 99 -fa on -c 41984 -npp 512 -ntg 128 -npl 1,16,64 -sm none
  run peer.log "$B/llama-batched-bench" -m $M8 -ngl 99 -fa on -c 41984 -npp 512 -ntg 128 -npl 1,16,64 -sm layer
}

[ $# -gt 0 ] || { sed -n 2,10p "$0"; exit 2; }
lent_env "$C"
for step in "$@"; do
  case $step in
    pack) pack ;; setup) setup ;; cli) cli ;; peer-wait) peer_wait 540; tail -3 $PEER/bc.log ;; peer) peer ;; check) check ;; bench) bench ;; hip-bench) hip_bench ;; peer-bench) peer_bench ;;
    *) echo "two_gpus.sh: unknown step $step"; exit 2 ;;
  esac
done
