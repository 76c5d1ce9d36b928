// Device queries, memory and graphs of the HIP backend (see device.h).
#include "hip/device.h"

#include <algorithm>

namespace greta::hip {

namespace {

// Dense matrix-core fp16 FLOPs per clock per compute unit, by architecture (vendor data sheets: MI300X 1307 TFLOPs
// = 304 CUs x 2.1 GHz x 2048; MI250X 383 TFLOPs = 220 x 1.7 GHz x 1024; RX 7900 XTX 123 TFLOPs = 96 x 2.5 GHz x 512;
// H100 SXM 989 TFLOPs = 132 SMs x 1.83 GHz x 4096). Approximate: boost clocks vary.
double fp16_flops_per_clock_per_unit(const std::string& platform, const std::string& arch, int cc_major) {
  if (platform == "nvidia") return cc_major >= 9 ? 4096 : (cc_major >= 8 ? 2048 : 1024);
  if (arch.rfind("gfx94", 0) == 0) return 2048;
  if (arch.rfind("gfx90a", 0) == 0) return 1024;
  if (arch.rfind("gfx11", 0) == 0) return 512;
  return 256;  // packed fp16 on the vector units
}

}  // namespace

DeviceProps query_device(int index) {
  gpuDeviceProp p{};
  GRETA_GPU_CHECK(gpuGetDeviceProperties(&p, index), "reading device properties");
  DeviceProps d;
  d.index = index;
  d.name = p.name;
  d.wave_size = p.warpSize;
  d.compute_units = p.multiProcessorCount;
  int clock_khz = 0, memory_khz = 0;
#if defined(GRETA_GPU_CUDA)
  // CUDA 13 dropped the clock fields from cudaDeviceProp; the attributes remain (kHz).
  GRETA_GPU_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, index), "reading the clock rate");
  GRETA_GPU_CHECK(cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, index), "reading the memory clock");
#else
  clock_khz = p.clockRate;
  memory_khz = p.memoryClockRate;
#endif
  d.clock_ghz = double(clock_khz) * 1e-6;
  d.memory_gbps = 2.0 * double(memory_khz) * 1e3 * double(p.memoryBusWidth) / 8.0 * 1e-9;
  d.memory_bytes = uint64_t(p.totalGlobalMem);
  d.shared_per_block = size_t(p.sharedMemPerBlock);
  int cc_major = 0;
#if defined(GRETA_GPU_HIP)
  d.platform = "amd";
  d.arch = p.gcnArchName;
  const std::string base = d.arch.substr(0, d.arch.find(':'));
  d.mma = base == "gfx90a" || base == "gfx940" || base == "gfx941" || base == "gfx942" || base == "gfx1100" ||
          base == "gfx1101" || base == "gfx1102" || base == "gfx1103";
#else
  d.platform = "nvidia";
  d.arch = cat("sm_", p.major, p.minor);
  cc_major = p.major;
  d.mma = p.major >= 8;
#endif
  d.peak_fp16_tflops = double(d.compute_units) * d.clock_ghz * 1e9 *
                       fp16_flops_per_clock_per_unit(d.platform, d.arch, cc_major) * 1e-12;
  // fp32 FMA lanes per unit per clock: 128 on CDNA/RDNA3 dual-issue and on Hopper SMs (2 flops each).
  d.peak_fp32_tflops = double(d.compute_units) * d.clock_ghz * 1e9 * 256 * 1e-12;
  return d;
}

DeviceMemory::DeviceMemory(size_t bytes) : bytes_(bytes) {
  const gpuError_t e = gpuMalloc(&p_, bytes);
  if (e != gpuSuccess) fail("hip: out of device memory allocating ", format_bytes(double(bytes)), " (", gpuGetErrorString(e), ")");
}
DeviceMemory::~DeviceMemory() { (void)gpuFree(p_); }

PinnedMemory::PinnedMemory(size_t bytes) : bytes_(bytes) {
  const gpuError_t e = gpuHostMalloc(&p_, bytes);
  if (e != gpuSuccess) fail("hip: cannot allocate ", format_bytes(double(bytes)), " of pinned host memory (", gpuGetErrorString(e), ")");
}
PinnedMemory::~PinnedMemory() { (void)gpuHostFree(p_); }

MemoryPool::Range MemoryPool::allocate(size_t bytes) {
  const size_t need = std::max<size_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  if (limit_ > 0 && used_ + need > limit_)
    fail("hip: out of device memory allocating ", format_bytes(double(bytes)), " on ", device_, ": in use ",
         format_bytes(double(used_)), " of the ", format_bytes(double(limit_)), " the device memory limit allows");
  for (size_t c = 0; c < chunks_.size(); ++c) {
    auto& free = chunks_[c].free;
    for (size_t i = 0; i < free.size(); ++i) {
      if (free[i].bytes < need) continue;
      Range r{chunks_[c].memory->data() + free[i].offset, need, c, free[i].offset};
      free[i].offset += need;
      free[i].bytes -= need;
      if (free[i].bytes == 0) free.erase(free.begin() + long(i));
      used_ += need;
      return r;
    }
  }
  Chunk chunk;
  try {
    chunk.memory = std::make_unique<DeviceMemory>(std::max(need, kChunkBytes));
  } catch (const Error& e) {
    fail(e.what(), " on ", device_, " (", format_bytes(double(bytes)), " requested; ", format_bytes(double(used_)),
         " in use, ", format_bytes(double(reserved_bytes())), " reserved)");
  }
  if (chunk.memory->size() > need) chunk.free.push_back({need, chunk.memory->size() - need});
  chunks_.push_back(std::move(chunk));
  used_ += need;
  return {chunks_.back().memory->data(), need, chunks_.size() - 1, 0};
}

void MemoryPool::release(const Range& r) {
  if (!r.ptr) return;
  auto& free = chunks_[r.chunk].free;
  auto it = std::lower_bound(free.begin(), free.end(), r.offset,
                             [](const FreeRange& f, size_t off) { return f.offset < off; });
  it = free.insert(it, {r.offset, r.bytes});
  if (it + 1 != free.end() && it->offset + it->bytes == (it + 1)->offset) {  // merge with the next
    it->bytes += (it + 1)->bytes;
    free.erase(it + 1);
  }
  if (it != free.begin() && (it - 1)->offset + (it - 1)->bytes == it->offset) {  // and the previous
    (it - 1)->bytes += it->bytes;
    free.erase(it);
  }
  used_ -= r.bytes;
}

size_t MemoryPool::reserved_bytes() const {
  size_t total = 0;
  for (const auto& c : chunks_) total += c.memory->size();
  return total;
}

void Graph::begin_capture(const Stream& s) {
  reset();
  GRETA_GPU_CHECK(gpuStreamBeginCapture(s.get()), "starting graph capture");
}

void Graph::end_capture(const Stream& s) {
  GRETA_GPU_CHECK(gpuStreamEndCapture(s.get(), &graph_), "ending graph capture");
  GRETA_GPU_CHECK(gpuGraphInstantiate(&exec_, graph_), "instantiating the graph");
}

void Graph::launch(const Stream& s) { GRETA_GPU_CHECK(gpuGraphLaunch(exec_, s.get()), "launching the graph"); }

void Graph::reset() {
  if (exec_) (void)gpuGraphExecDestroy(exec_);
  if (graph_) (void)gpuGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
}

}  // namespace greta::hip
