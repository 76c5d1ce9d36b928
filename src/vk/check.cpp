#include "vk/check.h"

#include <cctype>
#include <cstring>
#include <string>

#include "core/error.h"

namespace greta::vk {

std::string result_name(VkResult result) {
  switch (result) {
#define GRETA_VK_RESULT_CASE(name) \
  case name:                       \
    return #name;
    GRETA_VK_RESULT_CASE(VK_SUCCESS)
    GRETA_VK_RESULT_CASE(VK_NOT_READY)
    GRETA_VK_RESULT_CASE(VK_TIMEOUT)
    GRETA_VK_RESULT_CASE(VK_EVENT_SET)
    GRETA_VK_RESULT_CASE(VK_EVENT_RESET)
    GRETA_VK_RESULT_CASE(VK_INCOMPLETE)
    GRETA_VK_RESULT_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    GRETA_VK_RESULT_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    GRETA_VK_RESULT_CASE(VK_ERROR_INITIALIZATION_FAILED)
    GRETA_VK_RESULT_CASE(VK_ERROR_DEVICE_LOST)
    GRETA_VK_RESULT_CASE(VK_ERROR_MEMORY_MAP_FAILED)
    GRETA_VK_RESULT_CASE(VK_ERROR_LAYER_NOT_PRESENT)
    GRETA_VK_RESULT_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    GRETA_VK_RESULT_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    GRETA_VK_RESULT_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    GRETA_VK_RESULT_CASE(VK_ERROR_TOO_MANY_OBJECTS)
    GRETA_VK_RESULT_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
    GRETA_VK_RESULT_CASE(VK_ERROR_FRAGMENTED_POOL)
    GRETA_VK_RESULT_CASE(VK_ERROR_UNKNOWN)
    GRETA_VK_RESULT_CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
    GRETA_VK_RESULT_CASE(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    GRETA_VK_RESULT_CASE(VK_ERROR_FRAGMENTATION)
    GRETA_VK_RESULT_CASE(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
    GRETA_VK_RESULT_CASE(VK_PIPELINE_COMPILE_REQUIRED)
    GRETA_VK_RESULT_CASE(VK_ERROR_SURFACE_LOST_KHR)
    GRETA_VK_RESULT_CASE(VK_ERROR_NATIVE_WINDOW_IN_USE_KHR)
    GRETA_VK_RESULT_CASE(VK_SUBOPTIMAL_KHR)
    GRETA_VK_RESULT_CASE(VK_ERROR_OUT_OF_DATE_KHR)
    GRETA_VK_RESULT_CASE(VK_ERROR_INCOMPATIBLE_DISPLAY_KHR)
    GRETA_VK_RESULT_CASE(VK_ERROR_VALIDATION_FAILED_EXT)
    GRETA_VK_RESULT_CASE(VK_ERROR_INVALID_SHADER_NV)
    GRETA_VK_RESULT_CASE(VK_ERROR_INVALID_DRM_FORMAT_MODIFIER_PLANE_LAYOUT_EXT)
    GRETA_VK_RESULT_CASE(VK_ERROR_NOT_PERMITTED_KHR)
    GRETA_VK_RESULT_CASE(VK_THREAD_IDLE_KHR)
    GRETA_VK_RESULT_CASE(VK_THREAD_DONE_KHR)
    GRETA_VK_RESULT_CASE(VK_OPERATION_DEFERRED_KHR)
    GRETA_VK_RESULT_CASE(VK_OPERATION_NOT_DEFERRED_KHR)
    GRETA_VK_RESULT_CASE(VK_ERROR_COMPRESSION_EXHAUSTED_EXT)
#undef GRETA_VK_RESULT_CASE
    default:
      return cat("VkResult(", int(result), ")");
  }
}

namespace {

// The called function's name from the stringized call: the identifier right before the first '('.
std::string called_function(const char* call_text) {
  const char* paren = std::strchr(call_text, '(');
  if (!paren) return call_text;
  const char* end = paren;
  while (end > call_text && std::isspace(static_cast<unsigned char>(end[-1]))) --end;
  const char* begin = end;
  while (begin > call_text && (std::isalnum(static_cast<unsigned char>(begin[-1])) || begin[-1] == '_')) --begin;
  return begin == end ? std::string(call_text, paren) : std::string(begin, end);
}

}  // namespace

void throw_vk_error(const char* call_text, VkResult result, const char* file, int line) {
  fail(called_function(call_text), " failed: ", result_name(result), " at ", file, ":", line);
}

}  // namespace greta::vk
