#!/usr/bin/env bash
# GRETA tests: builds (if needed) and runs every suite three ways:
#   1. build/       Release build; CTest runs all suites (Vulkan ones on the first device: lavapipe without a GPU),
#                   including greta_vk_tests_validation (Khronos validation layer on; any message fails the test);
#   2. build-asan/  the same suites under AddressSanitizer + UndefinedBehaviorSanitizer (the Vulkan backend suite's
#                   validation-layer run only in 1: under ASan it was most of CI's time).
# Needs scripts/setup.sh to have run once. Fixtures come from ../shared (override with GRETA_SHARED_DIR).
#   bash scripts/test.sh            # everything
#   SKIP_ASAN=1 bash scripts/test.sh  # just the Release build (quick local loop)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JOBS=$(nproc)
shared_opt=()
[ -n "${GRETA_SHARED_DIR:-}" ] && shared_opt=(-DGRETA_SHARED_DIR="$GRETA_SHARED_DIR")
log() { printf '[test] %s\n' "$*"; }

run_suite() {  # run_suite BUILD_DIR [cmake options...]
  local dir="$1"; shift
  log "configure + build $dir"
  cmake -S "$ROOT" -B "$ROOT/$dir" -G Ninja "${shared_opt[@]}" "$@" >/dev/null
  cmake --build "$ROOT/$dir" -j"$JOBS"
  log "ctest $dir"
  ctest --test-dir "$ROOT/$dir" --output-on-failure -j"$JOBS"
}

run_suite build -DCMAKE_BUILD_TYPE=Release
if [ -z "${SKIP_ASAN:-}" ]; then
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  [ -f "$ROOT/tests/lsan.supp" ] && export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$ROOT/tests/lsan.supp}
  # -g1: line tables only (reports keep file:line), a sixth less compile time than -g in CI's slowest build.
  run_suite build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DGRETA_SANITIZE=ON -DGRETA_BUILD_BENCH=OFF
fi
log "all tests passed"
