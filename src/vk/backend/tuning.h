// Tuned tiles of the Vulkan prefill matmul kernels: what `greta-vk tune` measures and later runs load.
//
// The prefill GEMM (op_matmul.cpp) is matmul_coopmat on devices with 16x16x16 f16 cooperative matrices, else
// matmul_tiled; both take their tile as specialization constants. The best tile depends on the device and on the
// shape, so `greta-vk tune MODEL` times a fixed list of candidates (tile_candidates) for every distinct prefill matmul
// of the model and stores the winners here, keyed by
//   device:       name, vendor and device ids, driver version, pipeline-cache UUID (a driver update re-tunes), and
//   shape class:  kernel, weight type, token-count bucket (<= 64, <= 256, <= 1024, more), N (weight rows), K (columns).
// The backend picks a tile by: GRETA_VK_COOPMAT_TILE / GRETA_VK_TILED_TILE > this cache > the built-in default.
//
// The cache is one text file, <cache dir>/vk-matmul-tuning.txt, beside the pipeline cache (pipelines.h:
// default_cache_dir). Layout, one record per line, '#' starts a comment line:
//   greta-vk-matmul-tuning 1                                     (format and version: the first record)
//   device VENDOR DEVICE DRIVER UUID NAME...                     (hex ids, 32 hex digits of UUID, name to the end)
//   KERNEL TYPE TOKENS N K TILE BEST_US DEFAULT_US               (entries of the device above)
// e.g. "coopmat q4_0 512 11008 4096 64x128x2x4x64 812.5 905.0": TOKENS is the batch that was timed, its bucket is
// the entry's key (one entry per bucket: the last tuned wins); DEFAULT_US 0 means the default tile cannot run there.
// Reading is strict and bounded (size, line length, counts, number ranges): anything else makes the whole file
// ignored with one warning, never a crash. Entries whose tile is not valid on the device are ignored by the backend.
//
// No Vulkan types here: the CLI includes this header.
#pragma once
#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/tensor_types.h"

