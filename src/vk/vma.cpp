// The one translation unit that compiles VMA's implementation. VMA loads its Vulkan entry points itself through the
// vkGetInstanceProcAddr / vkGetDeviceProcAddr we hand it (VMA_STATIC_VULKAN_FUNCTIONS 0 and
// VMA_DYNAMIC_VULKAN_FUNCTIONS 1 are set for the whole greta_vk target in src/vk/CMakeLists.txt).
#include <volk.h>

#define VMA_IMPLEMENTATION
#include <vk_mem_alloc.h>
