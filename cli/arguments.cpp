#include "cli/arguments.hpp"

#include <algorithm>

namespace oncegate::cli {

namespace {

const option_spec* find_spec(const std::vector<option_spec>& specs,
                             std::string_view name) {
  auto i = std::find_if(specs.begin(), specs.end(),
                        [name](const option_spec& s) { return s.name == name; });
  return i == specs.end() ? nullptr : &*i;
}

} // namespace

std::variant<parsed_args, std::string>
parse_args(const std::vector<std::string>& args,
           const std::vector<option_spec>& specs) {
  parsed_args out;
  bool options_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (options_done || arg.size() < 2 || arg[0] != '-') {
      out.positional.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      options_done = true;
      continue;
    }
    if (arg == "-h")
      arg = "--help";
    if (arg.substr(0, 2) != "--")
      return "unknown option " + std::string{arg}
             + " (options are --name or --name=value)";
    auto body = arg.substr(2);
    auto eq = body.find('=');
    auto name = body.substr(0, eq);
    auto spec = find_spec(specs, name);
    if (!spec)
      return "unknown option --" + std::string{name};
    std::string value;
    if (eq != std::string_view::npos) {
      if (!spec->takes_value)
        return "--" + std::string{name} + " takes no value";
      value = std::string{body.substr(eq + 1)};
    } else if (spec->takes_value) {
      if (i + 1 >= args.size())
        return "--" + std::string{name} + " needs a value";
      value = args[++i];
    }
    if (!out.options.emplace(std::string{name}, std::move(value)).second)
      return "--" + std::string{name} + " given twice";
  }
  return out;
}

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  auto digits_end = text.find_first_not_of("0123456789");
  auto digits = text.substr(0, digits_end);
  auto unit = digits_end == std::string_view::npos ? std::string_view{}
                                                   : text.substr(digits_end);
  auto value = parse_number(digits, 3'600'000);
  if (!value)
    return std::nullopt;
  uint64_t ms = 0;
  if (unit == "ms")
    ms = *value;
  else if (unit.empty() || unit == "s")
    ms = *value * 1000;
  else if (unit == "m")
    ms = *value * 60'000;
  else
    return std::nullopt;
  if (ms < 1 || ms > 3'600'000)
    return std::nullopt;
  return std::chrono::milliseconds{static_cast<int64_t>(ms)};
}

std::optional<uint64_t> parse_number(std::string_view text, uint64_t max) {
  if (text.empty() || text.size() > 18)
    return std::nullopt;
  uint64_t value = 0;
  for (auto c : text) {
    if (c < '0' || c > '9')
      return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (value > max)
    return std::nullopt;
  return value;
}

} // namespace oncegate::cli
