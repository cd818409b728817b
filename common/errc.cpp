#include "common/errc.hpp"
#include "common/enum_text.hpp"

#include <caf/message.hpp>
#include <caf/make_message.hpp>

namespace oncegate {

constexpr const char* errc_names[] = {
  "none", "storage_failure", "commit_failed", "store_unavailable",
  "schema_too_new", "overloaded", "timeout", "invalid_argument", "not_leader",
  "leadership_lost", "wal_damaged"};
static_assert(enum_table_covers(errc::wal_damaged, errc_names));

const char* to_string(errc x) {
  return enum_text(x, errc_names);
}

caf::error make_error(errc x) {
  return caf::error{static_cast<uint8_t>(x), errc_category};
}

caf::error make_error(errc x, std::string context) {
  return caf::error{static_cast<uint8_t>(x), errc_category,
                    caf::make_message(std::move(context))};
}

std::string describe(errc x, const caf::message& context) {
  std::string out = "oncegate.";
  out += to_string(x);
  if (context.match_elements<std::string>()) {
    out += ": ";
    out += context.get_as<std::string>(0);
  }
  return out;
}

std::string describe(const caf::error& err) {
  if (err.category() != errc_category)
    return to_string(err);
  return describe(static_cast<errc>(err.code()), err.context());
}

errc errc_of(const caf::error& err) {
  if (err.category() != errc_category)
    return errc::none;
  return static_cast<errc>(err.code());
}

} // namespace oncegate
