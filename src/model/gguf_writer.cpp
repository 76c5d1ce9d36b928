#include "model/gguf_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace greta::model {

namespace {
constexpr uint64_t k_default_alignment = 32;

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

size_t element_size(GgufType t) {
  switch (t) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
    case GgufType::UINT16: case GgufType::INT16: return 2;
    case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
    case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
    default: return 0;
  }
}

template <class T>
void append_le(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian host
  out.insert(out.end(), b, b + sizeof(T));
}
}  // namespace

GgufWriter::GgufWriter(uint64_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) fail("GGUF alignment ", alignment, " is not a power of two");
  if (alignment != k_default_alignment) add_uint32("general.alignment", static_cast<uint32_t>(alignment));
}

template <class T>
void GgufWriter::put(T v) {
  append_le(kv_bytes_, v);
}

void GgufWriter::put_string(std::string_view s) {
  put<uint64_t>(s.size());
  kv_bytes_.insert(kv_bytes_.end(), s.begin(), s.end());
}

void GgufWriter::begin_kv(std::string_view key, GgufType type) {
  if (key.empty()) fail("GGUF writer: empty metadata key");
  if (!keys_.emplace(key).second) fail("GGUF writer: duplicate metadata key '", key, "'");
  put_string(key);
  put<uint32_t>(static_cast<uint32_t>(type));
  ++n_kv_;
}

void GgufWriter::add_uint8(std::string_view k, uint8_t v) { begin_kv(k, GgufType::UINT8); put(v); }
void GgufWriter::add_int8(std::string_view k, int8_t v) { begin_kv(k, GgufType::INT8); put(v); }
void GgufWriter::add_uint16(std::string_view k, uint16_t v) { begin_kv(k, GgufType::UINT16); put(v); }
void GgufWriter::add_int16(std::string_view k, int16_t v) { begin_kv(k, GgufType::INT16); put(v); }
void GgufWriter::add_uint32(std::string_view k, uint32_t v) { begin_kv(k, GgufType::UINT32); put(v); }
void GgufWriter::add_int32(std::string_view k, int32_t v) { begin_kv(k, GgufType::INT32); put(v); }
void GgufWriter::add_uint64(std::string_view k, uint64_t v) { begin_kv(k, GgufType::UINT64); put(v); }
void GgufWriter::add_int64(std::string_view k, int64_t v) { begin_kv(k, GgufType::INT64); put(v); }
void GgufWriter::add_float32(std::string_view k, float v) { begin_kv(k, GgufType::FLOAT32); put(v); }
void GgufWriter::add_float64(std::string_view k, double v) { begin_kv(k, GgufType::FLOAT64); put(v); }
void GgufWriter::add_bool(std::string_view k, bool v) { begin_kv(k, GgufType::BOOL); put<uint8_t>(v ? 1 : 0); }
void GgufWriter::add_string(std::string_view k, std::string_view v) { begin_kv(k, GgufType::STRING); put_string(v); }

void GgufWriter::add_string_array(std::string_view key, std::span<const std::string_view> v) {
  begin_kv(key, GgufType::ARRAY);
  put<uint32_t>(static_cast<uint32_t>(GgufType::STRING));
  put<uint64_t>(v.size());
  for (auto s : v) put_string(s);
}

void GgufWriter::add_string_array(std::string_view key, std::span<const std::string> v) {
  std::vector<std::string_view> views(v.begin(), v.end());
  add_string_array(key, std::span<const std::string_view>(views));
}

void GgufWriter::add_float32_array(std::string_view key, std::span<const float> v) {
  add_array(key, GgufType::FLOAT32, v.size(), v.data());
}

void GgufWriter::add_int32_array(std::string_view key, std::span<const int32_t> v) {
  add_array(key, GgufType::INT32, v.size(), v.data());
}

void GgufWriter::add_array(std::string_view key, GgufType element_type, uint64_t count, const void* data) {
  size_t elem = element_size(element_type);
  if (elem == 0) fail("GGUF writer: key '", key, "': add_array takes fixed-size elements, not ", gguf_type_name(element_type));
  begin_kv(key, GgufType::ARRAY);
  put<uint32_t>(static_cast<uint32_t>(element_type));
  put<uint64_t>(count);
  const uint8_t* p = static_cast<const uint8_t*>(data);
  kv_bytes_.insert(kv_bytes_.end(), p, p + count * elem);
}

void GgufWriter::copy_kv(const GgufKv& kv) {
  const GgufValue& v = kv.value;
  switch (v.type) {
    case GgufType::UINT8: add_uint8(kv.key, static_cast<uint8_t>(v.u)); break;
    case GgufType::INT8: add_int8(kv.key, static_cast<int8_t>(v.i)); break;
    case GgufType::UINT16: add_uint16(kv.key, static_cast<uint16_t>(v.u)); break;
    case GgufType::INT16: add_int16(kv.key, static_cast<int16_t>(v.i)); break;
    case GgufType::UINT32: add_uint32(kv.key, static_cast<uint32_t>(v.u)); break;
    case GgufType::INT32: add_int32(kv.key, static_cast<int32_t>(v.i)); break;
    case GgufType::UINT64: add_uint64(kv.key, v.u); break;
    case GgufType::INT64: add_int64(kv.key, v.i); break;
    case GgufType::FLOAT32: add_float32(kv.key, static_cast<float>(v.f)); break;
    case GgufType::FLOAT64: add_float64(kv.key, v.f); break;
    case GgufType::BOOL: add_bool(kv.key, v.b); break;
    case GgufType::STRING: add_string(kv.key, v.str); break;
    case GgufType::ARRAY:
      if (v.array_type == GgufType::STRING)
        add_string_array(kv.key, std::span<const std::string_view>(v.array_strings));
      else
        add_array(kv.key, v.array_type, v.array_count, v.array_data);
      break;
  }
}