namespace greta::vk {

// The two prefill (matrix-matrix) kernels whose tiles are tuned.
enum class GemmKernel : uint8_t { tiled, coopmat };
const char* gemm_kernel_name(GemmKernel k);  // "tiled", "coopmat"
std::optional<GemmKernel> gemm_kernel_from_name(std::string_view name);

// A tile: matmul_tiled uses bm x bn x bk (workgroup bm/4 * bn/4 invocations, wm = wn = 0); matmul_coopmat a bm x bn
// tile on a wm x wn grid of subgroups with K step bk, repeated kg times: kg groups of subgroups share each K step's
// 16-column slices and sum their accumulators at the end.
struct MatmulTile {
  uint32_t bm = 0, bn = 0, wm = 0, wn = 0, bk = 0, kg = 1;
  auto operator<=>(const MatmulTile&) const = default;
};

struct MatmulConfig {
  GemmKernel kernel = GemmKernel::tiled;
  MatmulTile tile;
  auto operator<=>(const MatmulConfig&) const = default;
};

// The built-in defaults (op_matmul.cpp explains them). The coopmat GEMM's, for every weight type and batch: 128x128
// tiles at K steps of 64 on 2 K groups of 2 x 4 subgroups (16 subgroups of 2 x 4 fragments: one workgroup fills an
// H100 SM, and 512 x 4096 is 128 workgroups), in one shared-memory stage where two do not fit (48 KiB).
inline constexpr MatmulTile kDefaultTiledTile{64, 64, 0, 0, 16};
inline constexpr MatmulTile kDefaultCoopmatTile{128, 128, 2, 4, 64, 2};
// Batched decode steps (9..64 tokens: tokens of many sequences) read every weight once for a few rows of tokens, so
// the tile is cut to the tokens: on the H200, 8B Q4_K_M batched decode (tokens/s at 16 / 32 / 64 sequences) 537 /
// 990 / 1693 on the default tile, 782 / 1381 / 1746 on 32x64x2x2x64x2 and 656 / 1179 / 1956 on 64x128x2x4x64x2.
// With the batched steps' K splits (op_matmul.cpp: coopmat_split), matmul ms per step of the 8B on the H200: 16
// tokens 9.6 on 16x32x1x2x64x2, 11.0 on 16x64x1x2x64x2, 11.7 on 32x64x2x2x64x2, 12.4-13.2 on 16x128 tiles or at
// BK 128 (more workgroups, each with a shorter tile, beat fewer with more warps); 64 tokens 15.4 on
// 64x64x2x2x128x4, 16.4 on 64x128x2x4x64x2, 16.6 on 64x64x2x2x64x4, 17.4 on 64x128x2x4x64x4. Since Q4_0 and Q4_K
// took the int8 GEMM there, the f16 GEMM's 33-64 tokens are mostly Q6_K's and the output projections': on 64 x 32 (8
// subgroups where 64 x 64 had 16, twice the row tiles) the 8B's S_TG at 64 sequences gained 2.6 %, 6.6 % with every
// GEMM on f16 (docs/benchmarks.md, "op_matmul.cpp's rules").
inline constexpr MatmulTile kCoopmatTile16Tokens{16, 32, 1, 2, 64, 2};
inline constexpr MatmulTile kCoopmatTile32Tokens{32, 64, 2, 2, 64, 2};
inline constexpr MatmulTile kCoopmatTile64Tokens{64, 32, 2, 1, 128, 4};
// The default tile for steps of n_tokens (large steps when not given).
MatmulTile default_tile(GemmKernel kernel, int64_t n_tokens = 1 << 30);

// "64x64x16" (tiled: BMxBNxBK), "128x64x4x2x64" (coopmat: BMxBNxWMxWNxBK), "128x128x2x2x32x2" (coopmat with
// KG > 1: BMxBNxWMxWNxBKxKG).
std::string tile_name(GemmKernel kernel, const MatmulTile& tile);
// The inverse, syntax and bounds only (every number 1..1024); the device's rules are checked by the backend
// (op_matmul.cpp: matmul_tile_valid). coopmat also accepts BMxBNxWMxWN with BK 32 (GRETA_VK_COOPMAT_TILE's form)
// and BMxBNxWMxWNxBK with KG 1.
std::optional<MatmulTile> parse_tile(GemmKernel kernel, std::string_view text);

// The tiles `greta-vk tune` tries for a kernel, the default first; the backend filters them by validity on the
// device. Fixed, so that a tuning run is reproducible.
std::span<const MatmulTile> tile_candidates(GemmKernel kernel);
// What `greta-vk tune` times for steps of n_tokens: the default tile for that size first (the reference the others'
// outputs must match, and the time a winner must beat by 2 %), then the other candidates. The batched steps'
// defaults (default_tile at 64 tokens or fewer) are not prefill candidates: without them first, a tuned tile could
// replace a faster default (the H200's 8B: Q6_K's tuned tiles at 64 tokens, 5136-5144 tokens/s at 64 sequences
// against the default's 5205).
std::vector<MatmulTile> tune_tiles(GemmKernel kernel, int64_t n_tokens);

// Token-count buckets: 64, 256, 1024, or 0 for more than 1024 tokens (n_tokens >= 1).
int64_t token_bucket(int64_t n_tokens);
std::string token_bucket_name(int64_t bucket);  // "<=64", "<=256", "<=1024", ">1024"

struct MatmulShapeClass {
  GemmKernel kernel = GemmKernel::tiled;
  model::GgmlType type = model::GgmlType::F32;
  int64_t bucket = 0;  // token_bucket
  int64_t n = 0, k = 0;
  auto operator<=>(const MatmulShapeClass&) const = default;
};
// "q4_0 11008x4096 <=1024 tokens (coopmat)"
std::string describe(const MatmulShapeClass& s);

// Which device (and driver) the entries were measured on.
struct DeviceKey {
  uint32_t vendor_id = 0, device_id = 0, driver_version = 0;
  std::string cache_uuid;  // the pipeline-cache UUID as 32 lowercase hex digits
  std::string name;
  auto operator<=>(const DeviceKey&) const = default;
};
// The key of a device: the UUID's bytes as hex; the name trimmed, control characters replaced by '?', at most 256
// bytes (so that it survives the file's line format).
DeviceKey make_device_key(uint32_t vendor_id, uint32_t device_id, uint32_t driver_version,
                          std::span<const uint8_t> cache_uuid, std::string_view name);

struct TunedEntry {
  MatmulTile tile;
  int64_t m = 0;                       // the tokens timed (token_bucket(m) is the shape class's bucket)
  double best_us = 0, default_us = 0;  // measured by greta-vk tune: the winner's and the default's time
};

class TuningCache {
public:
  static constexpr const char* kFileName = "vk-matmul-tuning.txt";
  // <dir>/vk-matmul-tuning.txt; empty when dir is empty (nothing is persisted).
  static std::string path_in(const std::string& dir);

  // Parses the text form; throws greta::Error naming the line and the problem.
  static TuningCache parse(std::string_view text);
  // Reads `path`. A missing file is an empty cache; an unreadable, oversized or malformed one is an empty cache
  // and `warning` gets one line saying why. Never throws for the file's contents.
  static TuningCache load(const std::string& path, std::string& warning);
  std::string to_text() const;
  // Writes the file atomically (a temporary file renamed over it), creating the directory; throws greta::Error.
  void save(const std::string& path) const;

  const TunedEntry* find(const DeviceKey& device, const MatmulShapeClass& shape) const;
  void set(const DeviceKey& device, const MatmulShapeClass& shape, const TunedEntry& entry);
  // Every entry of one device; nullptr when it has none.
  const std::map<MatmulShapeClass, TunedEntry>* entries(const DeviceKey& device) const;
  size_t size() const;  // entries over all devices

private:
  std::map<DeviceKey, std::map<MatmulShapeClass, TunedEntry>> devices_;
};

}  // namespace greta::vk
