// GGUF reader. The parser walks the file once with a bounds-checked cursor; every count is compared with the bytes
// that remain before anything is allocated from it, so a hostile header can neither crash the reader nor make it
// allocate more than a small multiple of the file's own size.
#include "model/gguf.h"

#include <fcntl.h>
#include <lzma.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "core/error.h"

namespace greta::model {

namespace {

constexpr uint64_t k_default_alignment = 32;
constexpr uint64_t k_max_xz_output = uint64_t(1) << 30;  // vocabulary fixtures are a few MiB; 1 GiB is a hard bound
constexpr uint32_t k_max_dims = 4;                       // GGML_MAX_DIMS

// Smallest number of bytes one metadata entry / tensor info can occupy: used to reject counts that the rest of the
// file cannot possibly hold, before any container is sized from them.
constexpr uint64_t k_min_kv_bytes = 8 + 1 + 4 + 1;              // key length, 1-byte key, type, 1-byte value
constexpr uint64_t k_min_tensor_info_bytes = 8 + 1 + 4 + 8 + 4 + 8;  // name length, name, n_dims, 1 dim, type, offset

// ggml type ids GRETA does not read, for error messages ("type id 16 (iq2_xxs)").
const char* ggml_type_name_for_id(uint32_t id) {
  static constexpr const char* names[] = {
      "f32",     "f16",     "q4_0",   "q4_1",   "q4_2 (removed)", "q4_3 (removed)", "q5_0", "q5_1",
      "q8_0",    "q8_1",    "q2_K",   "q3_K",   "q4_K",           "q5_K",           "q6_K", "q8_K",
      "iq2_xxs", "iq2_xs",  "iq3_xxs", "iq1_s", "iq4_nl",         "iq3_s",          "iq2_s", "iq4_xs",
      "i8",      "i16",     "i32",    "i64",    "f64",            "iq1_m",          "bf16", "q4_0_4_4 (removed)",
      "q4_0_4_8 (removed)", "q4_0_8_8 (removed)", "tq1_0", "tq2_0", "iq4_nl_4_4 (removed)", "iq4_nl_4_8 (removed)",
      "iq4_nl_8_8 (removed)", "mxfp4"};
  return id < std::size(names) ? names[id] : "not a ggml type";
}

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
    case GgufType::UINT16: case GgufType::INT16: return 2;
    case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
    case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
    default: return 0;  // STRING, ARRAY: variable size
  }
}

bool is_integer(GgufType t) {
  switch (t) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::UINT16: case GgufType::INT16:
    case GgufType::UINT32: case GgufType::INT32: case GgufType::UINT64: case GgufType::INT64: return true;
    default: return false;
  }
}

template <class T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // GGUF is little-endian, as is every host GRETA targets
  return v;
}

// Decodes one fixed-size scalar into a GgufValue (integers mirror into u/i where the value fits).
void decode_scalar(GgufType t, const uint8_t* p, GgufValue& v) {
  auto set_signed = [&](int64_t x) {
    v.i = x;
    if (x >= 0) v.u = static_cast<uint64_t>(x);
    v.f = static_cast<double>(x);
  };
  auto set_unsigned = [&](uint64_t x) {
    v.u = x;
    if (x <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) v.i = static_cast<int64_t>(x);
    v.f = static_cast<double>(x);
  };
  switch (t) {
    case GgufType::UINT8: set_unsigned(load_le<uint8_t>(p)); break;
    case GgufType::INT8: set_signed(load_le<int8_t>(p)); break;
    case GgufType::UINT16: set_unsigned(load_le<uint16_t>(p)); break;
    case GgufType::INT16: set_signed(load_le<int16_t>(p)); break;
    case GgufType::UINT32: set_unsigned(load_le<uint32_t>(p)); break;
    case GgufType::INT32: set_signed(load_le<int32_t>(p)); break;
    case GgufType::UINT64: set_unsigned(load_le<uint64_t>(p)); break;
    case GgufType::INT64: set_signed(load_le<int64_t>(p)); break;
    case GgufType::FLOAT32: v.f = load_le<float>(p); break;
    case GgufType::FLOAT64: v.f = load_le<double>(p); break;
    case GgufType::BOOL: v.b = p[0] != 0; v.u = p[0]; v.i = p[0]; break;
    default: break;
  }
}

