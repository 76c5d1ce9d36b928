// Where each part of a model lives when one device is not enough: a layer split. Consecutive transformer blocks go to
// each GPU in proportion to --tensor-split (else to each GPU's memory), and with CPU offload the blocks past
// --gpu-layers (by default: past what the GPUs' memory holds) go to the CPU backend, always the last device. The token
// embedding goes with block 0, the final norm and the output projection with the last block (llama.cpp's -ngl counts
// the output as one more layer; here it follows the last block). Pure arithmetic over the weight table: tested alone,
// printed before anything loads, then handed to engine::SplitBackend.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/plan.h"

namespace greta::model {
struct ModelConfig;
}

namespace greta::engine {

struct PlacementDevice {
  std::string name;        // "vulkan: NVIDIA H200", "cpu (16 threads)": for messages
  uint64_t capacity = 0;   // bytes the engine may use there (Backend::memory_capacity, or a --device-memory-limit)
};

struct PlacementRequest {
  // The last device is the CPU backend and takes the blocks the GPUs do not (partial offload).
  bool cpu_offload = false;
  // Blocks on the GPUs (the others' devices); -1: as many as fit (all of them without cpu_offload).
  int64_t gpu_layers = -1;
  // Relative shares of the GPU blocks, one per GPU (--tensor-split 3,1); empty: in proportion to their capacities.
  std::vector<double> tensor_split;
  // What must fit beside the weights when judging how many blocks a GPU takes: a KV cache of `ctx` positions in
  // `kv_type` for its blocks, and the activations of `max_batch`-token steps.
  int64_t ctx = 4096;
  ElemType kv_type = ElemType::F16;
  int64_t max_batch = 512;
};

struct Placement {
  std::vector<int> layer_device;        // [n_layers]: the device of each block
  std::vector<int64_t> layers;          // per device: blocks it runs
  std::vector<uint64_t> weight_bytes;   // per device: weights it holds (the embedding with block 0, the output with
                                        // the last block, a tied matrix on both)
  std::vector<std::string> names;       // per device, from PlacementDevice
  // What the SplitBackend reports as its memory: the weights plus the KV room of the tightest device, scaled to every
  // block (the engine gives each device the KV pages of its blocks, so the device with the least room per block
  // bounds the whole cache).
  uint64_t memory_capacity = 0;

  // "vulkan: NVIDIA H200: blocks 0-20 and the embedding (9.1 GiB); cpu (16 threads): blocks 21-31 and the output
  // (4.6 GiB)"
  std::string describe() const;
};

// Throws greta::Error when a device index is missing, a share is not positive, --gpu-layers is out of range, or the
// weights alone exceed a GPU's capacity (naming the device, the sizes and the options that would help).
Placement place_layers(const model::ModelConfig& config, const ModelWeights& weights,
                       std::span<const PlacementDevice> devices, const PlacementRequest& request);

// The block a weight belongs to ("blk.12.attn_q.weight" -> 12), -1 for the others (embedding, output, rope factors).
int weight_layer(const std::string& name);

}  // namespace greta::engine
