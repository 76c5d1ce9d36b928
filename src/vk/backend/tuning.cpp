#include "vk/backend/tuning.h"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "core/error.h"

namespace greta::vk {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kMagic = "greta-vk-matmul-tuning";
constexpr uint32_t kVersion = 1;
// Bounds on what a cache file may hold: far above any real use (a model has a handful of shape classes, a machine a
// few devices), small enough that a hostile file costs nothing to reject.
constexpr uintmax_t kMaxFileBytes = 1 << 20;
constexpr size_t kMaxLineBytes = 1024;
constexpr size_t kMaxDevices = 256;
constexpr size_t kMaxEntries = 1 << 16;
constexpr size_t kMaxNameBytes = 256;
constexpr uint32_t kMaxTileDim = 1024;
constexpr int64_t kMaxDim = (int64_t(1) << 31) - 1;
constexpr int64_t kMaxTokens = int64_t(1) << 20;
constexpr double kMaxMicroseconds = 1e12;

// Candidates, the default first. Coopmat (BMxBNxWMxWNxBK): the tiles measured on the H100 while the kernel was
// written (op_matmul.cpp's comment) and their neighbours: 2x2..4x4 subgroups, 1..4 fragments each way per subgroup,
// K steps of 16..64 (one shared-memory stage must fit, two run where they fit: 48 KiB on the H100 holds 128x128 at
// BK 64 once), 1 or 2 K groups. Tiled (BMxBNxBK): workgroups of 64..1024 invocations, K steps of 8..32.
constexpr MatmulTile k_coopmat_candidates[] = {
    {128, 128, 2, 4, 64, 2}, {128, 128, 4, 2, 64, 2}, {128, 128, 4, 2, 32, 2},
    {128, 64, 4, 2, 32},     {128, 128, 2, 2, 32}, {64, 64, 2, 2, 32},
    {64, 128, 2, 4, 32},     {64, 128, 2, 2, 32},  {128, 64, 2, 2, 32},  {128, 128, 4, 2, 32},
    {128, 128, 2, 4, 32},    {128, 128, 4, 4, 32}, {128, 128, 2, 2, 16}, {256, 128, 4, 2, 16},
    {128, 256, 2, 4, 16},    {256, 64, 4, 2, 16},  {64, 64, 2, 2, 64},   {128, 64, 4, 2, 16},
    {256, 128, 4, 4, 16},    {128, 128, 2, 4, 32, 2}, {128, 128, 2, 2, 32, 2}, {32, 64, 2, 2, 64, 2},
    {64, 128, 2, 4, 64, 2},  {16, 64, 1, 4, 64, 2},
};
constexpr MatmulTile k_tiled_candidates[] = {
    {64, 64, 0, 0, 16},  {64, 64, 0, 0, 8},   {64, 64, 0, 0, 32},  {32, 32, 0, 0, 16},
    {32, 64, 0, 0, 16},  {64, 32, 0, 0, 16},  {32, 32, 0, 0, 32},  {128, 64, 0, 0, 16},
    {64, 128, 0, 0, 16}, {128, 128, 0, 0, 8}, {128, 32, 0, 0, 16}, {32, 128, 0, 0, 16},
};

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(sep, start);
    parts.push_back(s.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

// Whitespace-separated fields; `rest`, when given, receives what follows the first `count` fields (the device name).
std::vector<std::string_view> fields(std::string_view line, size_t count = SIZE_MAX, std::string_view* rest = nullptr) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (out.size() < count) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i == line.size()) break;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    out.push_back(line.substr(start, i - start));
  }
  if (rest) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    *rest = line.substr(i);
  }
  return out;
}

template <class T>
std::optional<T> parse_uint(std::string_view s, T max, int base = 10) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc() || end != s.data() + s.size() || v > uint64_t(max)) return std::nullopt;
  return T(v);
}

std::optional<double> parse_microseconds(std::string_view s) {
  if (s.empty() || s.size() > 32) return std::nullopt;
  const std::string text(s);  // strtod needs a terminated string
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(v) || v < 0 || v > kMaxMicroseconds) return std::nullopt;
  return v;
}

