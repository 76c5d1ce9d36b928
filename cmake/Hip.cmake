# The HIP plugin's toolchain (docs/hip.md). Included by src/hip/CMakeLists.txt when GRETA_HIP is ON.
#
# The plugin (libgreta_hip.so) is compiled by a HIP-capable clang through custom commands, not CMake's HIP language:
# that needs ROCm's hip-lang CMake package and runtime, which the build machines do not have. What is looked for
# (scripts/setup_hip.sh installs it; every path can be given on the command line):
#   GRETA_HIP_CLANG        clang++ that compiles HIP for every arch in GRETA_HIP_ARCHS (clang++-19 on Debian 12)
#   GRETA_HIP_INCLUDE_DIR  the HIP headers (hip/hip_runtime.h): .deps/hip/usr/include, /opt/rocm/include, /usr/include
#   GRETA_HIP_DEVICE_LIBS  ROCm device-library bitcode (ocml.bc, oclc_isa_version_942.bc, ...)
#   GRETA_HIP_BUNDLER, GRETA_HIP_OBJDUMP   clang-offload-bundler, llvm-objdump of the same LLVM (disassembly check)
# A configure-time probe compiles one matrix-core kernel for every arch; anything missing or failing skips the plugin
# with a STATUS line (GRETA_HIP_FOUND stays OFF) and the rest of the build is unaffected.
#
# Results: GRETA_HIP_FOUND, GRETA_HIP_AMD_FLAGS (compile flags), greta_gpu_objects() (custom compile commands).
# GRETA_HIP_CUDA=ON additionally looks for nvcc (GRETA_NVCC) and sets GRETA_HIP_CUDA_FOUND.

set(GRETA_HIP_ARCHS "gfx942;gfx90a;gfx1100;gfx1103" CACHE STRING
    "AMD offload architectures of the HIP plugin (MFMA: gfx90a gfx942; WMMA: gfx1100-gfx1103)")
set(GRETA_HIP_CUDA_ARCHS "90" CACHE STRING "NVIDIA compute capabilities of the nvcc build (GRETA_HIP_CUDA)")
set(GRETA_NVCC "/usr/local/cuda/bin/nvcc" CACHE FILEPATH "nvcc for GRETA_HIP_CUDA")

set(GRETA_HIP_FOUND OFF)
set(GRETA_HIP_CUDA_FOUND OFF)

function(_greta_hip_skip why)
  message(STATUS "HIP plugin: skipped (${why})")
endfunction()

