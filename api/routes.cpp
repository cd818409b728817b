#include "api/routes.hpp"

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <utility>

#include <caf/config_value.hpp>
#include <caf/timespan.hpp>

#include "common/record.hpp"

namespace oncegate::gateway {

namespace {

constexpr std::string_view known_keys[] = {"auth",
                                           "secret",
                                           "secret-env",
                                           "secret-file",
                                           "ttl",
                                           "on-duplicate",
                                           "body",
                                           "body-limit",
                                           "allow",
                                           "tolerance",
                                           "upstream",
                                           "upstream-connect-timeout",
                                           "upstream-timeout",
                                           "upstream-connections",
                                           "upstream-max-response",
                                           "upstream-ca-file",
                                           "upstream-client-cert",
                                           "upstream-client-key",
                                           "respond-after"};

constexpr std::string_view upstream_url_form
  = "expected http://host[:port][/path] or https://host[:port][/path]";

// The route options that name an upstream TLS context's files.
constexpr std::pair<std::string_view, upstream_tls_files::part> tls_options[]
  = {{"upstream-ca-file", upstream_tls_files::part::ca_file},
     {"upstream-client-cert", upstream_tls_files::part::client_cert},
     {"upstream-client-key", upstream_tls_files::part::client_key}};

std::string_view option_of(upstream_tls_files::part x) {
  for (auto& [option, part] : tls_options)
    if (part == x)
      return option;
  return {};
}

// The TLS contexts of the routes' https upstreams, one per set of files,
// made while the routes load: a file that does not load stops the start,
// and routes with the same files share one context.
class tls_contexts {
public:
  /// The context of `files`; null, with `error` and `culprit`, when one of
  /// them does not load.
  std::shared_ptr<const upstream_tls> get(const upstream_tls_files& files,
                                          std::string& error,
                                          upstream_tls_files::part& culprit) {
    if (auto i = made_.find(files); i != made_.end())
      return i->second;
    auto ctx = upstream_tls::make(files, error, culprit);
    if (ctx)
      made_.emplace(files, ctx);
    return ctx;
  }

private:
  std::map<upstream_tls_files, std::shared_ptr<const upstream_tls>> made_;
};

std::chrono::milliseconds to_ms(caf::timespan x) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(x);
}

bool valid_route_name(std::string_view name) {
  if (name.empty() || name.size() > 64)
    return false;
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
  };
  if (!alnum(name.front()))
    return false;
  for (auto c : name)
    if (!alnum(c) && c != '-' && c != '_')
      return false;
  return true;
}

// Collects the strings of a value that may be one string or a list of them.
bool strings_of(const caf::config_value& value, std::vector<std::string>& out) {
  if (auto str = caf::get_if<std::string>(&value)) {
    out.push_back(*str);
    return true;
  }
  if (auto lst = caf::get_if<caf::config_value::list>(&value)) {
    for (auto& item : *lst) {
      auto str = caf::get_if<std::string>(&item);
      if (!str)
        return false;
      out.push_back(*str);
    }
    return true;
  }
  return false;
}

std::optional<std::string> read_secret_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return std::nullopt;
  std::ostringstream buf;
  buf << in.rdbuf();
  auto text = buf.str();
  // Files written by `echo` end with a newline that is not part of it.
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r'))
    text.pop_back();
  return text;
}

class route_parser {
public:
  route_parser(const route_defaults& defaults, const env_lookup& env,
               tls_contexts& contexts, std::string& error)
    : defaults_(defaults), env_(env), contexts_(contexts), error_(error) {
    // nop
  }

  bool fail(const std::string& name, std::string_view key,
            const std::string& what) {
    error_ = "route." + name + "." + std::string{key} + ": " + what;
    return false;
  }