// Read-only private mapping of a whole file; unmapped on destruction.
class MappedFile {
public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (data_) ::munmap(data_, size_);
  }
  void map(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int e = errno;
      ::close(fd);
      fail(path, ": cannot stat: ", std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      fail(path, ": not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ == 0) {
      ::close(fd);
      fail(path, ": empty file, not GGUF at offset 0");
    }
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    ::close(fd);  // the mapping keeps the file alive
    if (p == MAP_FAILED) fail(path, ": cannot map ", format_bytes(double(size_)), ": ", std::strerror(e));
    data_ = p;
  }
  const uint8_t* data() const { return static_cast<const uint8_t*>(data_); }
  uint64_t size() const { return size_; }

private:
  void* data_ = nullptr;
  uint64_t size_ = 0;
};

std::vector<uint8_t> read_whole_file(const std::string& path, uint64_t max_bytes) {
  MappedFile m;
  m.map(path);
  if (m.size() > max_bytes) fail(path, ": file larger than ", format_bytes(double(max_bytes)));
  return std::vector<uint8_t>(m.data(), m.data() + m.size());
}

// Decompresses an .xz file into memory, refusing output beyond `max_out` bytes.
std::vector<uint8_t> decompress_xz(const std::string& path, uint64_t max_out) {
  std::vector<uint8_t> in = read_whole_file(path, max_out);
  lzma_stream strm = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&strm, uint64_t(512) << 20, LZMA_CONCATENATED) != LZMA_OK)
    fail(path, ": cannot initialise the xz decoder");
  struct Guard {
    lzma_stream* s;
    ~Guard() { lzma_end(s); }
  } guard{&strm};
  std::vector<uint8_t> out;
  size_t chunk = std::max<size_t>(in.size() * 4, 1 << 16);
  strm.next_in = in.data();
  strm.avail_in = in.size();
  lzma_action action = LZMA_FINISH;  // all input is present
  for (;;) {
    if (strm.avail_out == 0) {
      if (out.size() >= max_out) fail(path, ": decompressed size exceeds ", format_bytes(double(max_out)));
      size_t old = out.size();
      size_t grow = std::min<uint64_t>(std::max(chunk, old), max_out - old);
      out.resize(old + grow);
      strm.next_out = out.data() + old;
      strm.avail_out = grow;
    }
    lzma_ret r = lzma_code(&strm, action);
    if (r == LZMA_STREAM_END) break;
    if (r != LZMA_OK) fail(path, ": xz decompression failed (lzma error ", int(r), ") at offset ", strm.total_in);
  }
  out.resize(strm.total_out);
  return out;
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::UINT8: return "uint8";
    case GgufType::INT8: return "int8";
    case GgufType::UINT16: return "uint16";
    case GgufType::INT16: return "int16";
    case GgufType::UINT32: return "uint32";
    case GgufType::INT32: return "int32";
    case GgufType::FLOAT32: return "float32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::UINT64: return "uint64";
    case GgufType::INT64: return "int64";
    case GgufType::FLOAT64: return "float64";
  }
  return "unknown";
}

struct GgufFile::Impl {
  std::string path;
  MappedFile mapping;            // when opened from a file
  std::vector<uint8_t> owned;    // when given bytes (from_memory, decompressed .xz)
  const uint8_t* base = nullptr;
  uint64_t size = 0;
  uint32_t version = 0;
  uint64_t alignment = k_default_alignment;
  uint64_t data_offset = 0;
  std::vector<GgufKv> kvs;
  std::vector<GgufTensor> tensors;
  std::unordered_map<std::string_view, size_t> kv_index;
  std::unordered_map<std::string_view, size_t> tensor_index;

  void parse();
};

namespace {

// Bounds-checked reader over the file bytes. Every failure names the file and the offset of the offending field.
class Cursor {
public:
  Cursor(const std::string& name, const uint8_t* base, uint64_t size) : name_(name), base_(base), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  const uint8_t* at(uint64_t off) const { return base_ + off; }

  template <class... Args>
  [[noreturn]] void error_at(uint64_t offset, Args&&... args) const {
    fail(name_, ": ", std::forward<Args>(args)..., " at offset ", offset);
  }