# ---- AMD: clang + HIP headers + device libraries ------------------------------------------------------------------
macro(_greta_hip_find_amd)
  find_program(GRETA_HIP_CLANG NAMES clang++-19 clang++-18 clang++-17
               HINTS /usr/lib/llvm-19/bin /usr/lib/llvm-18/bin /usr/lib/llvm-17/bin /opt/rocm/llvm/bin)
  find_path(GRETA_HIP_INCLUDE_DIR hip/hip_runtime.h
            HINTS "${GRETA_DEPS_DIR}/hip/usr/include" PATHS /opt/rocm/include /usr/include NO_DEFAULT_PATH)
  set(_hip_ok ON)
  if(NOT GRETA_HIP_CLANG)
    _greta_hip_skip("no clang++-19/18/17; run scripts/setup_hip.sh")
    set(_hip_ok OFF)
  elseif(NOT GRETA_HIP_INCLUDE_DIR)
    _greta_hip_skip("no HIP headers (hip/hip_runtime.h); run scripts/setup_hip.sh")
    set(_hip_ok OFF)
  endif()
  if(_hip_ok)
    get_filename_component(_llvm_bin "${GRETA_HIP_CLANG}" REALPATH)
    get_filename_component(_llvm_bin "${_llvm_bin}" DIRECTORY)
    find_program(GRETA_HIP_BUNDLER clang-offload-bundler HINTS "${_llvm_bin}" NO_DEFAULT_PATH)
    find_program(GRETA_HIP_OBJDUMP llvm-objdump HINTS "${_llvm_bin}" NO_DEFAULT_PATH)
    # Device libraries: the first directory holding the ISA bitcode of every requested arch.
    set(_isa_files "")
    foreach(arch IN LISTS GRETA_HIP_ARCHS)
      string(REGEX REPLACE "^gfx([0-9a-f]+).*$" "oclc_isa_version_\\1.bc" _f "${arch}")
      list(APPEND _isa_files "${_f}")
    endforeach()
    if(NOT GRETA_HIP_DEVICE_LIBS)
      file(GLOB _bc_dirs LIST_DIRECTORIES true
           "${GRETA_DEPS_DIR}/rocm-device-libs/usr/lib/llvm-*/lib/clang/*/amdgcn/bitcode"
           "/usr/lib/llvm-*/lib/clang/*/amdgcn/bitcode" "/opt/rocm/amdgcn/bitcode"
           "/opt/rocm/lib/llvm/lib/clang/*/lib/amdgcn/bitcode" "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode")
      foreach(dir IN LISTS _bc_dirs)
        set(_all ON)
        foreach(f IN LISTS _isa_files)
          if(NOT EXISTS "${dir}/${f}")
            set(_all OFF)
          endif()
        endforeach()
        if(_all AND EXISTS "${dir}/ocml.bc")
          set(GRETA_HIP_DEVICE_LIBS "${dir}" CACHE PATH "ROCm device-library bitcode directory" FORCE)
          break()
        endif()
      endforeach()
    endif()
    if(NOT GRETA_HIP_BUNDLER OR NOT GRETA_HIP_OBJDUMP)
      _greta_hip_skip("no clang-offload-bundler/llvm-objdump beside ${GRETA_HIP_CLANG}")
      set(_hip_ok OFF)
    elseif(NOT GRETA_HIP_DEVICE_LIBS)
      _greta_hip_skip("no ROCm device libraries with ${_isa_files}; run scripts/setup_hip.sh")
      set(_hip_ok OFF)
    endif()
  endif()
  if(_hip_ok)
    list(JOIN GRETA_HIP_ARCHS "," _arch_csv)
    set(GRETA_HIP_AMD_FLAGS -x hip -std=c++20 -O3 -fPIC -fvisibility=hidden -Wall -Wextra -Wno-unused-parameter
        -nogpuinc -isystem "${GRETA_HIP_INCLUDE_DIR}" "--rocm-device-lib-path=${GRETA_HIP_DEVICE_LIBS}"
        "-I${CMAKE_SOURCE_DIR}/src" "-DGRETA_HIP_ARCH_LIST=\"${_arch_csv}\"")
    foreach(arch IN LISTS GRETA_HIP_ARCHS)
      list(APPEND GRETA_HIP_AMD_FLAGS "--offload-arch=${arch}")
    endforeach()
    # Probe: the toolchain must compile a matrix-core tile (the builtins of every arch) with these exact flags.
    set(_probe_dir "${CMAKE_BINARY_DIR}/hip_probe")
    file(MAKE_DIRECTORY "${_probe_dir}")
    file(WRITE "${_probe_dir}/probe.hip"
         "#include \"hip/mma_layout.h\"\n"
         "__global__ void greta_probe(const greta::hip::half_t* a, float* c) {\n"
         "#if defined(GRETA_HAVE_MMA)\n  greta::hip::mma_16x16x16(a, a, c);\n#endif\n}\n")
    execute_process(COMMAND ${GRETA_HIP_CLANG} ${GRETA_HIP_AMD_FLAGS} -c "${_probe_dir}/probe.hip"
                            -o "${_probe_dir}/probe.o"
                    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
    if(NOT _rc EQUAL 0)
      string(REGEX MATCH "[^\n]*error[^\n]*" _first "${_out}")
      _greta_hip_skip("${GRETA_HIP_CLANG} cannot compile for ${GRETA_HIP_ARCHS}: ${_first}")
    else()
      set(GRETA_HIP_FOUND ON)
      message(STATUS "HIP plugin: ${GRETA_HIP_CLANG} for ${GRETA_HIP_ARCHS}; headers ${GRETA_HIP_INCLUDE_DIR}; "
                     "device libraries ${GRETA_HIP_DEVICE_LIBS}")
    endif()
  endif()
endmacro()

if(GRETA_SANITIZE OR GRETA_FUZZ)
  _greta_hip_skip("sanitizer/fuzz build: the plugin's device code is not instrumented; the CPU layout tests still run")
else()
  _greta_hip_find_amd()
endif()

# ---- NVIDIA: nvcc (optional, GRETA_HIP_CUDA) ----------------------------------------------------------------------
if(GRETA_HIP_CUDA)
  if(GRETA_SANITIZE OR GRETA_FUZZ)
    message(STATUS "HIP plugin (nvcc): skipped in sanitizer/fuzz builds")
  elseif(NOT EXISTS "${GRETA_NVCC}")
    message(STATUS "HIP plugin (nvcc): skipped (no nvcc at ${GRETA_NVCC})")
  else()
    get_filename_component(_cuda_root "${GRETA_NVCC}" DIRECTORY)
    get_filename_component(_cuda_root "${_cuda_root}" DIRECTORY)
    find_library(GRETA_CUDART_STATIC cudart_static HINTS "${_cuda_root}/lib64" "${_cuda_root}/lib" NO_DEFAULT_PATH)
    if(NOT GRETA_CUDART_STATIC)
      message(STATUS "HIP plugin (nvcc): skipped (no libcudart_static.a under ${_cuda_root})")
    else()
      set(_sm "")
      foreach(cc IN LISTS GRETA_HIP_CUDA_ARCHS)
        list(APPEND _sm "sm_${cc}")
      endforeach()
      list(JOIN _sm "," _sm_csv)
      set(GRETA_HIP_CUDA_FLAGS -x cu -std=c++20 -O3 --expt-relaxed-constexpr -Xcompiler=-fPIC,-fvisibility=hidden
          "-I${CMAKE_SOURCE_DIR}/src" "-DGRETA_HIP_ARCH_LIST=\"${_sm_csv}\"" -ccbin "${CMAKE_CXX_COMPILER}")
      foreach(cc IN LISTS GRETA_HIP_CUDA_ARCHS)
        list(APPEND GRETA_HIP_CUDA_FLAGS "-gencode=arch=compute_${cc},code=sm_${cc}")
      endforeach()
      set(GRETA_HIP_CUDA_FOUND ON)
      message(STATUS "HIP plugin (nvcc): ${GRETA_NVCC} for ${_sm_csv}")
    endif()
  endif()
endif()

# greta_gpu_objects(OUT_VAR SUBDIR COMPILER "FLAGS" SOURCES...): one custom command per source, producing
# ${CMAKE_CURRENT_BINARY_DIR}/SUBDIR/NAME.o with a depfile (header changes rebuild what includes them).
function(greta_gpu_objects out subdir compiler flags)
  set(objs "")
  foreach(src IN LISTS ARGN)
    get_filename_component(name "${src}" NAME_WE)
    get_filename_component(abs "${src}" ABSOLUTE)
    set(obj "${CMAKE_CURRENT_BINARY_DIR}/${subdir}/${name}.o")
    add_custom_command(
      OUTPUT "${obj}"
      COMMAND "${CMAKE_COMMAND}" -E make_directory "${CMAKE_CURRENT_BINARY_DIR}/${subdir}"
      COMMAND "${compiler}" ${flags} -MD -MF "${obj}.d" -c "${abs}" -o "${obj}"
      DEPFILE "${obj}.d"
      DEPENDS "${abs}"
      COMMENT "Compiling ${subdir} ${name}"
      COMMAND_EXPAND_LISTS VERBATIM)
    set_source_files_properties("${obj}" PROPERTIES EXTERNAL_OBJECT ON GENERATED ON)
    list(APPEND objs "${obj}")
  endforeach()
  set(${out} "${objs}" PARENT_SCOPE)
endfunction()
