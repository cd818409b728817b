#pragma once

// The admin CLI's command-line grammar: options and positional arguments
// after the command words, durations and numbers. Knows no command.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace oncegate::cli {

/// One option a command takes: `--name=VALUE` or `--name VALUE`, or a flag
/// `--name`.
struct option_spec {
  std::string_view name;
  /// Takes a value; else a flag, which takes none.
  bool takes_value = true;
};

/// A command line after its command words.
struct parsed_args {
  /// Positional arguments in order.
  std::vector<std::string> positional;
  /// Options given, by name without `--` (a flag's value is empty).
  std::map<std::string, std::string, std::less<>> options;

  bool has(std::string_view name) const {
    return options.find(name) != options.end();
  }

  std::optional<std::string> value(std::string_view name) const {
    if (auto i = options.find(name); i != options.end())
      return i->second;
    return std::nullopt;
  }
};

/// Parses `args` against `specs`. Options may come anywhere before `--`;
/// everything after `--`, and a lone `-`, is positional (a key that starts
/// with `-` goes after `--`). `-h` is `--help` when `specs` has `help`.
/// Returns the reason on an unknown option, a missing value, a value given
/// to a flag, or an option given twice.
std::variant<parsed_args, std::string>
parse_args(const std::vector<std::string>& args,
           const std::vector<option_spec>& specs);

/// A duration: digits with the unit `ms`, `s` or `m`, or bare digits
/// (seconds); 1 ms to 1 h. Nothing otherwise.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

/// 1 to 18 decimal digits whose value is at most `max`; nothing otherwise
/// (no sign, no spaces).
std::optional<uint64_t> parse_number(std::string_view text, uint64_t max);

} // namespace oncegate::cli
