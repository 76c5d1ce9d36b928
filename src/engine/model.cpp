#include "engine/model.h"

#include <string>

#include "core/error.h"
#include "model/gguf.h"
#include "model/model_config.h"

namespace greta::engine {

using model::GgmlType;

uint64_t ModelWeights::total_bytes() const {
  uint64_t bytes = 0;
  for (const auto& w : table) bytes += w.bytes;
  // A tied output matrix is the embedding table itself: it is in the table once.
  return bytes;
}

}  // namespace greta::engine
