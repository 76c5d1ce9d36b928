// Placeholder replaced by the Vulkan runtime.