size_t GgufWriter::add_tensor(std::string_view name, std::vector<uint64_t> dims, GgmlType type) {
  if (name.empty()) fail("GGUF writer: empty tensor name");
  if (tensor_names_.count(std::string(name))) fail("GGUF writer: duplicate tensor name '", name, "'");
  if (dims.empty() || dims.size() > 4) fail("GGUF writer: tensor '", name, "' needs 1..4 dimensions");
  uint64_t n = 1;
  for (uint64_t d : dims) {
    if (d == 0) fail("GGUF writer: tensor '", name, "' has a zero dimension");
    if (__builtin_mul_overflow(n, d, &n)) fail("GGUF writer: tensor '", name, "' element count overflows");
  }
  const TypeTraits& tr = traits(type);
  if (dims[0] % tr.block_elems != 0)
    fail("GGUF writer: tensor '", name, "' row length ", dims[0], " is not a multiple of the ", tr.name,
         " block size ", tr.block_elems);
  tensor_names_.emplace(name);
  TensorInfo ti{std::string(name), std::move(dims), type, data_size_, n / tr.block_elems * tr.block_bytes};
  data_size_ = align_up(ti.offset + ti.n_bytes, alignment_);
  tensors_.push_back(std::move(ti));
  return tensors_.size() - 1;
}

std::vector<uint8_t> GgufWriter::header() const {
  std::vector<uint8_t> out;
  out.insert(out.end(), {'G', 'G', 'U', 'F'});
  append_le<uint32_t>(out, 3);
  append_le<uint64_t>(out, tensors_.size());
  append_le<uint64_t>(out, n_kv_);
  out.insert(out.end(), kv_bytes_.begin(), kv_bytes_.end());
  for (const auto& t : tensors_) {
    append_le<uint64_t>(out, t.name.size());
    out.insert(out.end(), t.name.begin(), t.name.end());
    append_le<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) append_le<uint64_t>(out, d);
    append_le<uint32_t>(out, static_cast<uint32_t>(t.type));
    append_le<uint64_t>(out, t.offset);
  }
  out.resize(align_up(out.size(), alignment_), 0);
  return out;
}

uint64_t GgufWriter::file_size() const { return header().size() + data_size_; }

std::vector<uint8_t> GgufWriter::to_bytes(const std::vector<std::vector<uint8_t>>& data) const {
  if (data.size() != tensors_.size())
    fail("GGUF writer: ", data.size(), " tensor buffers given for ", tensors_.size(), " tensors");
  std::vector<uint8_t> out = header();
  uint64_t base = out.size();
  out.resize(base + data_size_, 0);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (data[i].size() != tensors_[i].n_bytes)
      fail("GGUF writer: tensor '", tensors_[i].name, "' needs ", tensors_[i].n_bytes, " bytes, got ", data[i].size());
    std::memcpy(out.data() + base + tensors_[i].offset, data[i].data(), data[i].size());
  }
  return out;
}

void GgufWriter::write_file(const std::string& path, const std::vector<std::vector<uint8_t>>& data) const {
  GgufStreamWriter w(path, *this);
  for (const auto& d : data) w.write(d.data(), d.size());
  w.finish();
}

// ---- GgufStreamWriter ----

GgufStreamWriter::GgufStreamWriter(const std::string& path, const GgufWriter& layout)
    : path_(path), part_path_(path + ".part"), layout_(layout) {
  file_ = std::fopen(part_path_.c_str(), "wb");
  if (!file_) fail(part_path_, ": cannot create: ", std::strerror(errno));
  std::vector<uint8_t> h = layout_.header();
  raw_write(h.data(), h.size());
}

GgufStreamWriter::~GgufStreamWriter() {
  if (file_) std::fclose(file_);
  if (!finished_) std::remove(part_path_.c_str());
}

void GgufStreamWriter::raw_write(const void* data, size_t n) {
  if (n && std::fwrite(data, 1, n, file_) != n) fail(part_path_, ": write failed: ", std::strerror(errno));
}

void GgufStreamWriter::pad_to(uint64_t data_offset) {
  static constexpr uint8_t zeros[256] = {};
  while (written_ < data_offset) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof(zeros), data_offset - written_));
    raw_write(zeros, n);
    written_ += n;
  }
}

void GgufStreamWriter::write(const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    if (tensor_ >= layout_.tensor_count()) fail(path_, ": more tensor data written than the layout holds");
    uint64_t start = layout_.tensor_offset(tensor_);
    uint64_t end = start + layout_.tensor_bytes(tensor_);
    pad_to(start);
    size_t take = static_cast<size_t>(std::min<uint64_t>(n, end - written_));
    raw_write(p, take);
    written_ += take;
    p += take;
    n -= take;
    if (written_ == end) ++tensor_;
  }
}

void GgufStreamWriter::finish() {
  if (tensor_ != layout_.tensor_count())
    fail(path_, ": tensor '", layout_.tensor_name(tensor_), "' was not completely written");
  pad_to(layout_.data_size());
  if (std::fflush(file_) != 0) fail(part_path_, ": write failed: ", std::strerror(errno));
  int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) fail(part_path_, ": close failed: ", std::strerror(errno));
  if (std::rename(part_path_.c_str(), path_.c_str()) != 0)
    fail(path_, ": cannot rename from ", part_path_, ": ", std::strerror(errno));
  finished_ = true;
}

}  // namespace greta::model
