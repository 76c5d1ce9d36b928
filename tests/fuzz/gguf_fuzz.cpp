// libFuzzer target: any byte string handed to the GGUF reader must either parse or throw greta::Error — never crash,
// hang, read out of bounds or allocate absurd sizes (ASan/UBSan and libFuzzer's -rss_limit_mb/-malloc_limit_mb
// catch those). When a file parses, the typed getters and the architecture reader run on it too.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "model/gguf.h"
#include "model/model_config.h"

using namespace greta::model;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    GgufFile f = GgufFile::from_memory(std::vector<uint8_t>(data, data + size), "fuzz.gguf");
    // Touch every tensor's first and last byte: out-of-range views would show up under ASan.
    volatile uint8_t sink = 0;
    for (const auto& t : f.tensors()) sink = sink + t.data[0] + t.data[t.n_bytes - 1];
    for (const auto& kv : f.metadata()) {
      try {
        (void)f.get_float_array(kv.key);
        (void)f.get_int_array(kv.key);
      } catch (const greta::Error&) {
      }
    }
    try {
      (void)ModelConfig::from_gguf(f);
    } catch (const greta::Error&) {
    }
  } catch (const greta::Error&) {
  }
  return 0;
}
