#include "http/request_reader.hpp"

#include <algorithm>

#include <boost/beast/http/error.hpp>

namespace oncegate::gateway::detail {

namespace http = boost::beast::http;

namespace {

/// Fields a request of the usual kind carries (host, content type and
/// length, a key or a signature, a user agent): one allocation for them.
constexpr std::size_t usual_fields = 8;

/// The most body bytes reserved from a Content-Length before they arrive:
/// the parser's body limit bounds the length already; this bounds what one
/// announced length costs at once.
constexpr std::size_t max_body_reserve = 1024 * 1024;

} // namespace

void request_reader::on_request_impl(http::verb method,
                                     string_view method_str,
                                     string_view target, int version,
                                     error_code&) {
  head_ = method == http::verb::head;
  header_done_ = false;
  version_ = static_cast<unsigned>(version);
  req_.method.assign(method_str.data(), method_str.size());
  req_.target.assign(target.data(), target.size());
  req_.headers.reserve(usual_fields);
}

void request_reader::on_field_impl(http::field, string_view name,
                                   string_view value, error_code&) {
  if (header_done_)
    return; // a trailer field
  auto& [lower, text] = req_.headers.emplace_back();
  lower.resize(name.size());
  // Field names are tokens (ASCII, checked by the parser): no locale.
  std::transform(name.begin(), name.end(), lower.begin(), [](char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  });
  text.assign(value.data(), value.size());
}

void request_reader::on_body_init_impl(
  const boost::optional<std::uint64_t>& content_length, error_code&) {
  if (content_length)
    req_.body.reserve(static_cast<std::size_t>(
      std::min<std::uint64_t>(*content_length, max_body_reserve)));
}

std::size_t request_reader::on_body_impl(string_view body, error_code&) {
  req_.body.append(body.data(), body.size());
  return body.size();
}

std::size_t request_reader::on_chunk_body_impl(std::uint64_t, string_view body,
                                               error_code&) {
  req_.body.append(body.data(), body.size());
  return body.size();
}

} // namespace oncegate::gateway::detail
