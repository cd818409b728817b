#pragma once

#include <string>

namespace oncegate::gateway {

/// Why a request is refused before it reaches the actors. Rendered as an
/// RFC 9457 problem: `type` becomes `https://oncegate.dev/problems/<type>`.
struct rejection {
  /// HTTP status, e.g. 400 or 422.
  int status = 400;
  /// Machine-readable reason, e.g. `malformed-json`, `missing-fields`.
  std::string type;
  /// Short human-readable summary.
  std::string title;
  /// Specific explanation (never echoes secrets or whole bodies).
  std::string detail;
};

} // namespace oncegate::gateway
