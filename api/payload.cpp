#include "api/payload.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

// basic_parser is a template: its implementation is compiled here and only
// here, so the rest of the gateway never pays for it.
#include <boost/json/basic_parser_impl.hpp>

#include "common/sha256.hpp"
#include "api/canonical_number.hpp"
#include "api/json_rejection.hpp"
#include "api/json_text.hpp"

namespace oncegate::gateway {

namespace {

namespace json = boost::json;

// Member names a sender may use for a shared secret (TradingView cannot send
// headers). They must not reach the fingerprint: two deliveries that differ
// only by a rotated secret are the same signal.
constexpr std::string_view auth_members[] = {"passphrase", "secret", "token"};

bool is_auth_member(std::string_view name) {
  return std::find(std::begin(auth_members), std::end(auth_members), name)
         != std::end(auth_members);
}

// Canonical strings use the same minimal escaping as every JSON oncegate
// writes (non-ASCII stays raw: the input is validated UTF-8, and escaping it
// would give the same text two spellings again).
void append_quoted(std::string& out, std::string_view s) {
  append_json_string(out, s);
}

// Builds the canonical text bottom-up while the parser walks the body: each
// open container collects the canonical text of its children, and a closing
// object sorts its members once it knows them all.
class canonical_handler {
public:
  /// Members of a usual signal object (exchange, symbol, action, price,
  /// quantity, time, ...): reserved at once.
  static constexpr std::size_t usual_members = 8;

  static constexpr std::size_t max_array_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_object_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_string_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_key_size = static_cast<std::size_t>(-1);

  bool on_document_begin(json::error_code&) {
    return true;
  }

  bool on_document_end(json::error_code&) {
    return true;
  }

  bool on_object_begin(json::error_code&) {
    if (stack_.empty())
      root_is_object_ = true;
    stack_.push_back(container{true, {}, {}, {}});
    // One allocation for the members of a usual signal.
    stack_.back().members.reserve(usual_members);
    return true;
  }

  bool on_object_end(std::size_t, json::error_code& ec) {
    auto& members = stack_.back().members;
    auto by_name = [](const member& x, const member& y) {
      // std::string compares through char_traits<char>, i.e. as unsigned
      // bytes: the bytewise order the contract asks for.
      return x.first < y.first;
    };
    std::sort(members.begin(), members.end(), by_name);
    auto same_name = [](const member& x, const member& y) {
      return x.first == y.first;
    };
    auto dup = std::adjacent_find(members.begin(), members.end(), same_name);
    if (dup != members.end()) {
      return fail(ec, duplicate_member(dup->first));
    }
    bool top_level = stack_.size() == 1;
    std::size_t bytes = 2;
    for (auto& [name, value] : members)
      bytes += name.size() + value.size() + 4;
    std::string text;
    text.reserve(bytes);
    text += '{';
    for (auto& [name, value] : members) {
      if (top_level && is_auth_member(name))
        continue;
      if (text.size() > 1)
        text += ',';
      append_quoted(text, name);
      text += ':';
      text += value;
    }
    text += '}';
    stack_.pop_back();
    return emit(std::move(text), std::nullopt);
  }

  bool on_array_begin(json::error_code&) {
    stack_.push_back(container{false, "[", {}, {}});
    return true;
  }

  bool on_array_end(std::size_t, json::error_code&) {
    auto text = std::move(stack_.back().text);
    text += ']';
    stack_.pop_back();
    return emit(std::move(text), std::nullopt);
  }

  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    part_.append(s.data(), s.size());
    return true;
  }

  bool on_key(json::string_view s, std::size_t, json::error_code&) {
    part_.append(s.data(), s.size());
    stack_.back().key = take_part();
    return true;
  }

  bool on_string_part(json::string_view s, std::size_t, json::error_code&) {
    part_.append(s.data(), s.size());
    return true;
  }

  bool on_string(json::string_view s, std::size_t, json::error_code&) {
    part_.append(s.data(), s.size());
    field f{field::kind::string, take_part()};
    std::string text;
    append_quoted(text, f.text);
    return emit(std::move(text), std::move(f));
  }

