// Runtime objects of the HIP backend, each owned by one RAII class: streams, events, device and pinned host memory,
// the device memory pool and instantiated graphs. GPU-compiled files only (uses gpu_api.h's runtime API).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hip/gpu_api.h"
#include "hip/launch_util.h"

namespace greta::hip {

// What the backend and the benches need to know about the device, read once.
struct DeviceProps {
  int index = 0;
  std::string name, arch;   // "AMD Instinct MI300X", "gfx942:sramecc+:xnack-" / "sm_90"
  std::string platform;     // "amd" | "nvidia"
  int wave_size = 64;
  int compute_units = 0;
  double clock_ghz = 0;
  double memory_gbps = 0;   // from memory clock and bus width: approximate
  uint64_t memory_bytes = 0;
  size_t shared_per_block = 0;
  bool mma = false;         // matrix cores this build has kernels for
  double peak_fp16_tflops = 0, peak_fp32_tflops = 0;  // dense, from clock x units x per-unit rates: approximate
};
DeviceProps query_device(int index);

class Stream {
public:
  Stream() { GRETA_GPU_CHECK(gpuStreamCreateNonBlocking(&s_), "creating a stream"); }
  ~Stream() { (void)gpuStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  gpuStream_t get() const { return s_; }
  void synchronize() const { GRETA_GPU_CHECK(gpuStreamSynchronize(s_), "waiting for the stream"); }

private:
  gpuStream_t s_{};
};

class Event {
public:
  explicit Event(bool timing = true) {
    if (timing)
      GRETA_GPU_CHECK(gpuEventCreate(&e_), "creating an event");
    else
      GRETA_GPU_CHECK(gpuEventCreateNoTiming(&e_), "creating an event");
  }
  ~Event() { (void)gpuEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  gpuEvent_t get() const { return e_; }
  void record(const Stream& s) { GRETA_GPU_CHECK(gpuEventRecord(e_, s.get()), "recording an event"); }
  void synchronize() const { GRETA_GPU_CHECK(gpuEventSynchronize(e_), "waiting for an event"); }
  // Seconds from `start` to this event (both recorded and complete).
  double seconds_since(const Event& start) const {
    float ms = 0;
    GRETA_GPU_CHECK(gpuEventElapsedTime(&ms, start.e_, e_), "reading event times");
    return double(ms) * 1e-3;
  }

private:
  gpuEvent_t e_{};
};

class DeviceMemory {
public:
  explicit DeviceMemory(size_t bytes);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  uint8_t* data() const { return static_cast<uint8_t*>(p_); }
  size_t size() const { return bytes_; }

private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

class PinnedMemory {
public:
  explicit PinnedMemory(size_t bytes);
  ~PinnedMemory();
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;
  uint8_t* data() const { return static_cast<uint8_t*>(p_); }
  size_t size() const { return bytes_; }

private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Device memory pool: chunks of at least kChunkBytes from gpuMalloc, handed out in 256-byte aligned ranges (first
// fit, neighbours coalesced on release). Weights, plan buffers and the KV cache all come from it, so preparing and
// dropping plans does not call gpuMalloc/gpuFree every time; the chunks are freed with the pool.
class MemoryPool {
public:
  static constexpr size_t kAlign = 256;
  static constexpr size_t kChunkBytes = size_t(256) << 20;

  struct Range {
    uint8_t* ptr = nullptr;
    size_t bytes = 0;
    size_t chunk = 0;
    size_t offset = 0;
  };

  MemoryPool() = default;
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // Throws greta::Error naming `device` and the sizes when the device is out of memory or the range would pass the
  // limit.
  Range allocate(size_t bytes);
  void release(const Range& r);
  size_t reserved_bytes() const;  // held from the device
  size_t used_bytes() const { return used_; }
  // Caps the bytes handed out at once (0: no cap), as a smaller GPU would; `device` names it in messages.
  void set_limit(size_t bytes, std::string device) {
    limit_ = bytes;
    device_ = std::move(device);
  }

private:
  struct FreeRange {
    size_t offset, bytes;
  };
  struct Chunk {
    std::unique_ptr<DeviceMemory> memory;
    std::vector<FreeRange> free;  // sorted by offset
  };
  std::vector<Chunk> chunks_;
  size_t used_ = 0;
  size_t limit_ = 0;
  std::string device_ = "the HIP device";
};

// A range of the pool, returned on destruction.
class PoolBuffer {
public:
  PoolBuffer(MemoryPool& pool, size_t bytes) : pool_(&pool), range_(pool.allocate(bytes)) {}
  ~PoolBuffer() { pool_->release(range_); }
  PoolBuffer(const PoolBuffer&) = delete;
  PoolBuffer& operator=(const PoolBuffer&) = delete;
  uint8_t* data() const { return range_.ptr; }
  size_t size() const { return range_.bytes; }

private:
  MemoryPool* pool_;
  MemoryPool::Range range_;
};

// A captured stream: the plan's ops recorded once and replayed with one launch.
class Graph {
public:
  Graph() = default;
  ~Graph() { reset(); }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  bool ready() const { return exec_ != nullptr; }
  void begin_capture(const Stream& s);
  void end_capture(const Stream& s);  // instantiates
  void launch(const Stream& s);
  void reset();

private:
  gpuGraph_t graph_{};
  gpuGraphExec_t exec_{};
};

}  // namespace greta::hip
