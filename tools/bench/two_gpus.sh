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
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
C=$ROOT/.carry
G=$C/greta-vk
M8=/tmp/l8-q4_k_m.gguf
PEER=/tmp/peer
export GRETA_HIP_PLUGIN=$C/libgreta_hip_cuda.so
export LD_LIBRARY_PATH=$C${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
say() { printf '\n## %s\n' "$*"; }
# run LOG CMD...: the command's output to the terminal and to $OUT/LOG
run() { local log=$1; shift; echo "+ $*" | tee -a "$OUT/$log"; "$@" 2>&1 | tee -a "$OUT/$log"; }

pack() {
  local b=$ROOT/build shared
  shared=$(sed -n 's/^GRETA_SHARED_DIR:[A-Z]*=//p' "$b/CMakeCache.txt")
  rm -rf "$C"; mkdir -p "$C/shared" "$C/bin"
  cp "$b/greta-vk" "$b/tests/vk/greta_vk_backend_tests" "$b/tests/hip/greta_hip_backend_tests" \
    "$b/libgreta_hip_cuda.so" "$C/bin/" || return 1
  strip "$C"/bin/*
  # The build machine's shared libraries that the GPU machine's image lacks (cpp-httplib, libedit and theirs).
  local lib
  for lib in libcpp-httplib libedit libbsd libmd libbrotlidec libbrotlienc libbrotlicommon; do
    cp -L "$(ldd "$b/greta-vk" | awk -v l="$lib.so" 'index($1, l) == 1 {print $3}')" "$C/bin/" || return 1
  done
  tar -C "$C/bin" -cf - . | xz -T2 -6 > "$C/bin.tar.xz"  # the embedded SPIR-V compresses 4-5x
  rm -rf "$C/bin"
  mkdir -p "$C/shared/next" "$C/shared/vocab"
  cp -r "$shared/device" "$shared/models" "$shared/golden" "$C/shared/"
  cp -r "$shared/next/models" "$shared/next/golden" "$C/shared/next/"
  cp "$shared/vocab/ggml-vocab-llama-bpe.gguf.xz" "$C/shared/vocab/"
  echo "$shared" > "$C/shared_dir"
  du -sh "$C"
}

setup() {
  [ -x "$G" ] || tar -C "$C" -xJf "$C/bin.tar.xz"
  for f in "$C"/shared/device/*.deb; do dpkg -x "$f" /; done
  ldconfig
  local shared
  shared=$(cat "$C/shared_dir")  # where the test binaries look for the fixtures
  if [ ! -e "$shared" ]; then mkdir -p "$(dirname "$shared")"; ln -s "$C/shared" "$shared"; fi
  say "machine"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
    --format=csv | tee "$OUT/machine.txt"
  nvidia-smi topo -m | tee -a "$OUT/machine.txt"
  nproc | tee -a "$OUT/machine.txt"
  "$G" devices | tee -a "$OUT/machine.txt"
  [ -f $M8 ] || "$G" synth $M8 -q --arch llama --dim 4096 --layers 32 --heads 32 --kv-heads 8 --ffn 14336 \
    --vocab-from "$C"/shared/vocab/ggml-vocab-llama-bpe.gguf.xz --type q4_k_m --rope-base 500000 --repeat-chunk
}

# llama.cpp's CUDA build (sm_90) of llama-bench and llama-batched-bench, detached: it goes on after the call.
peer() {
  mkdir -p $PEER
  [ -f $PEER/CMakeLists.txt ] || (cd $PEER && tar xJf "$ROOT/.peer/llama-src.tar.xz" &&
    sed -i '/add_subdirectory(mtmd)/d; /add_subdirectory(tts)/d' tools/CMakeLists.txt)
  if [ -f $PEER/bc.done ] && [ "$(cat $PEER/bc.done)" != 0 ]; then  # an earlier try failed: say why, try again
    tail -20 $PEER/bc.log; rm -rf $PEER/bc $PEER/bc.started $PEER/bc.done
  fi
  [ -x /usr/local/cuda/bin/nvcc ] && export CUDACXX=/usr/local/cuda/bin/nvcc PATH=/usr/local/cuda/bin:$PATH
  [ -f $PEER/bc.started ] || { touch $PEER/bc.started; (cd $PEER && setsid bash -c "cmake -S . -B bc -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >bc.log 2>&1 && cmake --build bc -j28 --target llama-bench \
    llama-batched-bench >>bc.log 2>&1; echo \$? > bc.done" </dev/null >/dev/null 2>&1 &); }
}

peer_wait() {  # peer_wait SECONDS: true once llama.cpp's build has finished well
  for _ in $(seq 1 "$1"); do [ -f $PEER/bc.done ] && break; sleep 1; done
  cp $PEER/bc.log "$OUT/peer-build.log" 2>/dev/null
  [ -f $PEER/bc.done ] && [ "$(cat $PEER/bc.done)" = 0 ]
}

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
  peer_wait 400 || { echo "llama.cpp's build did not finish well:"; tail -5 $PEER/bc.log; return 1; }
  say "llama.cpp CUDA, same file: one GPU, -sm layer even and 1:3"
  local B=$PEER/bc/bin
  run peer.log "$B/llama-bench" -m $M8 -ngl 99 -fa 1 -p 512,4096 -n 128 -r 3 -sm none -mg 0
  run peer.log "$B/llama-bench" -m $M8 -ngl 99 -fa 1 -p 512,4096 -n 128 -r 3 -sm layer
  run peer.log "$B/llama-bench" -m $M8 -ngl 99 -fa 1 -p 512,4096 -n 128 -r 3 -sm layer -ts 1/3
  run peer.log "$B/llama-batched-bench" -m $M8 -ngl 99 -fa on -c 41984 -npp 512 -ntg 128 -npl 1,16,64 -sm none
  run peer.log "$B/llama-batched-bench" -m $M8 -ngl 99 -fa on -c 41984 -npp 512 -ntg 128 -npl 1,16,64 -sm layer
}

[ $# -gt 0 ] || { sed -n 2,10p "$0"; exit 2; }
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
for step in "$@"; do
  case $step in
    pack) pack ;; setup) setup ;; cli) cli ;; peer-wait) peer_wait 540; tail -3 $PEER/bc.log ;; peer) peer ;; check) check ;; bench) bench ;; hip-bench) hip_bench ;; peer-bench) peer_bench ;;
    *) echo "two_gpus.sh: unknown step $step"; exit 2 ;;
  esac
done
