#include "cli/admin_paths.hpp"

namespace oncegate::cli {

std::string percent_encode(std::string_view bytes) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(bytes.size() * 3);
  for (char ch : bytes) {
    auto c = static_cast<unsigned char>(ch);
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
                 || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '~';
    if (plain) {
      out += ch;
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 0x0f];
    }
  }
  return out;
}

std::string record_target(std::string_view route, std::string_view key,
                          std::string_view suffix, std::string_view query) {
  std::string out = "/v1/keys/";
  out += percent_encode(key);
  out += suffix;
  out += "?route=";
  out += percent_encode(route);
  if (!query.empty()) {
    out += '&';
    out += query;
  }
  return out;
}

std::string list_target(std::string_view route, std::string_view state,
                        uint32_t limit, std::string_view after) {
  std::string out = "/v1/keys?state=";
  out += percent_encode(state);
  out += "&route=";
  out += percent_encode(route);
  out += "&limit=";
  out += std::to_string(limit);
  if (!after.empty()) {
    out += "&after=";
    out += percent_encode(after);
  }
  return out;
}

std::string member_target(uint64_t id) {
  return "/v1/cluster/members/" + std::to_string(id);
}

std::string transfer_target(uint64_t to, uint16_t partition) {
  std::string out = "/v1/cluster/transfer";
  char sep = '?';
  if (to != 0) {
    out += "?to=" + std::to_string(to);
    sep = '&';
  }
  if (partition != 0) {
    out += sep;
    out += "partition=" + std::to_string(partition);
  }
  return out;
}

} // namespace oncegate::cli
