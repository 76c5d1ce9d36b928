#include "engine/placement.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "model/model_config.h"

namespace greta::engine {

int weight_layer(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  size_t i = 4;
  int64_t layer = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && layer < (int64_t(1) << 30))
    layer = layer * 10 + (name[i++] - '0');
  return i > 4 && i < name.size() && name[i] == '.' ? int(layer) : -1;
}

namespace {

// The sizes place_layers weighs, from the weight table and the config.
struct ModelSizes {
  std::vector<uint64_t> block;  // [n_layers] weights of each block
  uint64_t embedding = 0;       // token_embd
  uint64_t output = 0;          // output_norm + output (0 for a tied output matrix: see tied)
  uint64_t shared = 0;          // the rest (rope factors): on every device that runs a block
  bool tied = false;            // the output projection is token_embd
  uint64_t kv_per_block = 0;    // KV bytes per position of one block
  uint64_t activations = 0;     // scratch of the largest step, on each device that runs blocks
};

ModelSizes model_sizes(const model::ModelConfig& c, const ModelWeights& w, const PlacementRequest& r) {
  ModelSizes s;
  s.block.assign(size_t(c.n_layers), 0);
  for (size_t i = 0; i < w.table.size(); ++i) {
    const WeightDesc& d = w.table[i];
    const int layer = weight_layer(d.name);
    if (layer >= 0 && layer < c.n_layers) s.block[size_t(layer)] += d.bytes;
    else if (WeightId(i) == w.token_embd) s.embedding += d.bytes;
    else if (WeightId(i) == w.output || WeightId(i) == w.output_norm) s.output += d.bytes;
    else s.shared += d.bytes;
  }
  s.tied = w.output == w.token_embd;
  s.kv_per_block = elem_bytes(r.kv_type, c.n_kv_heads * (c.head_dim + c.head_dim_v));
  // An estimate, not the plan's exact sum: the residual stream and its norm, Q/K/V and the attention output, the FFN's
  // gate, up and product (the chosen experts' for a mixture), in f32, for max_batch tokens; and a few logit rows.
  const int64_t ffn = std::max(c.ffn_dim, c.n_experts_used * c.expert_ffn_dim);
  const int64_t q = c.n_heads * std::max(c.head_dim, c.head_dim_v);
  s.activations = uint64_t(r.max_batch) * 4 * uint64_t(6 * c.dim + 3 * ffn + 3 * q) + 4 * uint64_t(c.vocab_size) * 8;
  return s;
}

// Blocks [0, gpu_blocks) over the GPUs by cumulative share, the rest on the CPU (cpu >= 0).
std::vector<int> assign(int64_t n_layers, int64_t gpu_blocks, std::span<const double> shares, int cpu) {
  std::vector<int> device(size_t(n_layers), cpu);
  const double total = std::accumulate(shares.begin(), shares.end(), 0.0);
  double before = 0;
  for (size_t g = 0; g < shares.size(); ++g) {
    const int64_t first = std::llround(double(gpu_blocks) * before / total);
    before += shares[g];
    const int64_t end = g + 1 == shares.size() ? gpu_blocks : std::llround(double(gpu_blocks) * before / total);
    for (int64_t l = first; l < end; ++l) device[size_t(l)] = int(g);
  }
  return device;
}

// Per device: the weights it holds and the bytes it needs beside them.
struct DeviceLoad {
  std::vector<int64_t> layers;
  std::vector<uint64_t> weights, extra;
};

DeviceLoad loads(const ModelSizes& s, std::span<const int> layer_device, size_t n_devices, int64_t ctx) {
  DeviceLoad d{std::vector<int64_t>(n_devices, 0), std::vector<uint64_t>(n_devices, 0),
               std::vector<uint64_t>(n_devices, 0)};
  for (size_t l = 0; l < layer_device.size(); ++l) {
    const size_t dev = size_t(layer_device[l]);
    ++d.layers[dev];
    d.weights[dev] += s.block[l];
    d.extra[dev] += s.kv_per_block * uint64_t(ctx);
  }
  if (layer_device.empty()) return d;
  const size_t first = size_t(layer_device.front()), last = size_t(layer_device.back());
  d.weights[first] += s.embedding;
  d.weights[last] += s.output + (s.tied && last != first ? s.embedding : 0);
  for (size_t dev = 0; dev < n_devices; ++dev)
    if (d.layers[dev] > 0) d.weights[dev] += s.shared, d.extra[dev] += s.activations;
  return d;
}

std::string block_range(std::span<const int> layer_device, int dev) {
  std::string out;
  for (size_t l = 0; l < layer_device.size();) {
    if (layer_device[l] != dev) {
      ++l;
      continue;
    }
    size_t end = l;
    while (end < layer_device.size() && layer_device[end] == dev) ++end;
    out += cat(out.empty() ? "" : ", ", end - l == 1 ? cat("block ", l) : cat("blocks ", l, "-", end - 1));
    l = end;
  }
  return out;
}

}  // namespace

