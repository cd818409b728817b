#include "api/url.hpp"

namespace oncegate::gateway {

int digit_value(std::string_view alphabet, char c) {
  auto at = alphabet.find(c);
  return at == std::string_view::npos ? -1 : static_cast<int>(at);
}

int hex_value(char c) {
  auto lower = c >= 'A' && c <= 'F' ? static_cast<char>(c - 'A' + 'a') : c;
  return digit_value("0123456789abcdef", lower);
}

std::optional<std::string> percent_decode(std::string_view in,
                                          bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    auto c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size())
        return std::nullopt;
      auto hi = hex_value(in[i + 1]);
      auto lo = hex_value(in[i + 2]);
      if (hi < 0 || lo < 0)
        return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<std::string> query_param(std::string_view target,
                                       std::string_view name) {
  auto q = target.find('?');
  if (q == std::string_view::npos)
    return std::nullopt;
  auto query = target.substr(q + 1);
  while (!query.empty()) {
    auto amp = query.find('&');
    auto pair = query.substr(0, amp);
    auto eq = pair.find('=');
    auto key = pair.substr(0, eq);
    if (key == name) {
      auto value = eq == std::string_view::npos ? std::string_view{}
                                                : pair.substr(eq + 1);
      return percent_decode(value, true);
    }
    if (amp == std::string_view::npos)
      break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

std::optional<uint64_t> parse_digits(std::string_view text,
                                     std::size_t max_digits) {
  if (text.empty() || text.size() > max_digits)
    return std::nullopt;
  uint64_t value = 0;
  for (auto c : text) {
    if (c < '0' || c > '9')
      return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  return value;
}

std::optional<std::string> stable_path_segment(std::string_view key) {
  if (key.empty() || key.find_first_not_of('.') == std::string_view::npos
      || key.find_first_of("/\\%;?#") != std::string_view::npos)
    return std::nullopt;
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size() * 3);
  for (unsigned char c : key) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
        || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_'
        || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

} // namespace oncegate::gateway