  void need(uint64_t n, const char* what) const {
    if (n > remaining()) error_at(pos_, "truncated file: ", what, " needs ", n, " bytes, ", remaining(), " left");
  }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v = load_le<T>(base_ + pos_);
    pos_ += sizeof(T);
    return v;
  }
  std::string_view read_string(const char* what) {
    uint64_t start = pos_;
    uint64_t len = read<uint64_t>(what);
    if (len > remaining())
      error_at(start, what, " length ", len, " exceeds the ", remaining(), " bytes left in the file");
    std::string_view s(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return s;
  }
  void skip(uint64_t n, const char* what) {
    need(n, what);
    pos_ += n;
  }

private:
  const std::string& name_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

GgufType read_value_type(Cursor& c, const char* what) {
  uint64_t off = c.pos();
  uint32_t raw = c.read<uint32_t>(what);
  if (raw > static_cast<uint32_t>(GgufType::FLOAT64)) c.error_at(off, "unknown metadata value type ", raw);
  return static_cast<GgufType>(raw);
}

void read_value(Cursor& c, GgufType type, GgufValue& v, std::string_view key) {
  v.type = type;
  if (type == GgufType::STRING) {
    v.str = c.read_string("string value");
    return;
  }
  if (type != GgufType::ARRAY) {
    uint64_t off = c.pos();
    c.need(scalar_size(type), "metadata value");
    decode_scalar(type, c.at(off), v);
    if (type == GgufType::BOOL && *c.at(off) > 1)
      c.error_at(off, "bool value ", int(*c.at(off)), " of key '", key, "' is neither 0 nor 1");
    c.skip(scalar_size(type), "metadata value");
    return;
  }
  uint64_t type_off = c.pos();
  v.array_type = read_value_type(c, "array element type");
  if (v.array_type == GgufType::ARRAY) c.error_at(type_off, "nested array in key '", key, "' is not supported");
  uint64_t count_off = c.pos();
  v.array_count = c.read<uint64_t>("array length");
  if (v.array_type == GgufType::STRING) {
    // every string needs at least its 8-byte length
    if (v.array_count > c.remaining() / 8)
      c.error_at(count_off, "array length ", v.array_count, " of key '", key, "' exceeds the file size");
    v.array_strings.reserve(v.array_count);
    for (uint64_t i = 0; i < v.array_count; ++i) v.array_strings.push_back(c.read_string("array string"));
    return;
  }
  size_t elem = scalar_size(v.array_type);
  if (v.array_count > c.remaining() / elem)
    c.error_at(count_off, "array length ", v.array_count, " of key '", key, "' exceeds the file size");
  v.array_data = c.at(c.pos());
  if (v.array_type == GgufType::BOOL)
    for (uint64_t i = 0; i < v.array_count; ++i)
      if (v.array_data[i] > 1) c.error_at(c.pos() + i, "bool array element of key '", key, "' is neither 0 nor 1");
  c.skip(v.array_count * elem, "array data");
}

}  // namespace

void GgufFile::Impl::parse() {
  Cursor c(path, base, size);
  if (size < 4 || std::memcmp(base, "GGUF", 4) != 0) c.error_at(0, "not a GGUF file (bad magic)");
  c.skip(4, "magic");
  version = c.read<uint32_t>("version");
  if (version == 1) c.error_at(4, "GGUF version 1 is not supported (re-convert the model)");
  if (version != 2 && version != 3) {
    if ((version & 0xffff) == 0 && version != 0)
      c.error_at(4, "GGUF version ", version, " looks big-endian; only little-endian files are supported");
    c.error_at(4, "unsupported GGUF version ", version);
  }
  uint64_t n_tensors = c.read<uint64_t>("tensor count");
  uint64_t n_kv = c.read<uint64_t>("metadata count");
  if (n_tensors > c.remaining() / k_min_tensor_info_bytes)
    c.error_at(8, "tensor count ", n_tensors, " exceeds what the file size allows");
  if (n_kv > c.remaining() / k_min_kv_bytes) c.error_at(16, "metadata count ", n_kv, " exceeds what the file size allows");

  // ---- metadata ----
  for (uint64_t k = 0; k < n_kv; ++k) {
    GgufKv kv;
    kv.file_offset = c.pos();
    kv.key = c.read_string("key");
    if (kv.key.empty()) c.error_at(kv.file_offset, "empty metadata key");
    if (kv_index.count(kv.key)) c.error_at(kv.file_offset, "duplicate metadata key '", kv.key, "'");
    GgufType t = read_value_type(c, "value type");
    read_value(c, t, kv.value, kv.key);
    kv_index.emplace(kv.key, kvs.size());
    kvs.push_back(std::move(kv));
  }

  if (auto it = kv_index.find("general.alignment"); it != kv_index.end()) {
    const GgufKv& kv = kvs[it->second];
    const GgufValue& v = kv.value;
    if (!is_integer(v.type) || (v.type != GgufType::UINT64 && v.i < 0))
      c.error_at(kv.file_offset, "general.alignment must be an unsigned integer, not ", gguf_type_name(v.type));
    if (v.u == 0 || (v.u & (v.u - 1)) != 0)
      c.error_at(kv.file_offset, "general.alignment ", v.u, " is not a non-zero power of two");
    alignment = v.u;
  }

  // ---- tensor infos ----
  std::vector<uint64_t> info_offsets;
  for (uint64_t t = 0; t < n_tensors; ++t) {
    GgufTensor ti;
    uint64_t info_off = c.pos();
    ti.name = c.read_string("tensor name");
    if (ti.name.empty()) c.error_at(info_off, "empty tensor name");
    if (tensor_index.count(ti.name)) c.error_at(info_off, "duplicate tensor name '", ti.name, "'");
    uint64_t dims_off = c.pos();
    uint32_t n_dims = c.read<uint32_t>("tensor dimension count");
    if (n_dims == 0 || n_dims > k_max_dims)
      c.error_at(dims_off, "tensor '", ti.name, "' has ", n_dims, " dimensions (must be 1..", k_max_dims, ")");
    ti.dims.resize(n_dims);
    ti.n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t d_off = c.pos();
      uint64_t dim = c.read<uint64_t>("tensor dimension");
      if (dim == 0) c.error_at(d_off, "tensor '", ti.name, "' dimension ", d, " is zero");
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / ti.n_elements)
        c.error_at(d_off, "tensor '", ti.name, "' element count overflows");
      ti.dims[d] = dim;
      ti.n_elements *= dim;
    }
    uint64_t type_off = c.pos();
    uint32_t raw_type = c.read<uint32_t>("tensor type");
    auto tr = type_traits(raw_type);
    if (!tr)
      c.error_at(type_off, "tensor '", ti.name, "' has unknown or unsupported type id ", raw_type, " (",
                 ggml_type_name_for_id(raw_type), ")");
    ti.type = tr->type;
    if (ti.dims[0] % tr->block_elems != 0)
      c.error_at(dims_off, "tensor '", ti.name, "' row length ", ti.dims[0], " is not a multiple of the ", tr->name,
                 " block size ", tr->block_elems);
    uint64_t n_blocks = ti.n_elements / tr->block_elems;
    if (__builtin_mul_overflow(n_blocks, uint64_t(tr->block_bytes), &ti.n_bytes))
      c.error_at(dims_off, "tensor '", ti.name, "' byte size overflows");
    uint64_t off_off = c.pos();
    ti.offset = c.read<uint64_t>("tensor offset");
    if (ti.offset % alignment != 0)
      c.error_at(off_off, "tensor '", ti.name, "' offset ", ti.offset, " is not a multiple of the alignment ",
                 alignment);
    tensor_index.emplace(ti.name, tensors.size());
    tensors.push_back(std::move(ti));
    info_offsets.push_back(info_off);
  }

  // ---- data section: starts at the next multiple of the alignment ----
  uint64_t pad = (alignment - c.pos() % alignment) % alignment;
  if (tensors.empty()) {
    // vocabulary-only files may end without the padding; there is nothing to read there
    data_offset = pad <= c.remaining() ? c.pos() + pad : size;
    return;
  }
  if (pad > c.remaining())
    c.error_at(c.pos(), "truncated file: data section would start past the end (alignment ", alignment, ")");
  data_offset = c.pos() + pad;
  uint64_t data_size = size - data_offset;
  for (size_t i = 0; i < tensors.size(); ++i) {
    GgufTensor& ti = tensors[i];
    if (ti.offset > data_size || ti.n_bytes > data_size - ti.offset)
      c.error_at(info_offsets[i], "tensor '", ti.name, "' data [", ti.offset, ", +", ti.n_bytes,
                 ") extends past the end of the data section (", data_size, " bytes)");
    ti.data = base + data_offset + ti.offset;
  }
  // overlapping tensors: sort by offset and compare neighbours
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const GgufTensor& prev = tensors[order[k - 1]];
    const GgufTensor& cur = tensors[order[k]];
    if (cur.offset < prev.offset + prev.n_bytes)
      c.error_at(info_offsets[order[k]], "tensor '", cur.name, "' overlaps tensor '", prev.name, "'");
  }
}

GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::string& path) {
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".xz") == 0)
    return from_memory(decompress_xz(path, k_max_xz_output), path);
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->mapping.map(path);
  impl->base = impl->mapping.data();
  impl->size = impl->mapping.size();
  impl->parse();
  return GgufFile(std::move(impl));
}

GgufFile GgufFile::from_memory(std::vector<uint8_t> bytes, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->path = std::move(name);
  impl->owned = std::move(bytes);
  impl->base = impl->owned.data();
  impl->size = impl->owned.size();
  impl->parse();
  return GgufFile(std::move(impl));
}

const std::string& GgufFile::path() const { return impl_->path; }
uint32_t GgufFile::version() const { return impl_->version; }
uint64_t GgufFile::alignment() const { return impl_->alignment; }
uint64_t GgufFile::data_offset() const { return impl_->data_offset; }
uint64_t GgufFile::file_size() const { return impl_->size; }
const std::vector<GgufKv>& GgufFile::metadata() const { return impl_->kvs; }
const std::vector<GgufTensor>& GgufFile::tensors() const { return impl_->tensors; }

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = impl_->kv_index.find(key);
  return it == impl_->kv_index.end() ? nullptr : &impl_->kvs[it->second].value;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

bool GgufFile::file_mapped() const { return impl_->mapping.data() != nullptr; }

