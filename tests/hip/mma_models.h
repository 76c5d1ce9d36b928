// Independent CPU models of the matrix instructions the HIP kernels use, written from the vendors' documented
// operand/result layouts, in the direction the documents state them: for each matrix ELEMENT, the (lane, register
// item) that holds it. src/hip/mma_layout.h states the opposite direction (for each lane and item, the element) and
// the kernels index memory with it; tests/hip/mma_layout_test.cpp checks the two against each other and runs the
// kernels' own fragment code through these models.
//
// Sources of each table:
//   Mfma16  v_mfma_f32_16x16x16f16 (CDNA2 gfx90a; v_mfma_f32_16x16x16_f16 on CDNA3 gfx942, same layout), wave64.
//           AMD Matrix Instruction Calculator (--detail-instruction) and the AMD lab notes "AMD matrix cores"
//           example for this instruction: lanes form a 16 x 4 grid; lane l = x + 16 y holds
//             A: row x, columns 4y .. 4y+3 (item = column % 4)
//             B: column x, rows 4y .. 4y+3 (item = row % 4)
//             D: column x, rows 4y .. 4y+3 (item = row % 4)
//   Wmma16  v_wmma_f32_16x16x16_f16, wave32 (RDNA3 gfx1100-gfx1103). RDNA3 ISA guide, "Wave Matrix Multiply
//           Accumulate"; AMD GPUOpen "How to accelerate AI applications on RDNA 3 using WMMA":
//             A: lanes l and l + 16 both hold row l of A, item = k (the two half-waves must hold identical copies)
//             B: lanes l and l + 16 both hold column l of B, item = k
//             D (f32): item v of lane l is D[2v + l / 16][l % 16]
//   Nv16    two mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (PTX ISA, "Matrix Fragments for mma.m16n8k16 with
//           floating point type"; groupID g = lane / 4, t = lane % 4), as src/hip/mma_layout.h's mma_16x16x16
//           issues them: B and C items 0-3 belong to the instruction for columns 0-7, items 4-7 to columns 8-15.
//             A: a0,a1 (g, 2t+i), a2,a3 (g+8, 2t+i-2), a4,a5 (g, 2t+8+i-4), a6,a7 (g+8, 2t+8+i-6)
//             B: b0,b1 (k = 2t+i, n = g), b2,b3 (k = 2t+8+i-2, n = g)
//             C: c0,c1 (g, 2t+i), c2,c3 (g+8, 2t+i-2)
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace greta::hip::test {

struct Loc {
  int lane, item;
  bool operator==(const Loc&) const = default;
};

// Registers of a whole wave for one operand: regs[lane][item].
using WaveRegs = std::vector<std::vector<float>>;
inline WaveRegs make_regs(int lanes, int items, float v = 0.f) {
  return WaveRegs(size_t(lanes), std::vector<float>(size_t(items), v));
}

struct Mfma16Model {
  static constexpr int kLanes = 64, kA = 4, kB = 4, kC = 4;
  static std::vector<Loc> a(int m, int k) { return {{m + 16 * (k / 4), k % 4}}; }
  static std::vector<Loc> b(int k, int n) { return {{n + 16 * (k / 4), k % 4}}; }
  static Loc d(int m, int n) { return {n + 16 * (m / 4), m % 4}; }
};

struct Wmma16Model {
  static constexpr int kLanes = 32, kA = 16, kB = 16, kC = 8;
  static std::vector<Loc> a(int m, int k) { return {{m, k}, {m + 16, k}}; }
  static std::vector<Loc> b(int k, int n) { return {{n, k}, {n + 16, k}}; }
  static Loc d(int m, int n) { return {n + 16 * (m % 2), m / 2}; }
};

struct Nv16Model {
  static constexpr int kLanes = 32, kA = 8, kB = 8, kC = 8;
  static std::vector<Loc> a(int m, int k) {
    const int g = m % 8, t = (k % 8) / 2;
    return {{4 * g + t, (k % 2) + 2 * (m / 8) + 4 * (k / 8)}};
  }
  static std::vector<Loc> b(int k, int n) {
    const int g = n % 8, t = (k % 8) / 2;
    return {{4 * g + t, (k % 2) + 2 * (k / 8) + 4 * (n / 8)}};
  }
  static Loc d(int m, int n) {
    const int g = m % 8, t = (n % 8) / 2;
    return {4 * g + t, (n % 2) + 2 * (m / 8) + 4 * (n / 8)};
  }
};

// D = A * B + C for 16 x 16 x 16, on whole-wave registers, as the instruction defines it. Every replica of an input
// element must hold the same value (WMMA's half-waves): a mismatch is what the hardware leaves undefined, so the
// model refuses it.
template <class Model>
WaveRegs execute(const WaveRegs& a, const WaveRegs& b, const WaveRegs& c) {
  WaveRegs d = c;
  auto value = [](const WaveRegs& regs, const std::vector<Loc>& locs, const char* what) {
    const float v = regs[size_t(locs[0].lane)][size_t(locs[0].item)];
    for (const Loc& l : locs)
      if (regs[size_t(l.lane)][size_t(l.item)] != v)
        throw std::runtime_error(std::string("replicated ") + what + " element differs between lanes " +
                                 std::to_string(locs[0].lane) + " and " + std::to_string(l.lane));
    return v;
  };
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      const Loc o = Model::d(m, n);
      double acc = c[size_t(o.lane)][size_t(o.item)];
      for (int k = 0; k < 16; ++k) acc += double(value(a, Model::a(m, k), "A")) * double(value(b, Model::b(k, n), "B"));
      d[size_t(o.lane)][size_t(o.item)] = float(acc);
    }
  return d;
}

}  // namespace greta::hip::test
