#pragma once

// The admin API's request targets (docs/http-api.md, "Admin"), with routes,
// keys and ids escaped so that the node decodes exactly the bytes given
// (api/url.cpp: `%XX` in paths, `%XX` and `+` in query values).

#include <cstdint>
#include <string>
#include <string_view>

namespace oncegate::cli {

/// Every byte but ASCII letters, digits, `-`, `_` and `~` as `%XX`: safe in
/// a path segment and in a query value, and never a dot segment (`.`,
/// `..`) that a proxy could normalise away.
std::string percent_encode(std::string_view bytes);

/// `/v1/keys/KEY[SUFFIX]?route=ROUTE[&QUERY]`; `suffix` is `""`,
/// `"/complete"` or `"/redeliver"`, `query` more parameters, already
/// escaped.
std::string record_target(std::string_view route, std::string_view key,
                          std::string_view suffix = {},
                          std::string_view query = {});

/// `/v1/keys?state=STATE&route=ROUTE&limit=N[&after=KEY]`.
std::string list_target(std::string_view route, std::string_view state,
                        uint32_t limit, std::string_view after);

/// `/v1/cluster/members/ID`.
std::string member_target(uint64_t id);

/// `/v1/cluster/transfer[?to=ID]` (0: any voter).
std::string transfer_target(uint64_t to, uint16_t partition = 0);

} // namespace oncegate::cli
