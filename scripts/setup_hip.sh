#!/usr/bin/env bash
# HIP toolchain for the HIP plugin (src/hip, libgreta_hip.so). Called by scripts/setup.sh with DEPS=<repo>/.deps and
# DISTRO=debian12|ubuntu2404 in the environment; can also be run alone (same variables, or defaults below).
#
# What the plugin build needs (cmake/Hip.cmake looks for exactly these):
#   - a clang that compiles HIP for gfx942/gfx90a/gfx1100/gfx1103 plus clang-offload-bundler, ld.lld and llvm-objdump
#     (bundling device code and the disassembly check in scripts/check_hip_disasm.sh);
#   - the HIP headers (hip/hip_runtime.h);
#   - the ROCm device libraries (ocml/ockl bitcode, oclc_isa_version_942.bc ...).
# No HIP runtime (libamdhip64.so) is needed to build: the plugin resolves HIP symbols when greta-vk loads it on a
# machine with ROCm (see src/hip/hip_loader.h).
#
# Debian 12: clang-19, lld-19, llvm-19 and clang-tools-19 come from bookworm. Bookworm's HIP headers (libamdhip64-dev
#   5.2) are unpacked into $DEPS/hip WITHOUT installing the package: it depends on the 5.2 runtime, which we do not
#   want on build machines. Bookworm's device libraries (5.2) lack gfx942, so trixie's rocm-device-libs-17 (bitcode
#   only, no binaries) is unpacked into $DEPS/rocm-device-libs, fetched through apt's own options with the private
#   trixie sources list that setup.sh uses ($DEPS/trixie-apt), never touching the system's apt sources.
# Ubuntu 24.04 (UNTESTED: no Ubuntu machine was available): Ubuntu's ROCm packages (hipcc pulls Ubuntu's clang-17
#   build with AMDGPU support; libamdhip64-dev, rocm-device-libs-17). cmake/Hip.cmake finds clang++-17 and
#   /usr/lib/llvm-17/lib/clang/17/amdgcn/bitcode there.
#
# Idempotent and fast on a second run: packages are checked with dpkg-query, unpacked trees carry a .done marker.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS=${DEPS:-$ROOT/.deps}
if [ -z "${DISTRO:-}" ]; then
  . /etc/os-release
  case "$ID:$VERSION_ID" in ubuntu:24.04) DISTRO=ubuntu2404 ;; *) DISTRO=debian12 ;; esac
fi
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
log() { printf '[setup-hip] %s\n' "$*"; }

install_missing() {  # install_missing PKG...: apt-get install of the packages not yet installed
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then log "packages present: $*"; return; fi
  log "apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

if [ "$DISTRO" = ubuntu2404 ]; then
  install_missing hipcc libamdhip64-dev rocm-device-libs-17 clang-17 clang-tools-17 lld-17 llvm-17
  log "HIP toolchain: Ubuntu's ROCm packages (clang-17)"
  exit 0
fi

# ---- Debian 12 -----------------------------------------------------------------------------------------------------
install_missing clang-19 lld-19 llvm-19 clang-tools-19 dpkg-dev

# HIP headers from bookworm's libamdhip64-dev, unpacked (not installed).
if [ ! -f "$DEPS/hip/.done" ]; then
  log "unpacking bookworm's HIP headers (libamdhip64-dev) into .deps/hip"
  mkdir -p "$DEPS/dl-hip"
  (cd "$DEPS/dl-hip" && rm -f libamdhip64-dev_*.deb && apt-get download -qq -o APT::Sandbox::User=root libamdhip64-dev) \
    || { $SUDO apt-get update -qq && (cd "$DEPS/dl-hip" && apt-get download -qq -o APT::Sandbox::User=root libamdhip64-dev); }
  rm -rf "$DEPS/hip"; mkdir -p "$DEPS/hip"
  dpkg -x "$DEPS"/dl-hip/libamdhip64-dev_*.deb "$DEPS/hip"
  test -f "$DEPS/hip/usr/include/hip/hip_runtime.h"
  touch "$DEPS/hip/.done"
fi

# gfx942-capable device libraries from trixie's rocm-device-libs-17 (LLVM bitcode only).
if [ ! -f "$DEPS/rocm-device-libs/.done" ]; then
  log "unpacking trixie's rocm-device-libs-17 into .deps/rocm-device-libs"
  TX="$DEPS/trixie-apt"
  mkdir -p "$TX/etc" "$TX/lists/partial" "$DEPS/dl-hip"
  if [ ! -f "$TX/etc/trixie.sources" ]; then
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
    printf 'Types: deb deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$mirror" > "$TX/etc/trixie.sources"
  fi
  APT_TX=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$TX/etc" -o "Dir::State::Lists=$TX/lists"
          -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Sandbox::User=root)
  ls "$TX"/lists/*trixie*Packages* >/dev/null 2>&1 || apt-get "${APT_TX[@]}" update -qq
  (cd "$DEPS/dl-hip" && rm -f rocm-device-libs-17_*.deb && apt-get "${APT_TX[@]}" download -qq rocm-device-libs-17/trixie)
  rm -rf "$DEPS/rocm-device-libs"; mkdir -p "$DEPS/rocm-device-libs"
  dpkg -x "$DEPS"/dl-hip/rocm-device-libs-17_*.deb "$DEPS/rocm-device-libs"
  find "$DEPS/rocm-device-libs" -name oclc_isa_version_942.bc | grep -q . || { log "no gfx942 bitcode in rocm-device-libs-17"; exit 1; }
  touch "$DEPS/rocm-device-libs/.done"
fi
rm -rf "$DEPS/dl-hip"
log "HIP toolchain ready: clang++-19, headers in .deps/hip, device libraries in .deps/rocm-device-libs"
