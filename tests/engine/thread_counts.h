// Runs a CPU kernel with 1, 2 and 3 threads and checks the outputs are bit-identical (the CPU reference splits work
// into disjoint ranges and never reduces across threads); returns the 1-thread result.
#pragma once
#include <cstring>
#include <vector>

#include <doctest/doctest.h>

#include "core/thread_pool.h"

namespace greta::test {

template <class Kernel>
std::vector<float> run_all_thread_counts(Kernel kernel) {
  std::vector<float> first;
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<float> out = kernel(pool);
    if (first.empty()) first = out;
    else {
      const bool same =
          out.size() == first.size() && std::memcmp(first.data(), out.data(), out.size() * sizeof(float)) == 0;
      CHECK_MESSAGE(same, "thread count ", threads, " changed the result");
    }
  }
  return first;
}

}  // namespace greta::test
