#!/usr/bin/env bash
# Builds the libFuzzer target for the server's request parsers (api_request_fuzz, ASan + UBSan) with clang-14 and
# fuzzes it for SECONDS (default 300), starting from tests/server/corpus/ (seeds and past crashes, one input per file:
# a selector byte — C chat, P completions, T tokenize, D detokenize — then the body).
#   tests/fuzz/run_api_fuzz.sh [SECONDS] [BUILD_DIR]
# New corpus entries and crashes land in a temporary folder (printed). A crash: minimise it
# (api_request_fuzz -minimize_crash=1 FILE), copy it into tests/server/corpus/ as regression-NAME, fix the parser;
# greta_server_tests then replays it on every test run.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-300}
build=${2:-$root/build-fuzz}

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DGRETA_FUZZ=ON -DGRETA_BUILD_TESTS=OFF -DGRETA_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j2 --target api_request_fuzz

work=$(mktemp -d "${TMPDIR:-/tmp}/greta-api-fuzz.XXXXXX")
mkdir -p "$work/corpus" "$work/artifacts"
echo "fuzzing for ${secs}s; corpus and artifacts in $work"
status=0
"$build/tests/fuzz/api_request_fuzz" -max_total_time="$secs" -max_len=16384 -timeout=10 \
  -rss_limit_mb=2048 -malloc_limit_mb=512 -print_final_stats=1 \
  -dict="$root/tests/fuzz/api_request.dict" \
  -artifact_prefix="$work/artifacts/" "$work/corpus" "$root/tests/server/corpus" || status=$?
ls -l "$work/artifacts"
exit $status
