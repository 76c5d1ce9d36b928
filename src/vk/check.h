// Vulkan result checking. Every Vulkan (and VMA) call whose VkResult matters goes through GRETA_VK_CHECK, which turns
// a failure into a one-line greta::Error naming the call, the VkResult and the place:
//   "vkAllocateMemory failed: VK_ERROR_OUT_OF_DEVICE_MEMORY at src/vk/memory.cpp:42"
// Positive results (VK_INCOMPLETE, VK_TIMEOUT, VK_NOT_READY, ...) are not failures: callers that can get them handle
// them explicitly.
#pragma once
#include <volk.h>

#include <string>

namespace greta::vk {

// "VK_ERROR_DEVICE_LOST" for a known result, "VkResult(-12345)" otherwise.
std::string result_name(VkResult result);

// `call_text` is the stringized call expression; the function name is taken from it ("fn.vkCreateBuffer(...)" ->
// "vkCreateBuffer").
[[noreturn]] void throw_vk_error(const char* call_text, VkResult result, const char* file, int line);

}  // namespace greta::vk

#define GRETA_VK_CHECK(call)                                                              \
  do {                                                                                    \
    const VkResult greta_vk_result_ = (call);                                             \
    if (greta_vk_result_ < 0) ::greta::vk::throw_vk_error(#call, greta_vk_result_, __FILE__, __LINE__); \
  } while (0)
