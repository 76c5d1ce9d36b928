# Shared by the scripts that run on the lent GPU machine (two_gpus.sh, batched_lab.sh): sourced, not run. The
# machine (Ubuntu 24.04, NVIDIA's driver, no Vulkan loader, no glvnd) gets a copy of the working tree plus what a
# script's `pack` step gathered here into .carry/; its binaries come from this machine's build (Debian 12).
# Needs ROOT (the repository root) set by the sourcing script; sets what every such script uses:
OUT=${OUT:-$ROOT/out}  # logs
mkdir -p "$OUT"
C=$ROOT/.carry  # what `pack` gathered (the binaries, unpacked there, and shared/)
G=$C/greta-vk
PEER=/tmp/peer  # llama.cpp's builds
say() { printf '\n## %s\n' "$*"; }
# run LOG CMD...: the command's output to the terminal and to $OUT/LOG
run() { local log=$1; shift; echo "+ $*" | tee -a "$OUT/$log"; "$@" 2>&1 | tee -a "$OUT/$log"; }

# lent_pack_bin DIR BINARY...: the binaries, stripped, and the build machine's shared libraries that the GPU machine's
# image lacks (cpp-httplib, libedit and theirs), as DIR/bin.tar.xz (the embedded SPIR-V compresses 4-5x).
lent_pack_bin() {
  local dir=$1 lib
  shift
  mkdir -p "$dir/bin"
  cp "$@" "$dir/bin/" || return 1
  strip "$dir"/bin/*
  for lib in libcpp-httplib libedit libbsd libmd libbrotlidec libbrotlienc libbrotlicommon; do
    cp -L "$(ldd "$1" | awk -v l="$lib.so" 'index($1, l) == 1 {print $3}')" "$dir/bin/" || return 1
  done
  tar -C "$dir/bin" -cf - . | xz -T2 -6 > "$dir/bin.tar.xz"
  rm -rf "$dir/bin"
}

# lent_pack_fixtures DIR: ../shared's loader and glvnd packages (device/), models, goldens (next/ too) and the
# Llama-3 vocabulary into DIR/shared, and the path the test binaries were built to read them from.
lent_pack_fixtures() {
  local dir=$1 shared
  shared=$(sed -n 's/^GRETA_SHARED_DIR:[A-Z]*=//p' "$ROOT/build/CMakeCache.txt")
  mkdir -p "$dir/shared/next" "$dir/shared/vocab"
  cp -r "$shared/device" "$shared/models" "$shared/golden" "$dir/shared/" || return 1
  cp -r "$shared/next/models" "$shared/next/golden" "$dir/shared/next/" || return 1
  cp "$shared/vocab/ggml-vocab-llama-bpe.gguf.xz" "$dir/shared/vocab/" || return 1
  echo "$shared" > "$dir/shared_dir"
}

# lent_setup DIR: there, the binaries unpacked into DIR, the loader and glvnd installed, the fixtures where the test
# binaries look for them.
lent_setup() {
  local dir=$1 shared f
  [ -x "$dir/greta-vk" ] || tar -C "$dir" -xJf "$dir/bin.tar.xz" || return 1
  for f in "$dir"/shared/device/*.deb; do dpkg -x "$f" /; done
  ldconfig
  shared=$(cat "$dir/shared_dir")
  # An absolute target (DIR may be relative), replacing a link left dangling by an earlier call.
  if [ ! -e "$shared" ]; then mkdir -p "$(dirname "$shared")"; ln -sfn "$(realpath "$dir")/shared" "$shared"; fi
}

# lent_env DIR: what every step there needs (the sourcing script calls it first): NVIDIA's Vulkan driver for the
# loader, DIR's libraries.
lent_env() {
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  export LD_LIBRARY_PATH=$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

# lent_synth GRETA DIR SHAPE...: the benchmarks' random-weight files of real shapes under /tmp, once per machine (at
# once, about 40 s): 8b /tmp/l8.gguf (Llama-3-8B shape, Q4_K_M), 7b /tmp/l7.gguf (Llama-2-7B shape, Q4_0); DIR holds
# shared/.
lent_synth() {
  local g=$1 dir=$2 shape
  shift 2
  for shape in "$@"; do
    case $shape in
      8b) [ -f /tmp/l8.gguf ] || "$g" synth /tmp/l8.gguf -q --arch llama --dim 4096 --layers 32 --heads 32 \
            --kv-heads 8 --ffn 14336 --vocab-from "$dir/shared/vocab/ggml-vocab-llama-bpe.gguf.xz" --type q4_k_m \
            --rope-base 500000 --repeat-chunk & ;;
      7b) [ -f /tmp/l7.gguf ] || "$g" synth /tmp/l7.gguf -q --arch llama --dim 4096 --layers 32 --heads 32 \
            --kv-heads 32 --ffn 11008 --vocab-from "$dir/shared/models/llama2-tiny-random.gguf" --type q4_0 \
            --repeat-chunk & ;;
      *) echo "lent_synth: unknown shape $shape"; return 1 ;;
    esac
  done
  wait
}

# lent_peer KIT DIR [vulkan]: llama.cpp's llama-bench and llama-batched-bench from ../shared/peer/make-kit.sh's KIT,
# built under DIR, detached (the builds go on after the call; about 6 minutes): DIR/bc, CUDA for sm_90; with
# `vulkan` also DIR/bd, the CPU build that loads the kit's prebuilt Vulkan backend at run time. The bundle lacks
# tools/ui and the server's assets, so those subdirectories go with mtmd and tts. While they build, run no
# benchmark: the compile starves the host thread that records and submits GRETA's steps (the 8B's S_TG at 4
# sequences read 510 tokens/s beside it instead of 840).
lent_peer() {
  local kit=$1 dir=$2 with_vulkan=${3:-}
  local flags="-G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
  flags+=" -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_SERVER=OFF"
  mkdir -p "$dir"
  [ -f "$dir/CMakeLists.txt" ] || (cd "$dir" && tar xJf "$kit/llama-src.tar.xz" &&
    sed -i '/add_subdirectory(mtmd)/d; /add_subdirectory(tts)/d; /add_subdirectory(ui)/d; /add_subdirectory(server)/d' \
      tools/CMakeLists.txt) || return 1
  [ -x /usr/local/cuda/bin/nvcc ] && export CUDACXX=/usr/local/cuda/bin/nvcc PATH=/usr/local/cuda/bin:$PATH
  local jobs=$(($(nproc) * 3 / 4))
  lent_peer_build "$dir" bc "$flags -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" "$jobs" "llama-bench llama-batched-bench"
  if [ -n "$with_vulkan" ]; then
    [ -f "$dir/libggml-vulkan.so" ] || xz -dc "$kit/libggml-vulkan.so.xz" > "$dir/libggml-vulkan.so"
    lent_peer_build "$dir" bd "$flags -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF" 4 \
      "llama-bench llama-batched-bench ggml-cpu" "cp libggml-vulkan.so bd/bin/"
  fi
}

# lent_peer_build DIR NAME FLAGS JOBS TARGETS [AFTER]: one detached build; a failed earlier try is shown and redone.
lent_peer_build() {
  local dir=$1 name=$2 flags=$3 jobs=$4 targets=$5 after=${6:-true}
  if [ -f "$dir/$name.done" ] && [ "$(cat "$dir/$name.done")" != 0 ]; then
    tail -20 "$dir/$name.log"
    rm -rf "${dir:?}/$name" "$dir/$name.started" "$dir/$name.done"
  fi
  [ -f "$dir/$name.started" ] && return 0
  touch "$dir/$name.started"
  (cd "$dir" && setsid bash -c "cmake -S . -B $name $flags >$name.log 2>&1 && cmake --build $name -j$jobs \
    --target $targets >>$name.log 2>&1; r=\$?; $after; echo \$r > $name.done" </dev/null >/dev/null 2>&1 &)
}

# lent_peer_wait DIR SECONDS NAME...: waits up to SECONDS for those builds; true once all have finished well.
lent_peer_wait() {
  local dir=$1 seconds=$2 name all
  shift 2
  for name in "$@"; do
    [ -f "$dir/$name.started" ] || { echo "llama.cpp's $name build was not started (the peer step)"; return 1; }
  done
  for _ in $(seq 1 "$seconds"); do
    all=1
    for name in "$@"; do [ -f "$dir/$name.done" ] || all=0; done
    [ $all = 1 ] && break
    sleep 1
  done
  for name in "$@"; do
    if [ ! -f "$dir/$name.done" ] || [ "$(cat "$dir/$name.done")" != 0 ]; then
      echo "llama.cpp's $name build has not finished well:"
      tail -5 "$dir/$name.log" 2>/dev/null
      return 1
    fi
  done
}