  // Adds one secret per name in `value` (a string or a list), each read
  // by `read`; fails with `what` (`{}` is the name) on an empty one.
  template <class Read>
  bool add_secrets(const std::string& name, std::string_view key,
                   const caf::config_value& value, Read read,
                   std::string_view what) {
    std::vector<std::string> sources;
    if (!strings_of(value, sources))
      return fail(name, key, "expected a string or a list of strings");
    for (auto& source : sources) {
      std::optional<std::string> secret = read(source);
      if (!secret || secret->empty()) {
        auto at = what.find("{}");
        return fail(name, key,
                    std::string{what.substr(0, at)} + source
                      + std::string{what.substr(at + 2)});
      }
      raw_secrets_.push_back(std::move(*secret));
    }
    return true;
  }

  bool parse(const std::string& name, const caf::settings& section,
             route_config& r) {
    for (auto& kv : section) {
      bool known = false;
      for (auto k : known_keys)
        known = known || kv.first == k;
      for (auto k : delivery_option_keys)
        known = known || kv.first == k;
      known = known || is_guard_option(kv.first);
      if (!known)
        return fail(name, kv.first, "unknown option");
    }
    for (auto& kv : section) {
      auto& key = kv.first;
      auto& value = kv.second;
      if (key == "auth") {
        auto str = caf::get_if<std::string>(&value);
        auto mode = str ? parse_auth_mode(*str) : std::nullopt;
        if (!mode)
          return fail(name, key,
                      "unknown mode (none, token, github, standard-webhooks)");
        r.auth = *mode;
      } else if (key == "secret") {
        if (!strings_of(value, raw_secrets_))
          return fail(name, key, "expected a string or a list of strings");
      } else if (key == "secret-env") {
        if (!add_secrets(name, key, value, env_,
                         "environment variable {} is not set"))
          return false;
      } else if (key == "secret-file") {
        if (!add_secrets(name, key, value, read_secret_file,
                         "cannot read a secret from {}"))
          return false;
      } else if (key == "ttl" || key == "tolerance") {
        auto span = caf::get_if<caf::timespan>(&value);
        if (!span || span->count() <= 0)
          return fail(name, key, "expected a positive duration (e.g. 72h)");
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*span)
                    .count();
        if (key == "ttl" && ms > record_bounds::ttl_ms)
          return fail(name, key, "at most ten years (87840h)");
        if (key == "ttl")
          r.ttl_ms = ms;
        else
          r.tolerance_s = std::max<int64_t>(ms / 1000, 1);
      } else if (key == "on-duplicate") {
        auto str = caf::get_if<std::string>(&value);
        if (str && *str == "conflict")
          r.on_duplicate = duplicate_policy::conflict;
        else if (str && *str == "replay")
          r.on_duplicate = duplicate_policy::replay;
        else
          return fail(name, key, "expected conflict or replay");
      } else if (key == "body") {
        auto str = caf::get_if<std::string>(&value);
        if (str && *str == "json")
          r.body = body_format::json;
        else if (str && *str == "text")
          r.body = body_format::text;
        else
          return fail(name, key, "expected json or text");
      } else if (key == "body-limit") {
        auto num = caf::get_if<int64_t>(&value);
        if (!num || *num < 1
            || static_cast<std::size_t>(*num) > defaults_.body_limit)
          return fail(name, key,
                      "expected 1.." + std::to_string(defaults_.body_limit)
                        + " (http.body-limit)");
        r.body_limit = static_cast<std::size_t>(*num);
      } else if (key == "allow") {
        std::vector<std::string> nets;
        if (!strings_of(value, nets))
          return fail(name, key, "expected a list of CIDRs");
        for (auto& net : nets) {
          auto parsed = parse_cidr(net);
          if (!parsed)
            return fail(name, key, "invalid network \"" + net + "\"");
          r.allow.push_back(*parsed);
        }
      } else if (key == "upstream") {
        auto str = caf::get_if<std::string>(&value);
        auto target = str ? parse_upstream_url(*str) : std::nullopt;
        if (!target)
          return fail(name, key, std::string{upstream_url_form});
        upstream_url_ = std::move(*target);
      } else if (key == "upstream-connect-timeout" || key == "upstream-timeout"
                 || key == "respond-after") {
        auto span = caf::get_if<caf::timespan>(&value);
        if (!span || span->count() < 0
            || (key != "respond-after" && span->count() == 0))
          return fail(name, key, "expected a positive duration (e.g. 2s)");
        if (key == "upstream-connect-timeout")
          connect_timeout_ = to_ms(*span);
        else if (key == "upstream-timeout")
          response_timeout_ = to_ms(*span);
        else
          r.respond_after = to_ms(*span);
      } else if (key == "upstream-connections") {
        auto num = caf::get_if<int64_t>(&value);
        if (!num || *num < 1 || *num > 10000)
          return fail(name, key, "expected 1..10000");
        max_connections_ = static_cast<std::size_t>(*num);
      } else if (key == "upstream-max-response") {
        auto num = caf::get_if<int64_t>(&value);
        if (!num || *num < 1 || *num > 16 * 1024 * 1024)
          return fail(name, key, "expected 1..16777216 (bytes)");
        max_response_ = static_cast<std::size_t>(*num);
      } else if (is_guard_option(key)) {
        if (auto why = apply_guard_option(key, value, r.guards); !why.empty())
          return fail(name, key, why);
      } else if (key.rfind("delivery", 0) == 0
                 || key.rfind("reconcile", 0) == 0) {
        delivery_set_ = true;
        if (auto why = apply_delivery_option(key, value, r.delivery,
                                             r.reconcile);
            !why.empty())
          return fail(name, key, why);
      } else {
        for (auto& [option, part] : tls_options) {
          if (key != option)
            continue;
          auto str = caf::get_if<std::string>(&value);
          if (!str || str->empty())
            return fail(name, key, "expected a file name");
          tls_files_.file(part) = *str;
        }
      }
    }
    auto tls_set = false;
    for (auto& option : tls_options)
      tls_set = tls_set || !tls_files_.file(option.second).empty();
    if (upstream_url_) {
      r.upstream = std::move(upstream_url_);
    } else if ((connect_timeout_ || response_timeout_ || max_connections_
                || max_response_ || tls_set || r.respond_after.count() > 0)
               && !r.upstream) {
      return fail(name, "upstream", "upstream options set without upstream");
    }
    if (r.upstream && !tls_attached(name, *r.upstream))
      return false;
    if (r.upstream) {
      if (connect_timeout_)
        r.upstream->connect_timeout = *connect_timeout_;
      if (response_timeout_)
        r.upstream->response_timeout = *response_timeout_;
      if (max_connections_)
        r.upstream->max_connections = *max_connections_;
      if (max_response_)
        r.upstream->max_response = *max_response_;
    }
    // The default route may get its upstream from the command line.
    auto upstream = r.upstream.has_value()
                    || (name == "default" && !defaults_.default_upstream.empty());
    if (auto why = finish_delivery_policy(r.delivery, upstream,
                                          r.respond_after, delivery_set_);
        !why.empty())
      return fail(name, "delivery", why);
    {
      std::string why;
      auto culprit = finish_guardrails(r.guards, r.auth,
                                       r.body == body_format::text, why);
      if (!culprit.empty())
        return fail(name, culprit, why);
    }
    // An https reconcile URL is verified with the upstream's TLS files.
    if (r.reconcile.target && !tls_attached(name, *r.reconcile.target))
      return false;
    return finish(name, r);
  }