Placement place_layers(const model::ModelConfig& config, const ModelWeights& weights,
                       std::span<const PlacementDevice> devices, const PlacementRequest& request) {
  const size_t n_gpus = devices.size() - (request.cpu_offload ? 1 : 0);
  if (devices.empty() || (request.cpu_offload && devices.size() < 2))
    fail("a layer split needs ", request.cpu_offload ? "a GPU and the CPU" : "at least one device");
  const int64_t L = config.n_layers;
  if (request.gpu_layers < -1 || request.gpu_layers > L)
    fail("--gpu-layers ", request.gpu_layers, ": the model has ", L, " blocks (0 to ", L, ", or -1 for as many as fit)");
  if (request.gpu_layers >= 0 && request.gpu_layers < L && !request.cpu_offload)
    fail("--gpu-layers ", request.gpu_layers, " leaves blocks for the CPU, which this split does not include");
  std::vector<double> shares = request.tensor_split;
  if (shares.empty())
    for (size_t g = 0; g < n_gpus; ++g) shares.push_back(double(std::max<uint64_t>(devices[g].capacity, 1)));
  if (shares.size() != n_gpus)
    fail("--tensor-split has ", shares.size(), " shares for ", n_gpus, " GPU", n_gpus == 1 ? "" : "s");
  for (double s : shares)
    if (!(s >= 0) || !std::isfinite(s)) fail("--tensor-split: shares must be finite and not negative");
  if (!(std::accumulate(shares.begin(), shares.end(), 0.0) > 0)) fail("--tensor-split: the shares add up to 0");

  const ModelSizes sizes = model_sizes(config, weights, request);
  const int cpu = request.cpu_offload ? int(devices.size() - 1) : 0;
  const auto fits = [&](int64_t gpu_blocks, bool weights_only) {
    const std::vector<int> at = assign(L, gpu_blocks, shares, cpu);
    const DeviceLoad load = loads(sizes, at, devices.size(), request.ctx);
    for (size_t g = 0; g < n_gpus; ++g)
      if (load.weights[g] + (weights_only ? 0 : load.extra[g]) > devices[g].capacity) return false;
    return true;
  };
  int64_t gpu_blocks = request.gpu_layers >= 0 ? request.gpu_layers : L;
  if (request.cpu_offload && request.gpu_layers < 0)
    while (gpu_blocks > 0 && !fits(gpu_blocks, false)) --gpu_blocks;

  Placement p;
  p.layer_device = assign(L, gpu_blocks, shares, cpu);
  const DeviceLoad load = loads(sizes, p.layer_device, devices.size(), request.ctx);
  p.layers = load.layers;
  p.weight_bytes = load.weights;
  for (const auto& d : devices) p.names.push_back(d.name);
  for (size_t g = 0; g < n_gpus; ++g)
    if (load.weights[g] > devices[g].capacity)
      fail(devices[g].name, " cannot hold its part of the model: ", block_range(p.layer_device, int(g)), " need ",
           format_bytes(double(load.weights[g])), " of weights, it has ", format_bytes(double(devices[g].capacity)),
           request.cpu_offload ? "; use fewer --gpu-layers" : "; use --gpu-layers to run part of the model on the CPU",
           n_gpus > 1 ? " or another --tensor-split" : "");
  // The KV room per block of the tightest device, scaled to every block (placement.h).
  uint64_t room = UINT64_MAX;
  for (size_t dev = 0; dev < devices.size(); ++dev) {
    if (load.layers[dev] == 0) continue;
    const uint64_t free_bytes = devices[dev].capacity > load.weights[dev] ? devices[dev].capacity - load.weights[dev] : 0;
    room = std::min(room, free_bytes / uint64_t(load.layers[dev]) * uint64_t(L));
  }
  p.memory_capacity = weights.total_bytes() + (room == UINT64_MAX ? 0 : room);
  return p;
}

std::string Placement::describe() const {
  std::string out;
  const int first = layer_device.empty() ? 0 : layer_device.front();
  const int last = layer_device.empty() ? 0 : layer_device.back();
  // Two logical devices on one GPU have the same name: number them then.
  bool repeated = false;
  for (size_t i = 0; i < names.size(); ++i)
    for (size_t j = 0; j < i; ++j) repeated = repeated || names[i] == names[j];
  for (size_t dev = 0; dev < names.size(); ++dev) {
    std::vector<std::string> parts;
    if (const std::string blocks = block_range(layer_device, int(dev)); !blocks.empty()) parts.push_back(blocks);
    if (int(dev) == first) parts.push_back("the embedding");
    if (int(dev) == last) parts.push_back("the output");
    std::string what;
    for (size_t i = 0; i < parts.size(); ++i)
      what += cat(i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ", parts[i]);
    out += cat(out.empty() ? "" : "; ", repeated ? cat("[", dev, "] ") : "", names[dev], ": ",
               what.empty() ? std::string("nothing") : cat(what, " (", format_bytes(double(weight_bytes[dev])), ")"));
  }
  return out;
}

}  // namespace greta::engine
