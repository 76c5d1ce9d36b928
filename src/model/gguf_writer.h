// GGUF v3 writer: metadata of every type (arrays of strings included) and tensors laid out at aligned offsets.
// GgufWriter describes a file (metadata + tensor infos, which fix every offset); the tensor bytes are then either
// given all at once (to_bytes / write_file: tests, small files) or streamed in order through GgufStreamWriter, which
// never holds more than what the caller passes (the synthetic 7B models are many GiB).
#pragma once
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "model/gguf.h"
#include "model/tensor_types.h"

namespace greta::model {

class GgufWriter {
public:
  // alignment: a power of two; written as general.alignment when it differs from GGUF's default of 32.
  explicit GgufWriter(uint64_t alignment = 32);

  // ---- metadata (kept in insertion order; a duplicate key throws greta::Error) ----
  void add_uint8(std::string_view key, uint8_t v);
  void add_int8(std::string_view key, int8_t v);
  void add_uint16(std::string_view key, uint16_t v);
  void add_int16(std::string_view key, int16_t v);
  void add_uint32(std::string_view key, uint32_t v);
  void add_int32(std::string_view key, int32_t v);
  void add_uint64(std::string_view key, uint64_t v);
  void add_int64(std::string_view key, int64_t v);
  void add_float32(std::string_view key, float v);
  void add_float64(std::string_view key, double v);
  void add_bool(std::string_view key, bool v);
  void add_string(std::string_view key, std::string_view v);
  void add_string_array(std::string_view key, std::span<const std::string_view> v);
  void add_string_array(std::string_view key, std::span<const std::string> v);
  void add_float32_array(std::string_view key, std::span<const float> v);
  void add_int32_array(std::string_view key, std::span<const int32_t> v);
  // Array of fixed-size elements given as raw little-endian bytes (count * element size).
  void add_array(std::string_view key, GgufType element_type, uint64_t count, const void* data);
  // Copies one entry of a file being read (any type, arrays included), e.g. the tokenizer of another model.
  void copy_kv(const GgufKv& kv);
  bool has_key(std::string_view key) const { return keys_.count(std::string(key)) != 0; }

  // ---- tensors: offsets are assigned in the order added; returns the tensor's index ----
  // dims in ggml order (dims[0] = row length, a multiple of the type's block size); 1 to 4 dims, each >= 1.
  size_t add_tensor(std::string_view name, std::vector<uint64_t> dims, GgmlType type);
  size_t tensor_count() const { return tensors_.size(); }
  uint64_t tensor_bytes(size_t index) const { return tensors_.at(index).n_bytes; }
  uint64_t tensor_offset(size_t index) const { return tensors_.at(index).offset; }  // within the data section
  const std::string& tensor_name(size_t index) const { return tensors_.at(index).name; }
  uint64_t alignment() const { return alignment_; }

  // Everything before the data section: header, metadata, tensor infos, padding to the alignment.
  std::vector<uint8_t> header() const;
  // Size of the data section and of the whole file.
  uint64_t data_size() const { return data_size_; }
  uint64_t file_size() const;

  // Whole file in memory; data[i] holds tensor i's bytes (exactly tensor_bytes(i)).
  std::vector<uint8_t> to_bytes(const std::vector<std::vector<uint8_t>>& data) const;
  void write_file(const std::string& path, const std::vector<std::vector<uint8_t>>& data) const;

private:
  struct TensorInfo {
    std::string name;
    std::vector<uint64_t> dims;
    GgmlType type;
    uint64_t offset;
    uint64_t n_bytes;
  };
  void begin_kv(std::string_view key, GgufType type);
  template <class T>
  void put(T v);
  void put_string(std::string_view s);

  uint64_t alignment_;
  std::vector<uint8_t> kv_bytes_;  // serialized metadata entries
  uint64_t n_kv_ = 0;
  std::unordered_set<std::string> keys_;
  std::unordered_set<std::string> tensor_names_;
  std::vector<TensorInfo> tensors_;
  uint64_t data_size_ = 0;  // end of the last tensor, padded to the alignment
};

// Streams a GgufWriter's tensor data to a file: the header goes out on construction, then write() appends the bytes
// of tensor 0, 1, ... in order (any chunk size; padding between tensors is inserted automatically). The file is
// written as PATH.part and renamed to PATH by finish(), so an interrupted run leaves no truncated model behind.
class GgufStreamWriter {
public:
  GgufStreamWriter(const std::string& path, const GgufWriter& layout);
  GgufStreamWriter(const GgufStreamWriter&) = delete;
  GgufStreamWriter& operator=(const GgufStreamWriter&) = delete;
  ~GgufStreamWriter();  // without finish(): closes and deletes the partial file

  void write(const void* data, size_t n);
  size_t current_tensor() const { return tensor_; }  // index of the tensor the next byte belongs to
  // Checks every tensor was written completely, flushes and renames into place.
  void finish();

private:
  void raw_write(const void* data, size_t n);
  void pad_to(uint64_t data_offset);

  std::string path_, part_path_;
  const GgufWriter& layout_;
  std::FILE* file_ = nullptr;
  size_t tensor_ = 0;        // current tensor
  uint64_t written_ = 0;     // bytes written into the data section so far
  bool finished_ = false;
};

}  // namespace greta::model