bool is_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%x", v);
  return buf;
}

std::string microseconds(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

const char* gemm_kernel_name(GemmKernel k) { return k == GemmKernel::coopmat ? "coopmat" : "tiled"; }

std::optional<GemmKernel> gemm_kernel_from_name(std::string_view name) {
  if (name == "tiled") return GemmKernel::tiled;
  if (name == "coopmat") return GemmKernel::coopmat;
  return std::nullopt;
}

MatmulTile default_tile(GemmKernel kernel, int64_t n_tokens) {
  if (kernel == GemmKernel::tiled) return kDefaultTiledTile;
  if (n_tokens <= 16) return kCoopmatTile16Tokens;
  return n_tokens <= 32 ? kCoopmatTile32Tokens : n_tokens <= 64 ? kCoopmatTile64Tokens : kDefaultCoopmatTile;
}

std::string tile_name(GemmKernel kernel, const MatmulTile& t) {
  if (kernel == GemmKernel::tiled) return cat(t.bm, "x", t.bn, "x", t.bk);
  return cat(t.bm, "x", t.bn, "x", t.wm, "x", t.wn, "x", t.bk, t.kg > 1 ? cat("x", t.kg) : "");
}

std::optional<MatmulTile> parse_tile(GemmKernel kernel, std::string_view text) {
  const auto parts = split(text, 'x');
  std::vector<uint32_t> v;
  for (std::string_view p : parts) {
    const auto n = parse_uint<uint32_t>(p, kMaxTileDim);
    if (!n || *n == 0) return std::nullopt;
    v.push_back(*n);
  }
  if (kernel == GemmKernel::tiled) {
    if (v.size() != 3) return std::nullopt;
    return MatmulTile{v[0], v[1], 0, 0, v[2]};
  }
  if (v.size() < 4 || v.size() > 6) return std::nullopt;
  return MatmulTile{v[0], v[1], v[2], v[3], v.size() >= 5 ? v[4] : 32u, v.size() == 6 ? v[5] : 1u};
}

std::span<const MatmulTile> tile_candidates(GemmKernel kernel) {
  if (kernel == GemmKernel::coopmat) return k_coopmat_candidates;
  return k_tiled_candidates;
}

std::vector<MatmulTile> tune_tiles(GemmKernel kernel, int64_t n_tokens) {
  const MatmulTile first = default_tile(kernel, n_tokens);
  std::vector<MatmulTile> tiles{first};
  for (const MatmulTile& t : tile_candidates(kernel))
    if (!(t == first)) tiles.push_back(t);
  return tiles;
}

int64_t token_bucket(int64_t n_tokens) {
  for (int64_t b : {64, 256, 1024})
    if (n_tokens <= b) return b;
  return 0;
}

std::string token_bucket_name(int64_t bucket) { return bucket == 0 ? ">1024" : cat("<=", bucket); }

std::string describe(const MatmulShapeClass& s) {
  return cat(model::type_name(s.type), " ", s.n, "x", s.k, " ", token_bucket_name(s.bucket), " tokens (",
             gemm_kernel_name(s.kernel), ")");
}

DeviceKey make_device_key(uint32_t vendor_id, uint32_t device_id, uint32_t driver_version,
                          std::span<const uint8_t> cache_uuid, std::string_view name) {
  DeviceKey key{vendor_id, device_id, driver_version, "", ""};
  for (uint8_t b : cache_uuid) {
    char buf[4];
    std::snprintf(buf, sizeof buf, "%02x", b);
    key.cache_uuid += buf;
  }
  name = name.substr(0, kMaxNameBytes);
  while (!name.empty() && (unsigned char)name.front() <= ' ') name.remove_prefix(1);
  while (!name.empty() && (unsigned char)name.back() <= ' ') name.remove_suffix(1);
  for (char c : name) key.name += (unsigned char)c < 0x20 || c == 0x7f ? '?' : c;
  if (key.name.empty()) key.name.push_back('?');
  return key;
}

// --- TuningCache ----------------------------------------------------------------------------------------------------

std::string TuningCache::path_in(const std::string& dir) { return dir.empty() ? "" : cat(dir, "/", kFileName); }

TuningCache TuningCache::parse(std::string_view text) {
  if (text.size() > kMaxFileBytes) fail("larger than ", kMaxFileBytes, " bytes");
  TuningCache cache;
  bool have_header = false;
  std::map<MatmulShapeClass, TunedEntry>* current = nullptr;
  size_t entries = 0, line_no = 0;
  for (std::string_view line : split(text, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > kMaxLineBytes) fail("line ", line_no, ": longer than ", kMaxLineBytes, " bytes");
    for (char c : line)
      if ((unsigned char)c < 0x20 && c != '\t') fail("line ", line_no, ": control character");
    const auto f = fields(line, 2);
    if (f.empty() || f[0][0] == '#') continue;
    if (!have_header) {
      const auto all = fields(line);
      if (all.size() != 2 || all[0] != kMagic || all[1] != std::to_string(kVersion))
        fail("line ", line_no, ": expected '", kMagic, " ", kVersion, "' (another format or version)");
      have_header = true;
      continue;
    }
    if (f[0] == "device") {
      std::string_view name;
      const auto d = fields(line, 5, &name);
      while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.remove_suffix(1);
      const auto vendor = d.size() == 5 ? parse_uint<uint32_t>(d[1], UINT32_MAX, 16) : std::nullopt;
      const auto device = d.size() == 5 ? parse_uint<uint32_t>(d[2], UINT32_MAX, 16) : std::nullopt;
      const auto driver = d.size() == 5 ? parse_uint<uint32_t>(d[3], UINT32_MAX, 16) : std::nullopt;
      if (!vendor || !device || !driver || d[4].size() != 32 || !is_hex(d[4]) || name.empty() ||
          name.size() > kMaxNameBytes)
        fail("line ", line_no, ": expected 'device VENDOR DEVICE DRIVER UUID NAME' (hex ids, 32 hex digits, a name)");
      if (cache.devices_.size() >= kMaxDevices) fail("more than ", kMaxDevices, " devices");
      current = &cache.devices_[DeviceKey{*vendor, *device, *driver, std::string(d[4]), std::string(name)}];
      continue;
    }
    const auto e = fields(line);
    if (e.size() != 8) fail("line ", line_no, ": expected 'KERNEL TYPE TOKENS N K TILE BEST_US DEFAULT_US'");
    if (!current) fail("line ", line_no, ": an entry before any 'device' line");
    MatmulShapeClass s;
    const auto kernel = gemm_kernel_from_name(e[0]);
    if (!kernel) fail("line ", line_no, ": unknown kernel '", e[0], "' (tiled or coopmat)");
    s.kernel = *kernel;
    const auto type = model::type_from_name(e[1]);
    if (!type) fail("line ", line_no, ": unknown weight type '", e[1], "'");
    s.type = *type;
    const auto m = parse_uint<int64_t>(e[2], kMaxTokens);
    if (!m || *m == 0) fail("line ", line_no, ": tokens '", e[2], "' must be 1..", kMaxTokens);
    s.bucket = token_bucket(*m);
    const auto n = parse_uint<int64_t>(e[3], kMaxDim), k = parse_uint<int64_t>(e[4], kMaxDim);
    if (!n || !k || *n == 0 || *k == 0) fail("line ", line_no, ": N and K must be 1..", kMaxDim);
    s.n = *n;
    s.k = *k;
    const auto tile = parse_tile(s.kernel, e[5]);
    if (!tile) fail("line ", line_no, ": '", e[5], "' is not a ", gemm_kernel_name(s.kernel), " tile");
    const auto best = parse_microseconds(e[6]), dflt = parse_microseconds(e[7]);
    if (!best || !dflt) fail("line ", line_no, ": times must be microseconds from 0 to ", kMaxMicroseconds);
    if (++entries > kMaxEntries) fail("more than ", kMaxEntries, " entries");
    (*current)[s] = TunedEntry{*tile, *m, *best, *dflt};
  }
  if (!have_header) fail("no '", kMagic, "' header");
  return cache;
}

TuningCache TuningCache::load(const std::string& path, std::string& warning) {
  warning.clear();
  if (path.empty()) return {};
  std::error_code ec;
  if (!fs::exists(path, ec)) return {};
  const auto size = fs::file_size(path, ec);
  if (ec || size > kMaxFileBytes) {
    warning = cat("ignoring the matmul tuning cache ", path, ": ", ec ? ec.message() : "larger than 1 MiB",
                  " (re-run greta-vk tune)");
    return {};
  }
  std::ifstream in(path, std::ios::binary);
  std::string text(size_t(size), '\0');
  if (!in.read(text.data(), std::streamsize(text.size()))) {
    warning = cat("ignoring the matmul tuning cache ", path, ": could not read it (re-run greta-vk tune)");
    return {};
  }
  try {
    return parse(text);
  } catch (const Error& e) {
    warning = cat("ignoring the matmul tuning cache ", path, ": ", e.what(), " (re-run greta-vk tune)");
    return {};
  }
}

std::string TuningCache::to_text() const {
  std::ostringstream out;
  out << "# Tuned tiles of GRETA's Vulkan prefill matmul kernels, written by `greta-vk tune`; safe to delete.\n"
      << "# device VENDOR DEVICE DRIVER PIPELINE-CACHE-UUID NAME, then per shape class of that device:\n"
      << "# KERNEL TYPE TOKENS N K TILE BEST_US DEFAULT_US (TOKENS: the batch timed; the entry serves its\n"
      << "# bucket: <=64, <=256, <=1024 or more tokens)\n"
      << kMagic << " " << kVersion << "\n";
  for (const auto& [device, entries] : devices_) {
    out << "device " << hex32(device.vendor_id) << " " << hex32(device.device_id) << " "
        << hex32(device.driver_version) << " " << device.cache_uuid << " " << device.name << "\n";
    for (const auto& [s, e] : entries)
      out << gemm_kernel_name(s.kernel) << " " << model::type_name(s.type) << " "
          << e.m << " " << s.n << " " << s.k << " "
          << tile_name(s.kernel, e.tile) << " " << microseconds(e.best_us) << " " << microseconds(e.default_us)
          << "\n";
  }
  return out.str();
}

void TuningCache::save(const std::string& path) const {
  GRETA_CHECK(!path.empty());
  std::error_code ec;
  const fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  if (ec) fail("could not create the cache directory ", p.parent_path().string(), ": ", ec.message());
  // A temporary file renamed over the old one: a concurrent reader never sees half a file.
  const std::string tmp = cat(path, ".tmp", getpid());
  const std::string text = to_text();
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out || !out.write(text.data(), std::streamsize(text.size())) || !out.flush()) {
      fs::remove(tmp, ec);
      fail("could not write the matmul tuning cache ", tmp);
    }
  }
  fs::rename(tmp, p, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    fail("could not write the matmul tuning cache ", path, ": ", ec.message());
  }
}

const TunedEntry* TuningCache::find(const DeviceKey& device, const MatmulShapeClass& shape) const {
  const auto d = devices_.find(device);
  if (d == devices_.end()) return nullptr;
  const auto e = d->second.find(shape);
  return e == d->second.end() ? nullptr : &e->second;
}

void TuningCache::set(const DeviceKey& device, const MatmulShapeClass& shape, const TunedEntry& entry) {
  GRETA_CHECK(entry.m > 0 && token_bucket(entry.m) == shape.bucket, "entry of ", entry.m, " tokens");
  devices_[device][shape] = entry;
}

const std::map<MatmulShapeClass, TunedEntry>* TuningCache::entries(const DeviceKey& device) const {
  const auto d = devices_.find(device);
  return d == devices_.end() ? nullptr : &d->second;
}

size_t TuningCache::size() const {
  size_t n = 0;
  for (const auto& [device, entries] : devices_) n += entries.size();
  return n;
}

}  // namespace greta::vk