private:
  // Gives an https upstream its TLS context; refuses TLS files for a plain
  // one, and half a client certificate.
  bool tls_attached(const std::string& name, upstream_target& target) {
    auto& f = tls_files_;
    if (!target.https) {
      for (auto& [option, part] : tls_options)
        if (!f.file(part).empty())
          return fail(name, option, "set, but the upstream is not https://");
      return true;
    }
    if (f.client_cert.empty() != f.client_key.empty())
      return fail(name,
                  f.client_cert.empty() ? "upstream-client-cert"
                                        : "upstream-client-key",
                  "missing: a client certificate needs both "
                  "upstream-client-cert and upstream-client-key");
    std::string why;
    auto culprit = upstream_tls_files::part::ca_file;
    target.tls = contexts_.get(f, why, culprit);
    if (!target.tls)
      return fail(name, option_of(culprit), why);
    return true;
  }

  bool finish(const std::string& name, route_config& r) {
    if (r.auth == auth_mode::none) {
      if (!raw_secrets_.empty())
        return fail(name, "secret", "set, but auth is none");
      return true;
    }
    if (raw_secrets_.empty())
      return fail(name, "secret",
                  "auth " + std::string{to_string(r.auth)}
                    + " needs secret, secret-env or secret-file");
    for (auto& s : raw_secrets_) {
      // An empty secret would accept `?token=` or an HMAC anyone can make.
      if (s.empty())
        return fail(name, "secret", "must not be empty");
      if (r.auth == auth_mode::standard_webhooks) {
        auto key = decode_whsec(s);
        if (!key || key->empty())
          return fail(name, "secret", "not a whsec_<base64> secret");
        r.secrets.push_back(std::move(*key));
      } else {
        r.secrets.push_back(s);
      }
    }
    return true;
  }

  const route_defaults& defaults_;
  const env_lookup& env_;
  tls_contexts& contexts_;
  std::string& error_;
  std::vector<std::string> raw_secrets_;
  std::optional<upstream_target> upstream_url_;
  bool delivery_set_ = false;
  std::optional<std::chrono::milliseconds> connect_timeout_;
  std::optional<std::chrono::milliseconds> response_timeout_;
  std::optional<std::size_t> max_connections_;
  std::optional<std::size_t> max_response_;
  upstream_tls_files tls_files_;
};

