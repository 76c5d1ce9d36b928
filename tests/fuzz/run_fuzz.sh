#!/usr/bin/env bash
# Builds the libFuzzer GGUF target with clang-14 (ASan + UBSan) and fuzzes it for SECONDS (default 300).
#   tests/fuzz/run_fuzz.sh [SECONDS] [BUILD_DIR]
# The seed corpus is generated from ../shared/models into a temporary folder (make_seeds.py); the committed
# regressions/ files are added to it. Crashes land in the temporary folder's artifacts/ (printed at the end):
# minimise them (gguf_fuzz -minimize_crash=1 FILE), copy them into regressions/, and gguf_test replays them.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-300}
build=${2:-$root/build-fuzz}
shared=${GRETA_SHARED_DIR:-$root/../shared}

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DGRETA_FUZZ=ON -DGRETA_BUILD_TESTS=OFF -DGRETA_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j2 --target gguf_fuzz

work=$(mktemp -d "${TMPDIR:-/tmp}/greta-fuzz.XXXXXX")
mkdir -p "$work/seeds" "$work/corpus" "$work/artifacts"
python3 "$root/tests/fuzz/make_seeds.py" "$shared/models" "$work/seeds"
for f in "$root"/tests/fuzz/regressions/*; do [[ $f == *.md ]] || cp "$f" "$work/seeds/"; done
echo "fuzzing for ${secs}s; corpus and artifacts in $work"
# -rss_limit_mb / -malloc_limit_mb turn any allocation sized by an unchecked number into a reported failure.
status=0
"$build/tests/fuzz/gguf_fuzz" -max_total_time="$secs" -max_len=65536 -timeout=10 \
  -rss_limit_mb=2048 -malloc_limit_mb=256 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus" "$work/seeds" || status=$?
ls -l "$work/artifacts"
exit $status
