// greta-vk bench --batched: many sequences at once, measured like llama.cpp's llama-batched-bench.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "args.h"

namespace greta::cli {

// "--name 1,4,16" -> {1, 4, 16}; `fallback` when the option is absent. Throws greta::Error on anything else.
std::vector<int64_t> int_list(const Args& args, std::string_view name, std::vector<int64_t> fallback);

// For every npp, ntg and B in --npl: B sequences of npp random prompt tokens prefilled (S_PP = B npp / T_PP, the
// last token's logits read, as llama-batched-bench does), then ntg steps of one token per sequence with every
// sequence's logits read (S_TG = B ntg / T_TG); S = all tokens / (T_PP + T_TG). Each B runs once untimed first.
int run_batched_bench(const Args& args);

}  // namespace greta::cli
