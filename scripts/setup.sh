#!/usr/bin/env bash
# GRETA setup: installs every build/test dependency, builds the project, and runs `greta-vk devices`.
#
#   bash scripts/setup.sh            # Debian 12 or Ubuntu 24.04, as root or with sudo
#
# Idempotent: a second run skips whatever is already in place (apt packages, the local prefix in .deps/).
# Debian 12's glslang (12) and Vulkan headers (1.3.239) predate VK_KHR_cooperative_matrix, so on Debian 12 we take
# those from Debian 13 (trixie) through apt's own options, with a private sources list and lists directory, never
# touching the system's apt sources:
#   - glslang 15.1: the source package, built into .deps/prefix (about a minute on 2 cores);
#   - Vulkan headers 1.4.309, volk, VulkanMemoryAllocator: header/source-only packages unpacked into .deps/trixie.
# Nothing from trixie that links against its newer glibc is installed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS="$ROOT/.deps"
BUILD_TYPE=${BUILD_TYPE:-Release}
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
log() { printf '[setup] %s\n' "$*"; }

. /etc/os-release
case "$ID:$VERSION_ID" in
  debian:12) DISTRO=debian12 ;;
  ubuntu:24.04) DISTRO=ubuntu2404 ;;
  *) log "warning: untested distribution $PRETTY_NAME; trying the Debian 12 path"; DISTRO=debian12 ;;
esac

# ---- 1. distribution packages -------------------------------------------------------------------------------------
COMMON_PKGS=(build-essential cmake ninja-build pkg-config git xz-utils ca-certificates python3
  libvulkan1 mesa-vulkan-drivers vulkan-validationlayers vulkan-tools spirv-tools
  doctest-dev libpcre2-dev liblzma-dev clang
  libcpp-httplib-dev nlohmann-json3-dev libedit-dev curl)
if [ "$DISTRO" = ubuntu2404 ]; then
  PKGS=("${COMMON_PKGS[@]}" libvulkan-dev glslang-tools libvulkan-volk-dev libvulkan-memory-allocator-dev)
else
  PKGS=("${COMMON_PKGS[@]}" dpkg-dev)
fi
# Node.js runs the server tests' OpenAI SDK client; a machine that already has node and npm (from any source) keeps them.
command -v npm >/dev/null 2>&1 || PKGS+=(nodejs npm)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "distribution packages present"
fi

# ---- 2. Debian 12: newer Vulkan headers, volk, VMA, glslang from trixie -------------------------------------------
if [ "$DISTRO" = debian12 ]; then
  TX="$DEPS/trixie-apt"
  mkdir -p "$TX/etc" "$TX/lists/partial" "$DEPS/dl"
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
  printf 'Types: deb deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" > "$TX/etc/trixie.sources"
  APT_TX=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$TX/etc" -o "Dir::State::Lists=$TX/lists"
          -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Sandbox::User=root)
  if [ ! -f "$DEPS/trixie/.done" ]; then
    log "fetching Vulkan headers, volk, VMA from trixie"
    apt-get "${APT_TX[@]}" update -qq
    (cd "$DEPS/dl" && apt-get "${APT_TX[@]}" download -qq libvulkan-dev/trixie libvulkan-volk-dev/trixie \
        libvulkan-memory-allocator-dev/trixie)
    rm -rf "$DEPS/trixie"; mkdir -p "$DEPS/trixie"
    for f in "$DEPS"/dl/*.deb; do dpkg -x "$f" "$DEPS/trixie"; done
    # Only headers, CMake package files and volk's source are used: drop trixie-built binaries.
    find "$DEPS/trixie" \( -name '*.so*' -o -name '*.a' \) -delete
    touch "$DEPS/trixie/.done"
  fi
  if [ ! -x "$DEPS/prefix/bin/glslang" ]; then
    log "building glslang 15 from trixie's source package into .deps/prefix"
    [ -f "$TX/lists/lock" ] || apt-get "${APT_TX[@]}" update -qq
    rm -rf "$DEPS/glslang-src"; mkdir -p "$DEPS/glslang-src"
    (cd "$DEPS/glslang-src" && apt-get "${APT_TX[@]}" source --download-only -qq glslang/trixie >/dev/null \
      && tar xzf glslang_*.orig.tar.gz)
    src=$(ls -d "$DEPS"/glslang-src/glslang-*/ | head -1)
    cmake -S "$src" -B "$DEPS/glslang-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$DEPS/prefix" -DENABLE_OPT=OFF -DGLSLANG_TESTS=OFF -DENABLE_HLSL=OFF \
      -DBUILD_EXTERNAL=OFF -DBUILD_SHARED_LIBS=OFF >/dev/null
    cmake --build "$DEPS/glslang-build" --target install -j"$(nproc)" >/dev/null
    rm -rf "$DEPS/glslang-build" "$DEPS/glslang-src"
  fi
fi

# ---- 3. HIP toolchain (clang-19 + ROCm device libraries) for the HIP plugin ---------------------------------------
if [ -f "$ROOT/scripts/setup_hip.sh" ] && [ -z "${GRETA_NO_HIP:-}" ]; then
  DEPS="$DEPS" DISTRO="$DISTRO" bash "$ROOT/scripts/setup_hip.sh"
fi

# ---- 3b. the server tests' Node packages (OpenAI's SDK, pinned in tests/server/package-lock.json) -------------------
# npm ci only when the lock file changed since the last install (a copy of it is kept in node_modules).
NODE_DIR="$ROOT/tests/server"
if ! cmp -s "$NODE_DIR/package-lock.json" "$NODE_DIR/node_modules/.greta-installed-lock.json" 2>/dev/null; then
  log "npm ci --prefix tests/server (the openai SDK for the server tests)"
  npm ci --prefix "$NODE_DIR" --no-audit --no-fund --loglevel=error >/dev/null
  cp "$NODE_DIR/package-lock.json" "$NODE_DIR/node_modules/.greta-installed-lock.json"
else
  log "server test Node packages present"
fi

# ---- 4. configure, build, run -------------------------------------------------------------------------------------
log "configuring and building ($BUILD_TYPE) in build/"
cmake -S "$ROOT" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" >/dev/null
cmake --build "$ROOT/build" -j"$(nproc)"
log "build done: $ROOT/build/greta-vk"
"$ROOT/build/greta-vk" --version
"$ROOT/build/greta-vk" devices
