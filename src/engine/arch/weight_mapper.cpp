#include "engine/arch/weight_mapper.h"

#include <vector>

#include "core/error.h"
#include "model/gguf.h"

namespace greta::engine::arch {

namespace {

std::string dims_string(const std::vector<uint64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += cat(i ? ", " : "", d[i]);
  return s + "]";
}

}  // namespace

const model::GgufTensor* WeightMapper::check(const std::string& name, std::initializer_list<int64_t> dims_list,
                                             Kind kind, bool required) {
  std::vector<uint64_t> dims;
  for (int64_t d : dims_list) dims.push_back(uint64_t(d));
  const model::GgufTensor* t = file_.find_tensor(name);
  if (!t) {
    if (required) fail(file_.path(), ": missing tensor '", name, "' (expected shape ", dims_string(dims), ")");
    return nullptr;
  }
  used_.insert(name);
  if (t->dims != dims)
    fail(file_.path(), ": tensor '", name, "' has shape ", dims_string(t->dims), ", the metadata implies ",
         dims_string(dims));
  const auto& tr = model::traits(t->type);
  if (!tr.supported) fail(file_.path(), ": tensor '", name, "' has type ", tr.name, ", which GRETA does not support");
  if (kind == Kind::Vector && t->type != model::GgmlType::F32)
    fail(file_.path(), ": tensor '", name, "' (a norm, bias or factor vector) must be f32, not ", tr.name);
  if (dims[0] % tr.block_elems != 0)
    fail(file_.path(), ": tensor '", name, "' row length ", dims[0], " is not a multiple of the ", tr.name,
         " block size ", tr.block_elems);
  return t;
}

WeightId WeightMapper::add(const std::string& name, std::initializer_list<int64_t> dims, Kind kind, bool required) {
  const model::GgufTensor* t = check(name, dims, kind, required);
  if (!t) return kNoWeight;
  const int64_t cols = int64_t(t->dims[0]);
  int64_t rows = 1;
  for (size_t i = 1; i < t->dims.size(); ++i) rows *= int64_t(t->dims[i]);
  WeightDesc desc;
  desc.name = name;
  desc.type = t->type;
  desc.rows = rows;
  desc.cols = cols;
  desc.data = t->data;
  desc.bytes = t->n_bytes;
  if (file_.file_mapped()) desc.release = &model::release_mapped_pages;
  GRETA_CHECK(desc.bytes == model::row_bytes(t->type, uint64_t(cols)) * uint64_t(rows), name);
  weights_.table.push_back(std::move(desc));
  return WeightId(weights_.table.size() - 1);
}

WeightId WeightMapper::matrix(const std::string& name, int64_t rows, int64_t cols, bool required) {
  return add(name, {cols, rows}, Kind::Matrix, required);
}

WeightId WeightMapper::vector(const std::string& name, int64_t n, bool required) {
  return add(name, {n}, Kind::Vector, required);
}

WeightId WeightMapper::vectors(const std::string& name, int64_t rows, int64_t cols, bool required) {
  return add(name, {cols, rows}, Kind::Vector, required);
}

WeightId WeightMapper::experts(const std::string& name, int64_t n_experts, int64_t rows, int64_t cols) {
  return add(name, {cols, rows, n_experts}, Kind::Matrix, true);
}

WeightId WeightMapper::row_slice(const std::string& name, int64_t total_rows, int64_t cols, int64_t first,
                                 int64_t count, const char* part) {
  GRETA_CHECK(first >= 0 && count > 0 && first + count <= total_rows, name);
  const model::GgufTensor* t = check(name, {cols, total_rows}, Kind::Matrix, true);
  WeightDesc desc;
  desc.name = cat(name, "[", part, "]");
  desc.type = t->type;
  desc.rows = count;
  desc.cols = cols;
  const uint64_t row_bytes = model::row_bytes(t->type, uint64_t(cols));
  desc.data = static_cast<const uint8_t*>(t->data) + uint64_t(first) * row_bytes;
  desc.bytes = uint64_t(count) * row_bytes;
  if (file_.file_mapped()) desc.release = &model::release_mapped_pages;
  weights_.table.push_back(std::move(desc));
  return WeightId(weights_.table.size() - 1);
}

void WeightMapper::finish() const {
  for (const auto& t : file_.tensors())
    if (!used_.count(std::string(t.name)))
      fail(file_.path(), ": unexpected tensor '", t.name, "' (a feature this architecture reader does not support)");
}

}  // namespace greta::engine::arch
