// Finds an architecture's tensors in a GGUF file, checks each against the shape the config implies, and adds it to
// the weight table every backend loads (engine/model.h). Shapes are given as [rows, cols], cols the row length
// (GGUF's dims[0]); a vector is rows = 1. Like llama.cpp, a file with tensors the architecture does not read is
// rejected (finish): they would belong to a feature the engine would otherwise silently ignore.
#pragma once
#include <cstdint>
#include <set>
#include <string>

#include "engine/model.h"

namespace greta::model {
class GgufFile;
struct GgufTensor;
}

namespace greta::engine::arch {

class WeightMapper {
public:
  WeightMapper(const model::GgufFile& file, ModelWeights& weights) : file_(file), weights_(weights) {}

  // A matrix [rows, cols] of any supported type; kNoWeight when absent and optional.
  WeightId matrix(const std::string& name, int64_t rows, int64_t cols, bool required = true);
  // An F32 vector (norm weights, biases, rope factors, sinks) of `n` elements.
  WeightId vector(const std::string& name, int64_t n, bool required = true);
  // An F32 matrix [rows, cols] of per-expert vectors (expert biases: GGUF [cols, rows]).
  WeightId vectors(const std::string& name, int64_t rows, int64_t cols, bool required = true);
  // A 3-D expert tensor, GGUF [cols, rows, n_experts], as one matrix of n_experts * rows rows (expert e's row r is
  // row e * rows + r).
  WeightId experts(const std::string& name, int64_t n_experts, int64_t rows, int64_t cols);
  // Rows [first, first + count) of a [total_rows, cols] matrix as a weight of its own (fused tensors: phi3's
  // attn_qkv and gate/up): the bytes are the file's, nothing is copied.
  WeightId row_slice(const std::string& name, int64_t total_rows, int64_t cols, int64_t first, int64_t count,
                     const char* part);

  // Throws for any tensor of the file that no call above read.
  void finish() const;

private:
  enum class Kind { Matrix, Vector };
  // The tensor, checked (shape, type, block size) and marked used; nullptr when absent and optional.
  const model::GgufTensor* check(const std::string& name, std::initializer_list<int64_t> dims, Kind kind,
                                 bool required);
  WeightId add(const std::string& name, std::initializer_list<int64_t> dims, Kind kind, bool required);
  const model::GgufFile& file_;
  ModelWeights& weights_;
  std::set<std::string> used_;
};

}  // namespace greta::engine::arch
