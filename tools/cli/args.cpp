#include "args.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace greta::cli {

namespace {
const OptionSpec* find_long(std::span<const OptionSpec> specs, std::string_view name) {
  for (const auto& s : specs)
    if (name == s.name) return &s;
  return nullptr;
}
const OptionSpec* find_short(std::span<const OptionSpec> specs, std::string_view name) {
  for (const auto& s : specs)
    if (s.short_name && name == s.short_name) return &s;
  return nullptr;
}
}  // namespace

Args::Args(int argc, char** argv, std::span<const OptionSpec> specs) {
  bool options_done = false;
  for (int i = 0; i < argc; ++i) {
    std::string_view a = argv[i];
    if (options_done || a.size() < 2 || a[0] != '-' || (a[1] >= '0' && a[1] <= '9')) {
      positional_.emplace_back(a);
      continue;
    }
    if (a == "--") {
      options_done = true;
      continue;
    }
    std::string_view name = a.substr(a[1] == '-' ? 2 : 1);
    std::string_view inline_value;
    bool has_inline = false;
    if (auto eq = name.find('='); eq != std::string_view::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_inline = true;
    }
    const OptionSpec* spec = a[1] == '-' ? find_long(specs, name) : find_short(specs, name);
    if (!spec && a[1] != '-') spec = find_long(specs, name);  // "-ctx" is accepted like "--ctx"
    if (!spec) fail("unknown option '", a, "'");
    if (spec->takes_value) {
      if (!has_inline && i + 1 >= argc) fail("option '", a, "' needs a value");
      const std::string value = has_inline ? std::string(inline_value) : std::string(argv[++i]);
      values_[spec->name] = value;  // the last one counts
      all_values_[spec->name].push_back(value);
    } else {
      if (has_inline) fail("option '", a, "' takes no value");
      values_[spec->name].assign(1, '1');  // (not = "1": GCC 12 -Wrestrict false positive)
    }
  }
}

bool Args::has(std::string_view name) const { return values_.find(name) != values_.end(); }

std::vector<std::string> Args::get_all(std::string_view name) const {
  const auto it = all_values_.find(name);
  return it == all_values_.end() ? std::vector<std::string>{} : it->second;
}

std::string Args::get(std::string_view name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Args::get_int(std::string_view name, int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (errno != 0 || end == it->second.c_str() || *end != '\0')
    fail("option --", name, ": '", it->second, "' is not an integer");
  return v;
}

double Args::get_double(std::string_view name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (errno != 0 || end == it->second.c_str() || *end != '\0')
    fail("option --", name, ": '", it->second, "' is not a number");
  return v;
}

void Args::expect_positional(size_t min_count, size_t max_count, std::string_view usage) const {
  if (positional_.size() < min_count || positional_.size() > max_count) fail("usage: ", usage);
}

std::string usage_options(std::span<const OptionSpec> specs) {
  std::string out;
  for (const auto& s : specs) {
    out += "  ";
    out += s.short_name ? cat("-", s.short_name, ", ") : std::string("    ");
    out += cat("--", s.name, s.takes_value ? " V" : "", "\t", s.help, "\n");
  }
  return out;
}

std::vector<std::string> comma_items(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    items.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

std::optional<int64_t> parse_integer(const std::string& text, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0' || v < lo || v > hi) return std::nullopt;
  return int64_t(v);
}

}  // namespace greta::cli
