#!/usr/bin/env bash
# Checks the HIP plugin's device code without an AMD GPU: extracts the offload bundles from the plugin's .hip_fatbin
# section, unbundles every AMD code object with clang-offload-bundler, disassembles it with llvm-objdump, and fails
# unless, for every architecture the plugin was built for,
#   - every GEMM kernel (gemm_kernel<W>) and every flash-attention kernel (attention_prefill_kernel<N>) is present,
#   - CDNA objects (gfx908, gfx90a, gfx94x) use MFMA in each of them (v_mfma) and no WMMA,
#   - RDNA3 objects (gfx11xx) use WMMA in each of them (v_wmma) and no MFMA.
#
#   scripts/check_hip_disasm.sh --bundler PATH --objdump PATH --archs "gfx942;gfx90a;gfx1100;gfx1103" libgreta_hip.so
#
# Registered as the CTest test greta_hip_disasm (label hip) when the plugin is built. GRETA_DISASM_SWAP=1 swaps the
# expected instruction families: the check must then fail (greta_hip_disasm_negative shows that it can).
set -euo pipefail

bundler=clang-offload-bundler
objdump=llvm-objdump
archs=""
plugin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bundler) bundler="$2"; shift 2 ;;
    --objdump) objdump="$2"; shift 2 ;;
    --archs) archs="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) plugin="$1"; shift ;;
  esac
done
[ -n "$plugin" ] && [ -f "$plugin" ] || { echo "check_hip_disasm: no plugin given or not found: '$plugin'" >&2; exit 2; }
[ -n "$archs" ] || { echo "check_hip_disasm: --archs is required" >&2; exit 2; }
objcopy_bin="$(dirname "$objdump")/llvm-objcopy"
[ -x "$objcopy_bin" ] || objcopy_bin=objcopy

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. The fat binary section: in a linked plugin, one offload bundle per translation unit, back to back.
"$objcopy_bin" -O binary --only-section=.hip_fatbin "$plugin" "$work/fatbin.bin"
[ -s "$work/fatbin.bin" ] || { echo "FAIL: $plugin has no .hip_fatbin section (no device code)" >&2; exit 1; }
size=$(stat -c %s "$work/fatbin.bin")
mapfile -t offsets < <(grep -obUaF "__CLANG_OFFLOAD_BUNDLE__" "$work/fatbin.bin" | cut -d: -f1)
[ ${#offsets[@]} -gt 0 ] || { echo "FAIL: no offload bundle in .hip_fatbin" >&2; exit 1; }
offsets+=("$size")

# 2. Every AMD code object of every bundle, disassembled: per function, the count of v_mfma and v_wmma.
: > "$work/table"
for ((b = 0; b < ${#offsets[@]} - 1; ++b)); do
  start=${offsets[$b]}; len=$((offsets[b + 1] - start))
  dd if="$work/fatbin.bin" of="$work/b$b.bin" bs=64K iflag=skip_bytes,count_bytes skip="$start" count="$len" \
    status=none
  while read -r target; do
    case "$target" in *amdgcn-amd-amdhsa*) ;; *) continue ;; esac
    arch=${target##*--}; arch=${arch%%:*}
    "$bundler" --unbundle --type=o --input="$work/b$b.bin" --targets="$target" --output="$work/co"
    "$objdump" -d --no-show-raw-insn "$work/co" | awk -v arch="$arch" '
      /^[0-9a-f]+ <.*>:$/ { if (fn != "") print arch, fn, mfma, wmma; fn = $2; gsub(/[<>:]/, "", fn); mfma = 0; wmma = 0; next }
      /v_mfma/ { mfma++ } /v_wmma/ { wmma++ }
      END { if (fn != "") print arch, fn, mfma, wmma }' >> "$work/table"
  done < <("$bundler" --list --type=o --input="$work/b$b.bin")
done

# 3. The verdict, per architecture.
fail=0
IFS=';' read -r -a want <<< "$archs"
for a in "${want[@]}"; do
  a=${a%%:*}
  case "$a" in
    gfx908|gfx90a|gfx94*) need=mfma; forbid=wmma ;;
    gfx11*) need=wmma; forbid=mfma ;;
    *) echo "note: $a has no matrix-core kernels in this plugin (not checked)"; continue ;;
  esac
  if [ -n "${GRETA_DISASM_SWAP:-}" ]; then tmp=$need; need=$forbid; forbid=$tmp; fi
  for kernel in gemm_kernel attention_prefill_kernel; do
    rows=$(awk -v a="$a" -v k="$kernel" '$1 == a && index($2, k) > 0' "$work/table")
    n=$(printf '%s' "$rows" | grep -c . || true)
    if [ "$n" -eq 0 ]; then
      echo "FAIL: $a: no $kernel in the plugin's code objects"; fail=1; continue
    fi
    col_need=3; col_forbid=4; [ "$need" = wmma ] && { col_need=4; col_forbid=3; }
    bad_need=$(printf '%s\n' "$rows" | awk -v c="$col_need" '$c == 0 { print $2 }')
    bad_forbid=$(printf '%s\n' "$rows" | awk -v c="$col_forbid" '$c > 0 { print $2 }')
    total=$(printf '%s\n' "$rows" | awk -v c="$col_need" '{ s += $c } END { print s }')
    if [ -n "$bad_need" ]; then
      echo "FAIL: $a: $kernel instances without v_$need:"; printf '    %s\n' $bad_need; fail=1
    elif [ -n "$bad_forbid" ]; then
      echo "FAIL: $a: $kernel instances with v_$forbid:"; printf '    %s\n' $bad_forbid; fail=1
    else
      printf 'ok:   %-8s %-26s %2d instance(s), %4d v_%s, 0 v_%s\n' "$a" "$kernel" "$n" "$total" "$need" "$forbid"
    fi
  done
done
if [ "$fail" -ne 0 ]; then
  echo "check_hip_disasm: FAILED ($plugin)"
  exit 1
fi
echo "check_hip_disasm: passed ($plugin; ${#want[@]} architecture(s), $((${#offsets[@]} - 1)) bundle(s))"
