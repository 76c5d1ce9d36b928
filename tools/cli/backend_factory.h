// The one place that maps `--backend cpu|vk|hip` (with --device and --threads) to an engine::Backend. Commands that
// run a model take their backend options from here, so every command accepts the same ones and reports the same
// errors. Backends that this binary was built without are still listed: choosing one fails with a one-line
// message instead of an "unknown backend" error.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "args.h"
#include "engine/backend.h"

namespace greta::cli {

struct BackendRequest {
  std::string name;     // "cpu", "vk", "hip"; empty: the default (vk when a Vulkan device and backend exist, else cpu)
  int64_t device = -1;  // GPU index (--device N, as `greta-vk devices` numbers them); -1: the backend's default
  int64_t threads = 0;  // CPU worker threads (--threads N); 0: one per hardware thread
};

struct BackendChoice {
  std::unique_ptr<engine::Backend> backend;
  std::string kind;    // "cpu", "vk", "hip": what was chosen
  std::string device;  // the device's name: the CPU model, the GPU name
  bool by_default = false;  // the request named no backend
  std::string default_note;  // why the default fell on this backend, when worth saying (a CPU-only Vulkan device)
};

// Creates the requested backend. Throws greta::Error with one line for an unknown name, a backend this binary was
// built without ("--backend vk: the Vulkan backend is not built into this binary yet"), a device index on a backend
// without devices, or a bad thread count.
BackendChoice create_backend(const BackendRequest& request);

// "cpu, vk, hip": every name --backend accepts, built in or not.
std::string backend_names();

// The options create_backend reads, for a command's option table (--backend, --device, --threads).
std::span<const OptionSpec> backend_option_specs();
BackendRequest backend_request_from(const Args& args);

// "backend: cpu (2 threads) on Intel(R) Xeon(R) ..." -- the line commands print to stderr before they load a model.
std::string describe_backend(const BackendChoice& choice);

}  // namespace greta::cli
