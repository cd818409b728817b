#include "api/client_address.hpp"

#include <cctype>
#include <utility>

#include "common/enum_text.hpp"
#include "api/url.hpp"

namespace oncegate::gateway {

namespace {

constexpr const char* header_names[] = {"forwarded", "x-forwarded-for"};
static_assert(enum_table_covers(forwarded_header::x_forwarded_for,
                                header_names));

constexpr std::string_view unknown_client = "unknown";

// Decimal port numbers have at most 5 digits.
constexpr std::size_t max_port_digits = 5;

bool is_ows(char c) {
  return c == ' ' || c == '\t';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ows(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && is_ows(s.back()))
    s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i]))
        != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

// RFC 9110 tchar.
bool is_tchar(char c) {
  auto u = static_cast<unsigned char>(c);
  if (std::isalnum(u))
    return true;
  return std::string_view{"!#$%&'*+-.^_`|~"}.find(c) != std::string_view::npos;
}

// RFC 7239 6.3: "_" 1*(ALPHA / DIGIT / "." / "_" / "-").
bool is_obfuscated(std::string_view s) {
  if (s.size() < 2 || s.front() != '_')
    return false;
  for (auto c : s.substr(1))
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_'
        && c != '-')
      return false;
  return true;
}

bool is_port(std::string_view s, bool obfuscated_ok) {
  return parse_digits(s, max_port_digits).has_value()
         || (obfuscated_ok && is_obfuscated(s));
}

/// What one hop names.
struct hop {
  enum { address, unknown, malformed } kind = malformed;
  std::string_view text; // the address, without port or brackets
};

// One hop's node: `[IPv6]` or `[IPv6]:port`, `IPv4` or `IPv4:port`; in
// X-Forwarded-For also a bare IPv6 address (RFC 7239 requires brackets).
hop parse_node(std::string_view node, forwarded_header kind) {
  bool rfc = kind == forwarded_header::forwarded;
  if (iequals(node, unknown_client) || (rfc && is_obfuscated(node)))
    return {hop::unknown, {}};
  if (!node.empty() && node.front() == '[') {
    auto close = node.find(']');
    if (close == std::string_view::npos)
      return {};
    auto inner = node.substr(1, close - 1);
    auto rest = node.substr(close + 1);
    if (!rest.empty() && (rest.front() != ':' || !is_port(rest.substr(1), rfc)))
      return {};
    // Brackets hold IPv6 only.
    if (inner.find(':') == std::string_view::npos || !is_address(inner))
      return {};
    return {hop::address, inner};
  }
  auto colon = node.find(':');
  if (colon == std::string_view::npos)
    return is_address(node) ? hop{hop::address, node} : hop{};
  if (!rfc && is_address(node)) // a bare IPv6 address
    return {hop::address, node};
  // IPv4:port (one colon only: an IPv6 address needs its brackets here).
  auto host = node.substr(0, colon);
  if (node.find(':', colon + 1) != std::string_view::npos || !is_address(host)
      || !is_port(node.substr(colon + 1), rfc))
    return {};
  return {hop::address, host};
}

// The decoded value of a quoted-string starting at `text[pos]` (a quote);
// advances `pos` past it. Nothing when it is unterminated or holds a
// control character.
std::optional<std::string> quoted_string(std::string_view text,
                                         std::size_t& pos) {
  std::string out;
  for (++pos; pos < text.size(); ++pos) {
    auto c = static_cast<unsigned char>(text[pos]);
    if (c == '"') {
      ++pos;
      return out;
    }
    if (c == '\\') {
      if (++pos == text.size())
        return std::nullopt;
      c = static_cast<unsigned char>(text[pos]);
    }
    if ((c < 0x20 && c != '\t') || c == 0x7f)
      return std::nullopt;
    out += static_cast<char>(c);
  }
  return std::nullopt;
}

// The `for` value of one `Forwarded` element
// (`pair *( ";" [pair] )`, `pair = token "=" (token / quoted-string)`);
// nothing when the element is malformed, has no `for`, or has two.
std::optional<std::string> for_parameter(std::string_view element) {
  std::optional<std::string> result;
  std::size_t pos = 0;
  auto skip_ows = [&] {
    while (pos < element.size() && is_ows(element[pos]))
      ++pos;
  };
  while (true) {
    skip_ows();
    if (pos == element.size())
      break;
    if (element[pos] == ';') {
      ++pos;
      continue;
    }
    auto start = pos;
    while (pos < element.size() && is_tchar(element[pos]))
      ++pos;
    auto name = element.substr(start, pos - start);
    if (name.empty() || pos == element.size() || element[pos] != '=')
      return std::nullopt;
    ++pos;
    std::string value;
    if (pos < element.size() && element[pos] == '"') {
      auto quoted = quoted_string(element, pos);
      if (!quoted)
        return std::nullopt;
      value = std::move(*quoted);
    } else {
      start = pos;
      while (pos < element.size() && is_tchar(element[pos]))
        ++pos;
      value = std::string{element.substr(start, pos - start)};
      if (value.empty())
        return std::nullopt;
    }
    skip_ows();
    if (pos < element.size() && element[pos] != ';')
      return std::nullopt;
    if (iequals(name, "for")) {
      if (result)
        return std::nullopt;
      result = std::move(value);
    }
  }
  return result;
}

