// Deliberately broken CPU backends: each injects one realistic bug, so tests can show that the golden comparison
// and verify mode catch it (a check that cannot fail proves nothing).
#pragma once
#include <cstdlib>
#include <memory>
#include <vector>

#include "cpu/cpu_backend.h"

namespace greta::test {

// Rotates the wrong pairs: NEOX halves where the model wants adjacent pairs and vice versa.
class SwappedRopePairingBackend : public cpu::CpuBackend {
public:
  using cpu::CpuBackend::CpuBackend;
  std::string name() const override { return "cpu with swapped rope pairing"; }
  std::unique_ptr<engine::PreparedPlan> prepare(const engine::Plan& plan) override {
    engine::Plan broken = plan;
    for (auto& op : broken.ops)
      if (auto* rope = std::get_if<engine::RopeOp>(&op.op))
        rope->pairing = rope->pairing == model::RopePairing::Adjacent ? model::RopePairing::NeoxHalves
                                                                      : model::RopePairing::Adjacent;
    return cpu::CpuBackend::prepare(broken);
  }
};

// Writes each token's K and V one cache row too far (row + 1): attention then reads a stale or empty row at its own
// position, the classic KV-cache off-by-one.
class KvOffByOneBackend : public cpu::CpuBackend {
public:
  using cpu::CpuBackend::CpuBackend;
  std::string name() const override { return "cpu with KV write off by one"; }

protected:
  void run_op(cpu::CpuPlan& plan, const engine::PlanOp& op) override {
    if (const auto* kv = std::get_if<engine::KvWriteOp>(&op.op)) {
      const int32_t* rows = i32(plan, kv->rows);
      std::vector<int32_t> shifted(rows, rows + kv->n_tokens);
      for (auto& r : shifted) r = std::min<int32_t>(r + 1, int32_t(kv->cache_rows - 1));
      cpu::CacheView c = cache(plan, kv->cache);
      c.rows = kv->cache_rows;
      cpu::kv_write(f32(plan, kv->src), c, shifted.data(), kv->n_tokens, kv->width);
      return;
    }
    cpu::CpuBackend::run_op(plan, op);
  }
};

// Adds a small relative error (1e-2 of the values' scale, deterministic) to one op's output, chosen by label:
// a subtly wrong kernel in one layer.
class NoisyOpBackend : public cpu::CpuBackend {
public:
  NoisyOpBackend(const cpu::CpuOptions& options, std::string label, float relative_noise)
      : cpu::CpuBackend(options), label_(std::move(label)), noise_(relative_noise) {}
  std::string name() const override { return "cpu with noise in " + label_; }

protected:
  void run_op(cpu::CpuPlan& plan, const engine::PlanOp& op) override {
    cpu::CpuBackend::run_op(plan, op);
    if (op.label != label_) return;
    const engine::BufferId b = engine::written_buffer(op);
    float* x = f32(plan, b);
    const int64_t count = plan.plan().buffers[size_t(b)].elems;
    for (int64_t i = 0; i < count; ++i) x[i] *= 1.f + noise_ * (float((i * 7919) % 17) / 8.f - 1.f);
  }

private:
  std::string label_;
  float noise_;
};

// Perturbs one expert's rows of one expert matmul (by label): a bug in a kernel path only some experts take.
class NoisyExpertBackend : public cpu::CpuBackend {
public:
  NoisyExpertBackend(const cpu::CpuOptions& options, std::string label, int32_t expert)
      : cpu::CpuBackend(options), label_(std::move(label)), expert_(expert) {}
  std::string name() const override { return "cpu with a broken expert in " + label_; }

protected:
  void run_op(cpu::CpuPlan& plan, const engine::PlanOp& op) override {
    cpu::CpuBackend::run_op(plan, op);
    const auto* mm = std::get_if<engine::MoeMatMulOp>(&op.op);
    if (!mm || op.label != label_) return;
    const int32_t* experts = i32(plan, mm->experts);
    float* out = f32(plan, mm->out);
    for (int64_t slot = 0; slot < mm->n_tokens * mm->k; ++slot)
      if (experts[slot] == expert_)
        for (int64_t r = 0; r < mm->out_features; ++r) out[slot * mm->out_features + r] *= 1.05f;
  }

private:
  std::string label_;
  int32_t expert_;
};

}  // namespace greta::test
