// GGUF v2/v3 reader: memory-maps a file (or takes bytes in memory), validates every count, length, type, dimension
// and offset against the file before anything is sized by it, and exposes metadata and tensors as views into the
// mapping. Any violation throws greta::Error with one line: "FILE: PROBLEM at offset N".
//
// File layout (little-endian):
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv            (v1 used u32 counts: rejected)
//   n_kv x  { string key | u32 value_type | value }                  string = u64 len + bytes (not NUL-terminated)
//   n_tensors x { string name | u32 n_dims | u64 dims[n_dims] | u32 ggml_type | u64 offset }
//   padding to general.alignment (default 32) | tensor data (offsets relative to this point, each aligned)
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/tensor_types.h"

namespace greta::model {

enum class GgufType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* gguf_type_name(GgufType t);

// One metadata value. Scalars are decoded; strings and arrays are views into the mapped file.
struct GgufValue {
  GgufType type = GgufType::UINT8;
  // scalar payloads (the one matching `type` is set; integers also mirror into the other integer field when exact)
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string_view str;             // STRING
  GgufType array_type = GgufType::UINT8;  // ARRAY: element type (arrays of arrays are rejected)
  uint64_t array_count = 0;         // ARRAY: element count (validated against the file size)
  const uint8_t* array_data = nullptr;  // ARRAY of fixed-size elements: raw little-endian elements
  std::vector<std::string_view> array_strings;  // ARRAY of STRING: every element, validated
};

struct GgufKv {
  std::string_view key;
  GgufValue value;
  uint64_t file_offset;  // where the key starts (for error messages)
};

struct GgufTensor {
  std::string_view name;
  std::vector<uint64_t> dims;  // ggml order: dims[0] is the fastest-varying (row length)
  GgmlType type;
  uint64_t offset;             // relative to the data section
  uint64_t n_elements;
  uint64_t n_bytes;
  const uint8_t* data;         // into the mapping
  // rows x row_length view (row_length = dims[0]; rows = product of the rest)
  uint64_t row_length() const { return dims.empty() ? 1 : dims[0]; }
  uint64_t rows() const { return dims.empty() ? 1 : n_elements / dims[0]; }
};

// Gives back the whole pages inside [data, data + bytes) of a read-only file mapping (madvise MADV_DONTNEED): they leave
// the process's resident memory and are read from the file again if touched. For backends that copied weights into
// memory of their own (on an integrated GPU, the same RAM), so that loading does not hold the model twice. Only for
// ranges of a GgufFile whose file_mapped() is true; anything else would lose its contents.
void release_mapped_pages(const void* data, uint64_t bytes);

class GgufFile {
public:
  // Memory-maps and validates. Files ending in ".xz" are decompressed into memory first (vocabulary-only fixtures).
  static GgufFile open(const std::string& path);
  // Validates bytes already in memory; `name` is used in error messages. (Tests and the fuzzer.)
  static GgufFile from_memory(std::vector<uint8_t> bytes, std::string name);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& path() const;
  uint32_t version() const;
  uint64_t alignment() const;
  uint64_t data_offset() const;  // absolute offset of the tensor data section
  uint64_t file_size() const;

  const std::vector<GgufKv>& metadata() const;
  const GgufValue* find(std::string_view key) const;

  // Typed lookups: nullopt when absent; throw Error naming the key when present with an incompatible type.
  std::optional<uint64_t> get_uint(std::string_view key) const;   // any non-negative integer type
  std::optional<int64_t> get_int(std::string_view key) const;     // any integer type
  std::optional<double> get_float(std::string_view key) const;    // float32/64 or any integer
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string_view> get_string(std::string_view key) const;
  std::vector<std::string_view> get_string_array(std::string_view key) const;  // empty when absent
  std::vector<float> get_float_array(std::string_view key) const;             // empty when absent
  std::vector<int64_t> get_int_array(std::string_view key) const;             // empty when absent

  const std::vector<GgufTensor>& tensors() const;
  const GgufTensor* find_tensor(std::string_view name) const;
  // True when the tensor data is the memory-mapped file itself (open() of a plain file), whose pages the process may
  // give back (release_mapped_pages) and read again from the file; false for bytes held in memory.
  bool file_mapped() const;

private:
  struct Impl;
  explicit GgufFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace greta::model
