#pragma once

// @private: turns an `http_response` into the header block of one HTTP/1.1
// answer (status line and fields, rendered into one reused buffer), which
// the session writes together with the body in one call. Must not live here: when to write, keep-alive decisions
// (the session's), what a response says (the handler's).

#include <cstddef>
#include <string>

#include "http/http_types.hpp"

namespace oncegate::gateway::detail {

/// What the connection decides about an answer, not the handler.
struct render_options {
  /// The connection stays open after this answer.
  bool keep_open = true;
  /// The request was HTTP/1.0: keeping the connection open must be said.
  bool http10 = false;
  /// The request was a HEAD: the header block only, Content-Length of the
  /// body included (RFC 9110 9.3.2).
  bool head = false;
};

/// The longest header value (and name) a response may carry.
constexpr std::size_t max_response_field = 64 * 1024;

/// What the session sends after the header block.
struct rendered_head {
  /// The body follows the header block (not for HEAD, 204, 304).
  bool send_body = true;
  /// The handler gave a body the status forbids; it is not sent.
  bool body_dropped = false;
};

/// Replaces `out` with the header block of `res`, the blank line included. Throws `std::invalid_argument` for
/// what must not be sent: a status outside 200-599, a field name that is no
/// token, a value with CR, LF or NUL (header injection), a field longer
/// than `max_response_field`. `Connection`, `Content-Length` and
/// `Transfer-Encoding` are the transport's: the handler's are dropped, and
/// 204/304 answers carry neither a body nor a length (RFC 9110 8.6).
rendered_head render_head(const http_response& res, render_options opts,
                          std::string& out);

} // namespace oncegate::gateway::detail
