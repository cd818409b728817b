#pragma once

// @private: Beast's HTTP/1.1 request parser writing straight into an
// `http_request` (lower-case field names, the body in one string), instead
// of a Beast message that the session then copied field by field. The
// parsing, limits and framing are Beast's (`basic_parser`); only where the
// parts go is ours. Must not live here: deadlines and reading from the
// socket (the session's), what a request means (the handler's).

#include <cstdint>
#include <string>
#include <string_view>

#include <boost/beast/http/basic_parser.hpp>

#include "http/http_types.hpp"

namespace oncegate::gateway::detail {

class request_reader : public boost::beast::http::basic_parser<true> {
public:
  request_reader() = default;

  /// The request read so far: after `is_header_done()` its line and
  /// fields, after `is_done()` its body as well.
  http_request& request() {
    return req_;
  }

  /// The request is a HEAD (answered without a body).
  bool is_head() const {
    return head_;
  }

  /// 10 for HTTP/1.0, 11 for HTTP/1.1.
  unsigned version() const {
    return version_;
  }

private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;

  void on_request_impl(boost::beast::http::verb method, string_view method_str,
                       string_view target, int version,
                       error_code& ec) override;

  void on_response_impl(int, string_view, int, error_code&) override {}

  void on_field_impl(boost::beast::http::field, string_view name,
                     string_view value, error_code& ec) override;

  // Fields after this are a chunked body's trailer: dropped (RFC 9110
  // 6.5.1: not merged into the header). A key or signature there would
  // count for this request and vanish from a retry through a proxy that
  // drops trailers.
  void on_header_impl(error_code&) override {
    header_done_ = true;
  }

  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                         error_code& ec) override;

  std::size_t on_body_impl(string_view body, error_code& ec) override;

  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}

  std::size_t on_chunk_body_impl(std::uint64_t, string_view body,
                                 error_code& ec) override;

  void on_finish_impl(error_code&) override {}

  http_request req_;
  bool head_ = false;
  bool header_done_ = false;
  unsigned version_ = 11;
};

} // namespace oncegate::gateway::detail
