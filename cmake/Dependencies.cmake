# Finds GRETA's dependencies. scripts/setup.sh installs them; on Debian 12 the ones too old in bookworm come from
# trixie into ${GRETA_DEPS_DIR} (headers unpacked into .deps/trixie, glslang built into .deps/prefix).

# --- Vulkan headers (>= 1.3.255 for VK_KHR_cooperative_matrix) + volk (function loading) + VMA (device memory) ----
# We never link the Vulkan loader: volk opens libvulkan.so.1 at run time, so a machine without Vulkan still runs
# the CPU backend and `greta-vk devices` can say "no Vulkan loader" instead of failing to start.
set(_greta_vk_hint "${GRETA_DEPS_DIR}/trixie/usr/include")
find_path(GRETA_VULKAN_INCLUDE_DIR vulkan/vulkan_core.h HINTS ${_greta_vk_hint} NO_CMAKE_SYSTEM_PATH)
if(NOT GRETA_VULKAN_INCLUDE_DIR)
  find_path(GRETA_VULKAN_INCLUDE_DIR vulkan/vulkan_core.h REQUIRED)
endif()
file(STRINGS "${GRETA_VULKAN_INCLUDE_DIR}/vulkan/vulkan_core.h" _vk_hv REGEX "^#define VK_HEADER_VERSION [0-9]+")
string(REGEX MATCH "[0-9]+$" GRETA_VK_HEADER_VERSION "${_vk_hv}")
if(GRETA_VK_HEADER_VERSION LESS 255)
  message(FATAL_ERROR "Vulkan headers 1.3.${GRETA_VK_HEADER_VERSION} in ${GRETA_VULKAN_INCLUDE_DIR} predate "
                      "VK_KHR_cooperative_matrix (need >= 1.3.255); run scripts/setup.sh")
endif()
find_path(GRETA_VOLK_DIR volk.c HINTS ${_greta_vk_hint} PATHS /usr/include /usr/local/include NO_DEFAULT_PATH)
find_path(GRETA_VMA_INCLUDE_DIR vk_mem_alloc.h HINTS ${_greta_vk_hint} PATH_SUFFIXES "" vma)
if(NOT GRETA_VOLK_DIR OR NOT GRETA_VMA_INCLUDE_DIR)
  message(FATAL_ERROR "volk (volk.c) or VulkanMemoryAllocator (vk_mem_alloc.h) not found; run scripts/setup.sh")
endif()
message(STATUS "Vulkan headers 1.x.${GRETA_VK_HEADER_VERSION}: ${GRETA_VULKAN_INCLUDE_DIR}; volk: ${GRETA_VOLK_DIR}; VMA: ${GRETA_VMA_INCLUDE_DIR}")

# volk is compiled from its single source file with our headers (no prebuilt binary from another distribution).
add_library(greta_volk STATIC "${GRETA_VOLK_DIR}/volk.c")
target_include_directories(greta_volk SYSTEM PUBLIC "${GRETA_VULKAN_INCLUDE_DIR}" "${GRETA_VOLK_DIR}")
target_compile_definitions(greta_volk PUBLIC VK_NO_PROTOTYPES)
target_link_libraries(greta_volk PUBLIC ${CMAKE_DL_LIBS})
set_target_properties(greta_volk PROPERTIES POSITION_INDEPENDENT_CODE ON)

add_library(greta_vma INTERFACE)
target_include_directories(greta_vma SYSTEM INTERFACE "${GRETA_VMA_INCLUDE_DIR}")

# --- glslang (GLSL -> SPIR-V at build time) and spirv-val -----------------------------------------------------------
find_program(GRETA_GLSLANG NAMES glslang glslangValidator HINTS "${GRETA_DEPS_DIR}/prefix/bin" NO_CMAKE_SYSTEM_PATH)
if(NOT GRETA_GLSLANG)
  find_program(GRETA_GLSLANG NAMES glslang glslangValidator REQUIRED)
endif()
find_program(GRETA_SPIRV_VAL spirv-val)
message(STATUS "glslang: ${GRETA_GLSLANG}; spirv-val: ${GRETA_SPIRV_VAL}")

# --- doctest (tests) and PCRE2 (Unicode-aware pre-tokenizer regexes) ------------------------------------------------
find_path(GRETA_DOCTEST_INCLUDE_DIR doctest/doctest.h REQUIRED)
add_library(greta_doctest INTERFACE)
target_include_directories(greta_doctest SYSTEM INTERFACE "${GRETA_DOCTEST_INCLUDE_DIR}")

find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)

find_package(Threads REQUIRED)

# --- cpp-httplib (the server's HTTP/1.1: threads, keep-alive, chunked streaming) and nlohmann-json (every JSON the
# server and the CLI read or write). Debian builds cpp-httplib as a shared library with OpenSSL/zlib/brotli on: its
# pkg-config flags carry those defines, which must match the library's for the classes to have the same layout.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
find_package(nlohmann_json 3.10 REQUIRED)

# --- libedit (BSD editline): line editing and history for `greta-vk chat` on a terminal. BSD-licensed, in every
# distribution, with a readline-compatible API; GNU readline's GPL would bind the binary.
pkg_check_modules(LIBEDIT REQUIRED IMPORTED_TARGET libedit)
