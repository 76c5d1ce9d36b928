#include "vk/instance.h"

#include <dlfcn.h>
#if defined(__SANITIZE_ADDRESS__)
#include <link.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "vk/check.h"
#include "vk/handles.h"

namespace greta::vk {

namespace {

constexpr const char* k_validation_layer = "VK_LAYER_KHRONOS_validation";

// Opens the loader and points volk's global entry points at it.
void load_vulkan_loader(const std::string& path) {
  if (path.empty()) {
    // volk tries libvulkan.so.1, then libvulkan.so. Calling it again is cheap (dlopen refcounts).
    if (volkInitialize() != VK_SUCCESS) fail("no Vulkan loader (libvulkan.so.1) found");
    return;
  }
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) fail("no Vulkan loader (", path, ") found");
  auto get_instance_proc_addr =
      reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(library, "vkGetInstanceProcAddr"));
  if (!get_instance_proc_addr) {
    dlclose(library);
    fail("no Vulkan loader (", path, ") found: the library has no vkGetInstanceProcAddr");
  }
  // Deliberately never closed: volk's process-wide entry points now point into this library.
  volkInitializeCustom(get_instance_proc_addr);
}

// Which validation to enable: "1"/"true"/anything -> core validation; "sync" -> also synchronization validation.
enum class ValidationMode { off, core, sync };

ValidationMode env_validation_mode() {
  const char* v = std::getenv("GRETA_VK_VALIDATION");
  if (!v || !*v || std::strcmp(v, "0") == 0) return ValidationMode::off;
  return std::strcmp(v, "sync") == 0 ? ValidationMode::sync : ValidationMode::core;
}

std::vector<VkLayerProperties> instance_layers() {
  uint32_t count = 0;
  GRETA_VK_CHECK(vkEnumerateInstanceLayerProperties(&count, nullptr));
  std::vector<VkLayerProperties> layers(count);
  GRETA_VK_CHECK(vkEnumerateInstanceLayerProperties(&count, layers.data()));
  layers.resize(count);
  return layers;
}

std::vector<VkExtensionProperties> instance_extensions(const char* layer) {
  uint32_t count = 0;
  GRETA_VK_CHECK(vkEnumerateInstanceExtensionProperties(layer, &count, nullptr));
  std::vector<VkExtensionProperties> exts(count);
  GRETA_VK_CHECK(vkEnumerateInstanceExtensionProperties(layer, &count, exts.data()));
  exts.resize(count);
  return exts;
}

bool has_extension(const std::vector<VkExtensionProperties>& exts, const char* name) {
  return std::any_of(exts.begin(), exts.end(),
                     [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

VKAPI_ATTR VkBool32 VKAPI_CALL on_debug_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                VkDebugUtilsMessageTypeFlagsEXT types,
                                                const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  auto* log = static_cast<ValidationLog*>(user);
  try {
    std::string message = (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) ? "validation error" : "validation warning";
    if (types & VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT) message += " (performance)";
    message += ": ";
    if (data && data->pMessage) message += data->pMessage;
    log->record(std::move(message));
  } catch (...) {
    // Never let an exception cross into the driver; an out-of-memory here loses one message.
  }
  return VK_FALSE;  // never abort the call that triggered the message
}

VkDebugUtilsMessengerCreateInfoEXT messenger_info(ValidationLog* log) {
  auto info = vk_struct<VkDebugUtilsMessengerCreateInfoEXT>(VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT);
  info.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  info.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  info.pfnUserCallback = on_debug_message;
  info.pUserData = log;
  return info;
}

}  // namespace

bool validation_requested_by_env() { return env_validation_mode() != ValidationMode::off; }

void ValidationLog::record(std::string message) {
  if (echo) std::fprintf(stderr, "greta: %s\n", message.c_str());
  std::lock_guard<std::mutex> lock(mutex_);
  messages_.push_back(std::move(message));
}

std::vector<std::string> ValidationLog::messages() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return messages_;
}

size_t ValidationLog::count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return messages_.size();
}

void ValidationLog::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  messages_.clear();
}