  bool on_number_part(json::string_view s, json::error_code&) {
    part_.append(s.data(), s.size());
    return true;
  }

  bool on_int64(int64_t, json::string_view s, json::error_code& ec) {
    return on_number(s, ec);
  }

  bool on_uint64(uint64_t, json::string_view s, json::error_code& ec) {
    return on_number(s, ec);
  }

  bool on_double(double, json::string_view s, json::error_code& ec) {
    // Boost turns 1e400 into infinity; the literal still has its exact
    // value, which is what the canonical form keeps.
    return on_number(s, ec);
  }

  bool on_bool(bool b, json::error_code&) {
    std::string text = b ? "true" : "false";
    field f{field::kind::boolean, text};
    return emit(std::move(text), std::move(f));
  }

  bool on_null(json::error_code&) {
    return emit("null", field{field::kind::null, {}});
  }

  // Comments are never enabled; the parser still needs the callbacks.
  bool on_comment_part(json::string_view, json::error_code&) {
    return true;
  }

  bool on_comment(json::string_view, json::error_code&) {
    return true;
  }

  const std::optional<rejection>& failure() const {
    return failure_;
  }

  bool root_is_object() const {
    return root_is_object_;
  }

  std::string take_canonical() {
    return std::move(canonical_);
  }

  std::map<std::string, field, std::less<>> take_fields() {
    return std::move(fields_);
  }

private:
  using member = std::pair<std::string, std::string>;

  struct container {
    bool is_object;
    // Arrays: canonical text so far, starting with '['.
    std::string text;
    // Objects: (decoded name, canonical value) in arrival order.
    std::vector<member> members;
    // Objects: the name waiting for its value.
    std::string key;
  };

  std::string take_part() {
    auto result = std::move(part_);
    part_.clear();
    return result;
  }

  bool on_number(json::string_view last, json::error_code& ec) {
    part_.append(last.data(), last.size());
    auto text = try_canonical_number(part_);
    if (!text)
      return fail(ec, malformed_json("number out of range"));
    return emit(std::move(*text), field{field::kind::number, take_part()});
  }

  bool emit(std::string text, std::optional<field> scalar) {
    if (stack_.empty()) {
      canonical_ = std::move(text);
      return true;
    }
    auto& top = stack_.back();
    if (top.is_object) {
      if (scalar && stack_.size() == 1)
        fields_.insert_or_assign(top.key, std::move(*scalar));
      top.members.emplace_back(std::move(top.key), std::move(text));
      top.key.clear();
    } else {
      if (top.text.size() > 1)
        top.text += ',';
      top.text += text;
    }
    return true;
  }

  bool fail(json::error_code& ec, rejection why) {
    failure_ = std::move(why);
    // Any error stops the parser; failure_ carries the actual reason.
    ec = json::error::exception;
    return false;
  }

  std::vector<container> stack_;
  std::string part_;
  std::string canonical_;
  std::map<std::string, field, std::less<>> fields_;
  bool root_is_object_ = false;
  std::optional<rejection> failure_;
};

} // namespace

std::variant<payload, rejection> parse_payload(std::string_view body,
                                               const payload_limits& limits) {
  json::parse_options options;
  options.max_depth = limits.max_depth;
  json::basic_parser<canonical_handler> parser{options};
  json::error_code ec;
  auto consumed = parser.write_some(false, body.data(), body.size(), ec);
  auto& handler = parser.handler();
  if (handler.failure())
    return *handler.failure();
  if (ec)
    return diagnose_parse_error(body, consumed, ec, limits.max_depth);
  if (consumed != body.size())
    return malformed_json("trailing data after the JSON document"
                          + at_byte(consumed));
  if (!handler.root_is_object())
    return not_an_object();
  payload result;
  result.canonical = handler.take_canonical();
  result.fingerprint = sha256(result.canonical);
  result.fields = handler.take_fields();
  return result;
}

payload text_payload(std::string_view body) {
  payload result;
  result.canonical = std::string{body};
  result.fingerprint = sha256(result.canonical);
  return result;
}

} // namespace oncegate::gateway
