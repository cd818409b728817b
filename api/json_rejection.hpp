#pragma once

// The 400 rejections of a body that is not acceptable JSON, and the
// diagnosis that tells an encoding error from a syntax error after the
// parser failed. Must not live here: the parser and the canonical form
// (`api/payload.*`).

#include <cstddef>
#include <string>
#include <string_view>

#include <boost/json/error.hpp>

#include "api/rejection.hpp"

namespace oncegate::gateway {

/// ` at byte N`, for details.
std::string at_byte(std::size_t offset);

/// 400 `malformed-json`.
rejection malformed_json(std::string detail);

/// 400 `duplicate-member` naming `name` (cut to a bounded length).
rejection duplicate_member(std::string_view name);

/// 400 `not-an-object`.
rejection not_an_object();

/// The rejection of `body`, on which the parser failed with `ec` after
/// consuming `offset` bytes: `invalid-utf8` when an encoding error comes
/// first, `too-deep` beyond `max_depth`, else `malformed-json`.
rejection diagnose_parse_error(std::string_view body, std::size_t offset,
                               const boost::json::error_code& ec,
                               std::size_t max_depth);

} // namespace oncegate::gateway
