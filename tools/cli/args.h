// Command-line parsing shared by every greta-vk subcommand. Options may come before or after positional arguments
// ("greta-vk tokenize --no-bos MODEL TEXT" == "greta-vk tokenize MODEL TEXT --no-bos"); "--" ends options.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace greta::cli {

struct OptionSpec {
  const char* name;        // long name without dashes: "ctx"
  const char* short_name;  // single letter without dash, or nullptr: "p"
  bool takes_value;
  const char* help;
};

class Args {
public:
  // Throws greta::Error naming the option on unknown options, missing values or bad numbers.
  Args(int argc, char** argv, std::span<const OptionSpec> specs);

  const std::vector<std::string>& positional() const { return positional_; }
  bool has(std::string_view name) const;
  std::string get(std::string_view name, const std::string& fallback = "") const;  // the last value given
  std::vector<std::string> get_all(std::string_view name) const;  // every value, in order (repeatable options)
  int64_t get_int(std::string_view name, int64_t fallback) const;
  double get_double(std::string_view name, double fallback) const;
  // Requires exactly `count` positional arguments, else throws with the usage line.
  void expect_positional(size_t min_count, size_t max_count, std::string_view usage) const;

private:
  std::vector<std::string> positional_;
  std::map<std::string, std::string, std::less<>> values_;
  std::map<std::string, std::vector<std::string>, std::less<>> all_values_;
};

std::string usage_options(std::span<const OptionSpec> specs);

// The items of a comma-separated option value: "3,1" -> {"3", "1"} (an empty item stays, for the caller to reject).
std::vector<std::string> comma_items(const std::string& text);
// A whole decimal integer within [lo, hi]; nullopt for anything else.
std::optional<int64_t> parse_integer(const std::string& text, int64_t lo, int64_t hi);

}  // namespace greta::cli
