#include "common/errc.hpp"

#include <caf/message.hpp>
#include <caf/make_message.hpp>

namespace oncegate {

const char* to_string(errc x) {
  switch (x) {
    case errc::none:
      return "none";
    case errc::storage_failure:
      return "storage_failure";
    case errc::commit_failed:
      return "commit_failed";
    case errc::store_unavailable:
      return "store_unavailable";
    case errc::schema_too_new:
      return "schema_too_new";
    case errc::overloaded:
      return "overloaded";
    case errc::timeout:
      return "timeout";
    case errc::invalid_argument:
      return "invalid_argument";
    case errc::not_leader:
      return "not_leader";
    case errc::leadership_lost:
      return "leadership_lost";
  }
  return "unknown";
}

caf::error make_error(errc x) {
  return caf::error{static_cast<uint8_t>(x), errc_category};
}

caf::error make_error(errc x, std::string context) {
  return caf::error{static_cast<uint8_t>(x), errc_category,
                    caf::make_message(std::move(context))};
}

std::string describe(const caf::error& err) {
  if (err.category() != errc_category)
    return to_string(err);
  std::string out = "oncegate.";
  out += to_string(static_cast<errc>(err.code()));
  auto& ctx = err.context();
  if (ctx.match_elements<std::string>()) {
    out += ": ";
    out += ctx.get_as<std::string>(0);
  }
  return out;
}

errc errc_of(const caf::error& err) {
  if (err.category() != errc_category)
    return errc::none;
  return static_cast<errc>(err.code());
}

} // namespace oncegate