route_config default_route(const route_defaults& defaults) {
  route_config r;
  r.name = "default";
  r.path = "/v1/webhook";
  r.ttl_ms = defaults.ttl_ms;
  r.body_limit = defaults.body_limit;
  return r;
}

} // namespace

const route_config* route_table::by_path(std::string_view path) const {
  for (auto& r : routes)
    if (r.path == path)
      return &r;
  return nullptr;
}

const route_config* route_table::by_name(std::string_view name) const {
  for (auto& r : routes)
    if (r.name == name)
      return &r;
  return nullptr;
}

std::optional<std::string> process_env(const std::string& name) {
  if (auto val = std::getenv(name.c_str()))
    return std::string{val};
  return std::nullopt;
}

std::optional<route_table> make_routes(const caf::settings* section,
                                       const route_defaults& defaults,
                                       const env_lookup& env,
                                       std::string& error) {
  route_table table;
  tls_contexts contexts;
  table.routes.push_back(default_route(defaults));
  if (!defaults.default_upstream.empty()) {
    auto target = parse_upstream_url(defaults.default_upstream);
    if (!target) {
      error = "upstream: " + std::string{upstream_url_form};
      return std::nullopt;
    }
    if (target->https) {
      // The command line has no TLS files: the system CA store.
      std::string why;
      auto culprit = upstream_tls_files::part::ca_file;
      target->tls = contexts.get({}, why, culprit);
      if (!target->tls) {
        error = "upstream: " + why;
        return std::nullopt;
      }
    }
    table.routes.front().upstream = std::move(target);
  }
  if (section == nullptr)
    return table;
  for (auto& kv : *section) {
    auto& name = kv.first;
    auto sub = caf::get_if<caf::settings>(&kv.second);
    if (!valid_route_name(name) || !sub) {
      error = "route." + name
              + ": expected a section [route.NAME] with NAME of a-z, 0-9, "
                "- and _ (at most 64)";
      return std::nullopt;
    }
    route_config r = name == "default" ? default_route(defaults) : [&] {
      auto x = default_route(defaults);
      x.name = name;
      x.path = "/v1/webhook/" + name;
      return x;
    }();
    route_parser parser{defaults, env, contexts, error};
    if (!parser.parse(name, *sub, r))
      return std::nullopt;
    if (name == "default") {
      // --upstream on the command line wins over the file.
      if (table.routes.front().upstream && !defaults.default_upstream.empty())
        r.upstream = table.routes.front().upstream;
      table.routes.front() = std::move(r);
    }
    else
      table.routes.push_back(std::move(r));
  }
  return table;
}

} // namespace oncegate::gateway