// The list elements of a header value, right-most first, within the last
// `max_bytes` bytes. In a `Forwarded` value commas inside quoted strings
// separate nothing, so quotes are tracked (a quote preceded by an odd run
// of backslashes is escaped).
class elements_from_right {
public:
  enum class step { element, done, malformed, cut };

  elements_from_right(std::string_view value, std::size_t max_bytes,
                      bool quoted)
    : cut_(value.size() > max_bytes),
      text_(cut_ ? value.substr(value.size() - max_bytes) : value),
      quoted_(quoted),
      end_(text_.size()) {
    // nop
  }

  /// The next element to the left (empty ones are skipped).
  step next(std::string_view& element) {
    while (!done_) {
      auto i = end_;
      bool in_quote = false;
      for (; i > 0; --i) {
        auto c = text_[i - 1];
        if (quoted_ && c == '"') {
          std::size_t backslashes = 0;
          while (i - 1 > backslashes && text_[i - 2 - backslashes] == '\\')
            ++backslashes;
          if (backslashes % 2 == 1) {
            if (!in_quote)
              return at_start(i) ? step::cut : step::malformed;
            continue;
          }
          in_quote = !in_quote;
        } else if (c == ',' && !in_quote) {
          break;
        }
      }
      // The window's first element may have begun before it.
      if (i == 0 && cut_)
        return step::cut;
      if (in_quote)
        return step::malformed;
      element = trim(text_.substr(i, end_ - i));
      if (i == 0)
        done_ = true;
      else
        end_ = i - 1;
      if (!element.empty())
        return step::element;
    }
    return step::done;
  }

private:
  bool at_start(std::size_t i) const {
    // A run of backslashes reaching the window's start may be longer
    // than what is seen of it.
    std::size_t k = i - 1;
    while (k > 0 && text_[k - 1] == '\\')
      --k;
    return k == 0 && cut_;
  }

  bool cut_;
  std::string_view text_;
  bool quoted_;
  std::size_t end_;
  bool done_ = false;
};

} // namespace

const char* to_string(forwarded_header x) {
  return enum_text(x, header_names);
}

std::optional<forwarded_header> parse_forwarded_header(std::string_view name) {
  return enum_from_text<forwarded_header>(name, header_names);
}

std::vector<std::string> to_strings(const std::vector<forwarded_header>& xs) {
  std::vector<std::string> out;
  for (auto x : xs)
    out.emplace_back(to_string(x));
  return out;
}

std::optional<std::string> client_from_header(std::string_view value,
                                              forwarded_header kind,
                                              const proxy_options& opts) {
  bool rfc = kind == forwarded_header::forwarded;
  elements_from_right elements{value, opts.max_bytes, rfc};
  std::optional<std::string> leftmost;
  std::string_view element;
  while (true) {
    switch (elements.next(element)) {
      case elements_from_right::step::element:
        break;
      case elements_from_right::step::done:
        // Every hop is a trusted proxy: the first of them is the client.
        return leftmost;
      case elements_from_right::step::malformed:
      case elements_from_right::step::cut:
        return std::nullopt;
    }
    std::optional<std::string> node;
    if (rfc)
      node = for_parameter(element);
    else
      node = std::string{element};
    if (!node)
      return std::nullopt;
    auto h = parse_node(*node, kind);
    switch (h.kind) {
      case hop::malformed:
        return std::nullopt;
      case hop::unknown:
        return std::string{unknown_client};
      case hop::address:
        if (!address_allowed(h.text, opts.trusted))
          return std::string{h.text};
        leftmost = std::string{h.text};
        break;
    }
  }
}

std::string resolve_client(const proxy_options& opts,
                           const http_request& req) {
  if (opts.trusted.empty() || !address_allowed(req.remote, opts.trusted))
    return req.remote;
  for (auto kind : opts.headers)
    if (auto value = req.combined_header(to_string(kind)))
      return client_from_header(*value, kind, opts).value_or(req.remote);
  return req.remote;
}

bool relayed(const proxy_options& opts, const http_request& req) {
  return address_allowed(req.remote, opts.trusted) || req.header("forwarded")
         || req.header("x-forwarded-for") || req.header("x-real-ip");
}

} // namespace oncegate::gateway