void release_mapped_pages(const void* data, uint64_t bytes) {
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uint64_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

namespace {
[[noreturn]] void type_mismatch(const std::string& path, std::string_view key, const GgufValue& v, const char* want) {
  std::string got = gguf_type_name(v.type);
  if (v.type == GgufType::ARRAY) got = cat("array of ", gguf_type_name(v.array_type));
  fail(path, ": metadata key '", key, "' is ", got, ", expected ", want);
}

bool is_signed_type(GgufType t) {
  return t == GgufType::INT8 || t == GgufType::INT16 || t == GgufType::INT32 || t == GgufType::INT64;
}

// Element i of a fixed-size array as int64 / double (the array was validated at parse time).
GgufValue array_element(const GgufValue& v, uint64_t i) {
  GgufValue e;
  e.type = v.array_type;
  decode_scalar(v.array_type, v.array_data + i * scalar_size(v.array_type), e);
  return e;
}
}  // namespace

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!is_integer(v->type) || (is_signed_type(v->type) && v->i < 0))
    type_mismatch(path(), key, *v, "a non-negative integer");
  return v->u;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!is_integer(v->type)) type_mismatch(path(), key, *v, "an integer");
  if (v->type == GgufType::UINT64 && v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(path(), ": metadata key '", key, "' value ", v->u, " does not fit in int64");
  return v->i;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::FLOAT32 && v->type != GgufType::FLOAT64 && !is_integer(v->type))
    type_mismatch(path(), key, *v, "a number");
  return v->f;
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::BOOL) type_mismatch(path(), key, *v, "a bool");
  return v->b;
}

std::optional<std::string_view> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::STRING) type_mismatch(path(), key, *v, "a string");
  return v->str;
}

std::vector<std::string_view> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  if (v->type != GgufType::ARRAY || v->array_type != GgufType::STRING) type_mismatch(path(), key, *v, "a string array");
  return v->array_strings;
}

std::vector<float> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  if (v->type != GgufType::ARRAY ||
      !(v->array_type == GgufType::FLOAT32 || v->array_type == GgufType::FLOAT64 || is_integer(v->array_type)))
    type_mismatch(path(), key, *v, "a numeric array");
  std::vector<float> out(v->array_count);
  for (uint64_t i = 0; i < v->array_count; ++i) out[i] = static_cast<float>(array_element(*v, i).f);
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  if (v->type != GgufType::ARRAY || !is_integer(v->array_type)) type_mismatch(path(), key, *v, "an integer array");
  std::vector<int64_t> out(v->array_count);
  for (uint64_t i = 0; i < v->array_count; ++i) {
    GgufValue e = array_element(*v, i);
    if (e.type == GgufType::UINT64 && e.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(path(), ": metadata key '", key, "' element ", i, " value ", e.u, " does not fit in int64");
    out[i] = e.i;
  }
  return out;
}

}  // namespace greta::model
