# GLSL compute shaders -> SPIR-V at build time -> embedded in the binary -> looked up by a generated typed ID.
#
#   greta_add_shader(NAME SOURCE [DEFINES D1=V ...] [REQUIRES coopmat|intdot])
#
# Each call makes one variant: shaders/SOURCE compiled with the given #defines (types and extensions only; tile and
# workgroup sizes are specialization constants chosen at pipeline creation). All variants end up in
#   build/generated/vk/shader_ids.h      enum class ShaderId { NAME, ... };
#   build/generated/vk/shader_blobs.cpp  each variant's .spv, included whole by the assembler (.incbin)
# A variant whose REQUIRES the toolchain lacks (e.g. glslang without GL_KHR_cooperative_matrix) still gets its ID,
# with an empty blob, so host code compiles everywhere and asks shader_available(id) at run time.

set(GRETA_SHADER_DIR "${CMAKE_SOURCE_DIR}/shaders")
set(GRETA_SHADER_OUT "${CMAKE_BINARY_DIR}/shaders")
set(GRETA_GENERATED_DIR "${CMAKE_BINARY_DIR}/generated")
set(GRETA_SPIRV_ENV vulkan1.2)
file(MAKE_DIRECTORY "${GRETA_SHADER_OUT}" "${GRETA_GENERATED_DIR}/vk")
# Shared GLSL includes (*.glsl): every variant is rebuilt when one changes.
file(GLOB GRETA_SHADER_COMMON_HEADERS CONFIGURE_DEPENDS "${GRETA_SHADER_DIR}/*.glsl")

# --- configure-time probe: can glslang compile GL_KHR_cooperative_matrix, and does spirv-val know it? -------------
set(_probe_src "${CMAKE_SOURCE_DIR}/cmake/probe_coopmat.comp")
set(_probe_spv "${CMAKE_BINARY_DIR}/probe_coopmat.spv")
execute_process(COMMAND "${GRETA_GLSLANG}" -V --target-env ${GRETA_SPIRV_ENV} -o "${_probe_spv}" "${_probe_src}"
                RESULT_VARIABLE _probe_rc OUTPUT_QUIET ERROR_QUIET)
if(_probe_rc EQUAL 0)
  set(GRETA_HAVE_COOPMAT_SHADERS ON)
  set(GRETA_SPIRV_VAL_KNOWS_COOPMAT OFF)
  if(GRETA_SPIRV_VAL)
    execute_process(COMMAND "${GRETA_SPIRV_VAL}" --target-env ${GRETA_SPIRV_ENV} "${_probe_spv}"
                    RESULT_VARIABLE _val_rc OUTPUT_QUIET ERROR_QUIET)
    if(_val_rc EQUAL 0)
      set(GRETA_SPIRV_VAL_KNOWS_COOPMAT ON)
    endif()
  endif()
else()
  set(GRETA_HAVE_COOPMAT_SHADERS OFF)
endif()
message(STATUS "cooperative-matrix shaders: ${GRETA_HAVE_COOPMAT_SHADERS} (spirv-val validates them: ${GRETA_SPIRV_VAL_KNOWS_COOPMAT})")

# --- configure-time probe: GL_EXT_integer_dot_product (the int8 decode matvecs, REQUIRES intdot) ------------------
execute_process(COMMAND "${GRETA_GLSLANG}" -V --target-env ${GRETA_SPIRV_ENV} -o "${CMAKE_BINARY_DIR}/probe_intdot.spv"
                        "${CMAKE_SOURCE_DIR}/cmake/probe_intdot.comp"
                RESULT_VARIABLE _intdot_rc OUTPUT_QUIET ERROR_QUIET)
if(_intdot_rc EQUAL 0)
  set(GRETA_HAVE_INTDOT_SHADERS ON)
else()
  set(GRETA_HAVE_INTDOT_SHADERS OFF)
endif()
message(STATUS "integer-dot-product shaders: ${GRETA_HAVE_INTDOT_SHADERS}")

set_property(GLOBAL PROPERTY GRETA_SHADER_NAMES "")
set_property(GLOBAL PROPERTY GRETA_SHADER_SPVS "")

function(greta_add_shader name source)
  cmake_parse_arguments(S "" "" "DEFINES;REQUIRES" ${ARGN})
  set(spv "${GRETA_SHADER_OUT}/${name}.spv")
  set(enabled ON)
  set(validate ${GRETA_SPIRV_VAL})
  if("coopmat" IN_LIST S_REQUIRES)
    if(NOT GRETA_HAVE_COOPMAT_SHADERS)
      set(enabled OFF)
    elseif(NOT GRETA_SPIRV_VAL_KNOWS_COOPMAT)
      set(validate "")
    endif()
  endif()
  if("intdot" IN_LIST S_REQUIRES AND NOT GRETA_HAVE_INTDOT_SHADERS)
    set(enabled OFF)
  endif()
  set_property(GLOBAL APPEND PROPERTY GRETA_SHADER_NAMES "${name}")
  if(NOT enabled)
    set_property(GLOBAL APPEND PROPERTY GRETA_SHADER_SPVS "-")
    return()
  endif()
  set(defs "")
  foreach(d IN LISTS S_DEFINES)
    list(APPEND defs "-D${d}")
  endforeach()
  set(val_cmd "")
  if(validate)
    set(val_cmd COMMAND "${validate}" --target-env ${GRETA_SPIRV_ENV} "${spv}")
  endif()
  add_custom_command(
    OUTPUT "${spv}"
    COMMAND "${GRETA_GLSLANG}" -V --quiet --target-env ${GRETA_SPIRV_ENV} -I${GRETA_SHADER_DIR} ${defs}
            -o "${spv}" "${GRETA_SHADER_DIR}/${source}"
    ${val_cmd}
    DEPENDS "${GRETA_SHADER_DIR}/${source}" ${GRETA_SHADER_COMMON_HEADERS}
    COMMENT "GLSL -> SPIR-V ${name}"
    VERBATIM)
  set_property(GLOBAL APPEND PROPERTY GRETA_SHADER_SPVS "${spv}")
endfunction()

# Called once after every greta_add_shader: writes the typed ID header and the blob table.
function(greta_generate_shader_table target)
  get_property(names GLOBAL PROPERTY GRETA_SHADER_NAMES)
  get_property(spvs GLOBAL PROPERTY GRETA_SHADER_SPVS)
  set(hdr "${GRETA_GENERATED_DIR}/vk/shader_ids.h")
  set(cpp "${GRETA_GENERATED_DIR}/vk/shader_blobs.cpp")
  set(real_spvs ${spvs})
  list(REMOVE_ITEM real_spvs "-")
  add_custom_command(
    OUTPUT "${hdr}" "${cpp}"
    COMMAND ${CMAKE_COMMAND} "-DNAMES=${names}" "-DSPVS=${spvs}" "-DHEADER=${hdr}" "-DSOURCE=${cpp}"
            -P "${CMAKE_SOURCE_DIR}/cmake/EmbedSpirv.cmake"
    DEPENDS ${real_spvs} "${CMAKE_SOURCE_DIR}/cmake/EmbedSpirv.cmake"
    COMMENT "Embedding SPIR-V (${CMAKE_CURRENT_LIST_FILE})"
    VERBATIM)
  add_library(${target} STATIC "${cpp}")
  # The source names the .spv files (the assembler includes them), so their contents are the object's inputs.
  set_source_files_properties("${cpp}" PROPERTIES OBJECT_DEPENDS "${real_spvs}")
  target_include_directories(${target} PUBLIC "${GRETA_GENERATED_DIR}")
endfunction()
