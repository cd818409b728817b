#include "api/admin_auth.hpp"

#include <cctype>
#include <string_view>
#include <utility>

#include "common/logging.hpp"
#include "api/auth.hpp"
#include "api/responses.hpp"
#include "api/url.hpp"

namespace oncegate::gateway {

namespace {

constexpr std::string_view bearer = "bearer ";

// The scheme name is case-insensitive (RFC 9110 11.1).
bool bearer_scheme(std::string_view value) {
  if (value.size() < bearer.size())
    return false;
  for (size_t i = 0; i < bearer.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(value[i])) != bearer[i])
      return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out{s};
  for (auto& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

void remove_port(std::string& authority, std::string_view port) {
  if (authority.size() > port.size() + 1
      && authority.compare(authority.size() - port.size(), port.size(), port)
           == 0
      && authority[authority.size() - port.size() - 1] == ':')
    authority.resize(authority.size() - port.size() - 1);
}

// `origin` (`scheme://host[:port]`, RFC 6454) names the same host and port
// as `host` (the Host field). The node cannot see the scheme a TLS proxy
// in front of it served, so only the scheme's default port counts.
bool same_origin(std::string_view origin, std::optional<std::string_view> host) {
  if (!host)
    return false;
  auto o = lower(trim(origin));
  std::string_view default_port;
  std::size_t skip = 0;
  if (o.rfind("http://", 0) == 0) {
    default_port = "80";
    skip = 7;
  } else if (o.rfind("https://", 0) == 0) {
    default_port = "443";
    skip = 8;
  } else {
    return false;
  }
  auto authority = o.substr(skip);
  if (authority.empty()
      || authority.find_first_of("/?#@ \t,") != std::string::npos)
    return false;
  auto h = lower(trim(*host));
  remove_port(authority, default_port);
  remove_port(h, default_port);
  return authority == h;
}

bool json_media_type(const std::optional<std::string>& value) {
  if (!value)
    return false;
  std::string_view text{*value};
  return lower(trim(text.substr(0, text.find(';')))) == "application/json";
}

http_response refuse(const http_request& req, const rejection& why) {
  log::gateway()->debug("[C{}][R{}] admin.refused status={} type={} "
                        "client={} peer={}",
                        req.conn_id, req.req_id, why.status, why.type,
                        req.client_address(), req.remote);
  return make_problem(why);
}

} // namespace

bool loopback_host(const http_request& req) {
  // Exactly one Host field (RFC 9112 3.2): of two, which one names the
  // host is anybody's guess, so neither does.
  std::optional<std::string_view> host;
  for (auto& [k, v] : req.headers)
    if (k == "host") {
      if (host)
        return false;
      host = v;
    }
  if (!host)
    return false;
  auto h = lower(trim(*host));
  std::string_view name{h};
  auto port_ok = [](std::string_view text) {
    auto port = parse_digits(text, 5);
    return port && *port <= 65535;
  };
  if (!name.empty() && name.front() == '[') {
    auto close = name.find(']');
    if (close == std::string_view::npos)
      return false;
    auto rest = name.substr(close + 1);
    if (!rest.empty() && (rest.front() != ':' || !port_ok(rest.substr(1))))
      return false;
    return is_loopback_address(name.substr(1, close - 1));
  }
  if (auto colon = name.find(':'); colon != std::string_view::npos) {
    if (!port_ok(name.substr(colon + 1)))
      return false;
    name = name.substr(0, colon);
  }
  return name == "localhost" || is_loopback_address(name);
}

bool admin_read(const http_request& req) {
  return req.method == "GET" || req.method == "HEAD";
}

bool cross_site(const http_request& req) {
  if (auto site = req.combined_header("sec-fetch-site")) {
    auto value = trim(*site);
    if (value != "same-origin" && value != "none")
      return true;
  }
  if (auto origin = req.combined_header("origin"))
    return !same_origin(*origin, req.header("host"));
  return false;
}

bool local_admin_request(const admin_options& admin,
                         const proxy_options& proxies,
                         const http_request& req) {
  return admin.loopback_listener && is_loopback_address(req.remote)
         && !relayed(proxies, req) && loopback_host(req);
}

std::optional<http_response> refuse_admin(const admin_options& admin,
                                          const proxy_options& proxies,
                                          const http_request& req) {
  if (cross_site(req))
    return refuse(req, {403, "cross-site", "Cross-site request",
                        "admin endpoints refuse requests a browser sends "
                        "from another site (a foreign or null Origin, or "
                        "Sec-Fetch-Site other than same-origin or none)"});
  bool read = admin_read(req);
  if (!read && !req.body.empty()
      && !json_media_type(req.combined_header("content-type")))
    return refuse(req, {415, "unsupported-media-type",
                        "Unsupported media type",
                        "an admin request with a body must send "
                        "Content-Type: application/json"});
  if (!admin.token.empty()) {
    auto auth = req.header("authorization");
    if (!auth || !bearer_scheme(*auth)
        || !constant_time_equal(auth->substr(bearer.size()), admin.token)) {
      auto res = refuse(req, {401, "unauthorized", "Unauthorized",
                              "admin endpoints need a valid bearer token"});
      res.set("WWW-Authenticate", "Bearer");
      return res;
    }
    return std::nullopt;
  }
  bool local = local_admin_request(admin, proxies, req);
  if (read && !local)
    return refuse(req, {403, "forbidden", "Forbidden",
                        "without an admin token, admin endpoints answer "
                        "reads only to direct requests on a loopback "
                        "listener"});
  if (!read && !(local && admin.allow_unauthenticated_loopback))
    return refuse(req, {403, "admin-token-required", "Admin token required",
                        "admin changes need an admin token: configure "
                        "admin.token-env or admin.token-file"});
  return std::nullopt;
}

} // namespace oncegate::gateway
