#include "http/response_render.hpp"

#include <charconv>
#include <ostream>
#include <stdexcept>
#include <string_view>

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/status.hpp>

namespace oncegate::gateway::detail {

namespace {

namespace http = boost::beast::http;

// RFC 9110 5.6.2 tchar.
bool is_tchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')
      || (c >= 'A' && c <= 'Z'))
    return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*':
    case '+': case '-': case '.': case '^': case '_': case '`': case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

void check_field(std::string_view name, std::string_view value) {
  if (name.empty() || name.size() > max_response_field
      || value.size() > max_response_field)
    throw std::invalid_argument("response field of bad size");
  for (unsigned char c : name)
    if (!is_tchar(c))
      throw std::invalid_argument("response field name is no token");
  for (unsigned char c : value)
    if (c == '\r' || c == '\n' || c == '\0')
      throw std::invalid_argument("CR, LF or NUL in a response field");
}

bool transport_field(std::string_view name) {
  using boost::beast::iequals;
  return iequals(name, "connection") || iequals(name, "content-length")
         || iequals(name, "transfer-encoding");
}

bool bodiless_status(int status) {
  return status == 204 || status == 304;
}

void append_line(std::string& out, std::string_view name,
                 std::string_view value) {
  out.append(name.data(), name.size());
  out.append(": ", 2);
  out.append(value.data(), value.size());
  out.append("\r\n", 2);
}

} // namespace

rendered_head render_head(const http_response& res, render_options opts,
                          std::string& out) {
  if (res.status < 200 || res.status > 599)
    throw std::invalid_argument("status " + std::to_string(res.status)
                                + " is not a final HTTP status");
  for (auto& [name, value] : res.headers)
    check_field(name, value);
  out.clear();
  auto reason = http::obsolete_reason(static_cast<http::status>(res.status));
  const char status_line[] = {'H', 'T', 'T', 'P', '/', '1', '.', '1', ' ',
                              static_cast<char>('0' + res.status / 100),
                              static_cast<char>('0' + res.status / 10 % 10),
                              static_cast<char>('0' + res.status % 10), ' '};
  out.append(status_line, sizeof status_line);
  out.append(reason.data(), reason.size());
  out.append("\r\n", 2);
  for (auto& [name, value] : res.headers)
    if (!transport_field(name))
      append_line(out, name, value);
  if (!opts.keep_open)
    append_line(out, "Connection", "close");
  else if (opts.http10)
    append_line(out, "Connection", "keep-alive");
  rendered_head result;
  if (bodiless_status(res.status)) {
    result.send_body = false;
    result.body_dropped = !res.body.empty();
  } else {
    char digits[24];
    auto [end, ec] = std::to_chars(digits, digits + sizeof digits,
                                   res.body.size());
    (void) ec; // 24 digits hold any size_t
    append_line(out, "Content-Length",
                std::string_view{digits, static_cast<size_t>(end - digits)});
    result.send_body = !opts.head && !res.body.empty();
  }
  out.append("\r\n", 2);
  return result;
}

} // namespace oncegate::gateway::detail