Instance::Instance(const InstanceOptions& options) {
  load_vulkan_loader(options.loader_path);
  log_->echo = options.echo_validation_messages;

  const uint32_t loader_version = volkGetInstanceVersion();
  if (loader_version < VK_API_VERSION_1_1)
    fail("the Vulkan loader supports only Vulkan ", version_string(loader_version), "; GRETA needs 1.1 or newer");
  // Ask for at most 1.3: everything GRETA uses is in 1.3 or an extension.
  api_version_ = std::min(loader_version, uint32_t(VK_API_VERSION_1_3));

  ValidationMode mode = env_validation_mode();
  if (options.validation && mode == ValidationMode::off) mode = ValidationMode::core;

  std::vector<const char*> layers;
  std::vector<const char*> extensions;
  const auto available = instance_extensions(nullptr);
  VkInstanceCreateFlags flags = 0;
  // MoltenVK and other non-conformant implementations list their devices only with portability enumeration.
  if (has_extension(available, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
    extensions.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
    flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
  }

  VkDebugUtilsMessengerCreateInfoEXT debug_info = messenger_info(log_.get());
  const VkValidationFeatureEnableEXT sync_validation = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
  auto validation_features = vk_struct<VkValidationFeaturesEXT>(VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT);
  const void* next = nullptr;
  if (mode != ValidationMode::off) {
    const auto all_layers = instance_layers();
    const bool have_layer = std::any_of(all_layers.begin(), all_layers.end(), [](const VkLayerProperties& l) {
      return std::strcmp(l.layerName, k_validation_layer) == 0;
    });
    if (!have_layer)
      fail("Vulkan validation was requested (GRETA_VK_VALIDATION or the validation option) but ",
           k_validation_layer, " is not installed (Debian: apt-get install vulkan-validationlayers)");
    layers.push_back(k_validation_layer);
    const auto layer_exts = instance_extensions(k_validation_layer);
    if (!has_extension(available, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) &&
        !has_extension(layer_exts, VK_EXT_DEBUG_UTILS_EXTENSION_NAME))
      fail("Vulkan validation was requested but the loader lacks ", VK_EXT_DEBUG_UTILS_EXTENSION_NAME,
           ", so its messages could not be recorded");
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    debug_utils_ = true;
    next = &debug_info;  // also reports problems in vkCreateInstance / vkDestroyInstance themselves
    if (mode == ValidationMode::sync && has_extension(layer_exts, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
      extensions.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
      validation_features.enabledValidationFeatureCount = 1;
      validation_features.pEnabledValidationFeatures = &sync_validation;
      validation_features.pNext = next;
      next = &validation_features;
    }
  }

  auto app = vk_struct<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  app.pApplicationName = "greta";
  app.applicationVersion = VK_MAKE_API_VERSION(0, 0, 1, 0);
  app.pEngineName = "greta";
  app.engineVersion = VK_MAKE_API_VERSION(0, 0, 1, 0);
  app.apiVersion = api_version_;

  auto info = vk_struct<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  info.pNext = next;
  info.flags = flags;
  info.pApplicationInfo = &app;
  info.enabledLayerCount = uint32_t(layers.size());
  info.ppEnabledLayerNames = layers.data();
  info.enabledExtensionCount = uint32_t(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  const VkResult result = vkCreateInstance(&info, nullptr, &instance_);
  // The loader answers VK_ERROR_INCOMPATIBLE_DRIVER when it found no driver (ICD) at all.
  if (result == VK_ERROR_INCOMPATIBLE_DRIVER) fail("no Vulkan device found");
  GRETA_VK_CHECK(result);
  volkLoadInstanceOnly(instance_);

  if (debug_utils_) {
    const VkResult r = vkCreateDebugUtilsMessengerEXT(instance_, &debug_info, nullptr, &messenger_);
    if (r != VK_SUCCESS) {
      vkDestroyInstance(instance_, nullptr);
      instance_ = VK_NULL_HANDLE;
      GRETA_VK_CHECK(r);
    }
  }
}

Instance::~Instance() {
  if (messenger_ != VK_NULL_HANDLE) vkDestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
  if (instance_ != VK_NULL_HANDLE) vkDestroyInstance(instance_, nullptr);
}

namespace {

// Sanitizer builds only. Mesa's lavapipe allocates one-time state (a pthread_once initializer) while the loader
// enumerates devices, and the loader unloads the driver at vkDestroyInstance. LeakSanitizer names each frame's module
// at exit, so the driver's frames then read "<unknown module>" and no suppression in tests/lsan.supp can match them;
// fast unwinding stops there, and full unwinding on every malloc multiplies the suite's time. Keeping every Vulkan
// driver and layer the loader has opened mapped until exit (RTLD_NODELETE) keeps their names on those frames.
void keep_drivers_mapped() {
#if defined(__SANITIZE_ADDRESS__)
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void*) {
        const char* name = info->dlpi_name;
        if (name && (std::strstr(name, "libvulkan_") || std::strstr(name, "VkLayer_")))
          (void)dlopen(name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
        return 0;
      },
      nullptr);
#endif
}

}  // namespace

std::vector<VkPhysicalDevice> Instance::physical_devices() const {
  uint32_t count = 0;
  VkResult result = vkEnumeratePhysicalDevices(instance_, &count, nullptr);
  if (result == VK_ERROR_INITIALIZATION_FAILED || (result == VK_SUCCESS && count == 0)) fail("no Vulkan device found");
  GRETA_VK_CHECK(result);
  std::vector<VkPhysicalDevice> devices(count);
  GRETA_VK_CHECK(vkEnumeratePhysicalDevices(instance_, &count, devices.data()));
  keep_drivers_mapped();
  devices.resize(count);
  if (devices.empty()) fail("no Vulkan device found");
  return devices;
}

void Instance::set_object_name(VkDevice device, VkObjectType type, uint64_t handle, const char* name) const {
  if (!debug_utils_ || !name || !*name) return;
  auto info = vk_struct<VkDebugUtilsObjectNameInfoEXT>(VK_STRUCTURE_TYPE_DEBUG_UTILS_OBJECT_NAME_INFO_EXT);
  info.objectType = type;
  info.objectHandle = handle;
  info.pObjectName = name;
  vkSetDebugUtilsObjectNameEXT(device, &info);  // best effort: a name is a debugging aid
}

std::vector<DeviceInfo> list_devices(const InstanceOptions& options) {
  Instance instance(options);
  std::vector<DeviceInfo> infos;
  const auto devices = instance.physical_devices();
  for (uint32_t i = 0; i < devices.size(); ++i) infos.push_back(query_device_info(instance, devices[i], i));
  return infos;
}

}  // namespace greta::vk
