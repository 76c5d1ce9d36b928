#include "engine/op_case.h"

#include <random>

#include "core/error.h"
#include "model/quants.h"

namespace greta::engine {

namespace {
std::vector<float> uniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}
}  // namespace

OpCase::OpCase(int64_t n_tokens, int64_t ctx) {
  GRETA_CHECK(n_tokens > 0 && ctx >= n_tokens);
  plan.shape.n_tokens = n_tokens;
  plan.shape.ctx = ctx;
  plan.tokens = plan.add_buffer("tokens", ElemType::I32, BufferRole::Tokens, n_tokens);
  plan.positions = plan.add_buffer("positions", ElemType::I32, BufferRole::Positions, n_tokens);
  tokens.assign(size_t(n_tokens), 0);
}

BufferId OpCase::input(const std::string& name, int64_t elems, uint32_t seed, float scale) {
  const BufferId id = plan.add_buffer(name, ElemType::F32, BufferRole::Scratch, elems);
  inputs[id] = uniform(size_t(elems), seed, -scale, scale);
  return id;
}

BufferId OpCase::output(const std::string& name, int64_t elems) {
  return plan.add_buffer(name, ElemType::F32, BufferRole::Scratch, elems);
}

WeightId OpCase::weight(const std::string& name, model::GgmlType type, int64_t rows, int64_t cols, uint32_t seed,
                        float lo, float hi) {
  const uint64_t rb = model::row_bytes(type, uint64_t(cols));
  std::vector<uint8_t> bytes(rb * uint64_t(rows));
  const auto values = uniform(size_t(rows * cols), seed, lo, hi);
  for (int64_t r = 0; r < rows; ++r) model::quantize_row(type, values.data() + r * cols, bytes.data() + r * rb, cols);
  weight_bytes.push_back(std::move(bytes));
  weights.push_back({name, type, rows, cols, nullptr, rb * uint64_t(rows)});
  return WeightId(weights.size() - 1);
}

void OpCase::add(std::string label, OpVariant op) { plan.ops.push_back({std::move(label), -1, std::move(op)}); }

std::unique_ptr<PreparedPlan> OpCase::load_and_prepare(Backend& backend) {
  for (size_t i = 0; i < weights.size(); ++i) weights[i].data = weight_bytes[i].data();
  backend.load_weights(weights);
  return backend.prepare(plan);
}

void OpCase::run(Backend& backend, PreparedPlan& prepared) {
  for (const auto& [id, values] : inputs) backend.write(prepared, id, 0, values);
  backend.execute(prepared, StepInput{tokens, start_pos});
}

std::vector<float> OpCase::read(Backend& backend, PreparedPlan& prepared, BufferId buffer) {
  std::vector<float> result(size_t(plan.buffers[size_t(buffer)].elems));
  backend.read(prepared, buffer, 0, result);
  return result;
}

std::vector<float> OpCase::run_once(Backend& backend, BufferId out) {
  auto prepared = load_and_prepare(backend);
  run(backend, *prepared);
  return read(backend, *prepared, out);
}

}  // namespace greta::engine
