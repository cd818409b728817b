#include "cli/transport.hpp"

#include <algorithm>
#include <cctype>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include "http/upstream_tls.hpp"

namespace oncegate::cli {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;
using error_code = beast::error_code;
using tls_stream = beast::ssl_stream<beast::tcp_stream>;

std::string duration_text(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0)
    return std::to_string(d.count() / 1000) + " s";
  return std::to_string(d.count()) + " ms";
}

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-'
         || c == '_';
}

bool v6_char(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
}

// What to do about a failed handshake, after OpenSSL's reason: plain HTTP
// answered, or the verification result says whether the certificate's
// name or issuer was wrong (an expired certificate and the like say enough
// themselves).
std::string tls_hint(error_code ec, SSL* ssl, const node_address& where) {
  if (ec.category() == asio::error::get_ssl_category()
      && ERR_GET_REASON(static_cast<unsigned long>(ec.value()))
           == SSL_R_WRONG_VERSION_NUMBER)
    return "; is it a TLS listener? A node without http.tls-certificate "
           "serves http://";
  switch (SSL_get_verify_result(ssl)) {
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      return "; the node's certificate does not name " + where.host
             + ": give the node by a name or address its certificate "
               "carries";
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
      return "; no CA trusted here signed the node's certificate: give the "
             "CA's certificate with --ca-file=FILE or ONCEGATE_CA_FILE "
             "(without either, the system's CA store)";
    default:
      return {};
  }
}

// One request from resolution to the complete answer, on the caller's
// io_context, which runs until it is done. Each step is bounded: resolve
// and connect by the connect deadline, the TLS handshake, sending and
// reading by the request's. Beast's tcp_stream closes the socket when its
// deadline passes, so a node that accepts and never answers costs the
// deadline, no more. Over TLS the request is written only after a
// handshake that verified the node's certificate: a peer OpenSSL refused
// never sees a byte of it, the token included.
class exchange {
public:
  exchange(asio::io_context& ioc, const node_address& where,
           const transport_limits& limits,
           const gateway::upstream_tls* tls,
           http::request<http::string_body> req)
    : where_(where),
      limits_(limits),
      resolver_(ioc),
      resolve_timer_(ioc),
      plain_(ioc),
      tls_(tls ? std::make_unique<tls_stream>(ioc, tls->context()) : nullptr),
      req_(std::move(req)),
      deadline_(steady::now() + limits.request),
      connect_deadline_(std::min(steady::now() + limits.connect, deadline_)) {
    parser_.body_limit(limits.max_body);
    parser_.header_limit(static_cast<std::uint32_t>(limits.max_header));
  }

  void start() {
    error_code ec;
    auto addr = asio::ip::make_address(where_.host, ec);
    if (!ec) {
      endpoints_.emplace_back(addr, where_.port);
      return do_connect();
    }
    do_resolve();
  }

  std::variant<node_answer, transport_failure> result() {
    if (answer_)
      return std::move(*answer_);
    return transport_failure{failure_.empty() ? "no answer" : failure_};
  }

private:
  void do_resolve() {
    resolve_timer_.expires_at(connect_deadline_);
    resolve_timer_.async_wait([this](error_code ec) {
      if (!ec) {
        resolve_timed_out_ = true;
        resolver_.cancel();
      }
    });
    resolver_.async_resolve(
      where_.host, std::to_string(where_.port),
      [this](error_code ec, tcp::resolver::results_type results) {
        on_resolve(ec, std::move(results));
      });
  }

  void on_resolve(error_code ec, tcp::resolver::results_type results) {
    resolve_timer_.cancel();
    if (resolve_timed_out_)
      return fail("resolving " + where_.host + ": no answer within "
                  + duration_text(limits_.connect));
    if (ec)
      return fail("resolving " + where_.host + ": " + ec.message());
    for (auto& entry : results)
      endpoints_.push_back(entry.endpoint());
    do_connect();
  }

  // The TCP stream under TLS, or the plain one.
  beast::tcp_stream& tcp_layer() {
    return tls_ ? beast::get_lowest_layer(*tls_) : plain_;
  }

  // Calls `f` with the stream the request goes over.
  template <class F>
  void with_stream(F&& f) {
    if (tls_)
      f(*tls_);
    else
      f(plain_);
  }

  // An error of the TLS layer, described as OpenSSL has it.
  std::string describe(error_code ec) {
    if (!tls_)
      return ec.message();
    return gateway::detail::describe_tls_error(ec, tls_->native_handle());
  }

  void do_connect() {
    tcp_layer().expires_at(connect_deadline_);
    tcp_layer().async_connect(endpoints_,
                              [this](error_code ec, const tcp::endpoint&) {
                                on_connect(ec);
                              });
  }

  void on_connect(error_code ec) {
    if (ec == beast::error::timeout)
      return fail("connect: no connection within "
                  + duration_text(std::min(limits_.connect, limits_.request)));
    if (ec)
      return fail("connect: " + ec.message());
    tcp_layer().expires_at(deadline_);
    if (tls_)
      return do_handshake();
    do_write();
  }

  void do_handshake() {
    auto ssl = tls_->native_handle();
    std::string why;
    if (!gateway::detail::prepare_tls_client(ssl, where_.host, why))
      return fail("TLS: " + why);
    tls_->async_handshake(asio::ssl::stream_base::client,
                          [this](error_code ec) { on_handshake(ec); });
  }

  void on_handshake(error_code ec) {
    if (ec == beast::error::timeout)
      return fail("TLS handshake: not done within "
                  + duration_text(limits_.request));
    if (ec)
      return fail("TLS handshake: " + describe(ec)
                  + tls_hint(ec, tls_->native_handle(), where_));
    do_write();
  }

  void do_write() {
    with_stream([this](auto& stream) {
      http::async_write(stream, req_, [this](error_code ec, std::size_t) {
        on_write(ec);
      });
    });
  }

  void on_write(error_code ec) {
    if (ec == beast::error::timeout)
      return fail("no answer within " + duration_text(limits_.request));
    if (ec)
      return fail("sending the request: " + describe(ec));
    with_stream([this](auto& stream) {
      http::async_read(stream, buffer_, parser_,
                       [this](error_code ec, std::size_t) { on_read(ec); });
    });
  }

  void on_read(error_code ec) {
    if (ec == beast::error::timeout)
      return fail("no complete answer within "
                  + duration_text(limits_.request));
    if (ec == http::error::body_limit)
      return fail("the answer's body is larger than "
                  + std::to_string(limits_.max_body) + " bytes");
    if (ec == http::error::header_limit)
      return fail("the answer's header block is larger than "
                  + std::to_string(limits_.max_header) + " bytes");
    if (ec == http::error::end_of_stream || ec == asio::error::eof)
      return fail("the node closed the connection without a complete "
                  "answer");
    if (ec)
      return fail("reading the answer: " + describe(ec));
    auto& res = parser_.get();
    node_answer out;
    out.status = static_cast<int>(res.result_int());
    if (auto ct = res.find(http::field::content_type); ct != res.end())
      out.content_type = std::string{ct->value()};
    if (auto ra = res.find(http::field::retry_after); ra != res.end())
      out.retry_after = std::string{ra->value()};
    out.body = std::move(res.body());
    answer_ = std::move(out);
    close();
  }

  void fail(std::string what) {
    failure_ = std::move(what);
    close();
  }

  // No TLS close_notify: the answer is complete (or given up on), and
  // waiting for the node's reply to it would only cost time.
  void close() {
    error_code ignored;
    tcp_layer().socket().shutdown(tcp::socket::shutdown_both, ignored);
    tcp_layer().close();
  }

  const node_address& where_;
  const transport_limits& limits_;
  tcp::resolver resolver_;
  asio::steady_timer resolve_timer_;
  bool resolve_timed_out_ = false;
  std::vector<tcp::endpoint> endpoints_;
  beast::tcp_stream plain_;
  std::unique_ptr<tls_stream> tls_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> req_;
  http::response_parser<http::string_body> parser_;
  steady::time_point deadline_;
  steady::time_point connect_deadline_;
  std::optional<node_answer> answer_;
  std::string failure_;
};

} // namespace

std::string node_address::authority() const {
  auto port_text = std::to_string(port);
  if (host.find(':') != std::string::npos)
    return "[" + host + "]:" + port_text;
  return host + ":" + port_text;
}

std::string node_address::url() const {
  return (tls ? "https://" : "http://") + authority();
}

std::variant<node_address, std::string> parse_node_address(std::string_view text) {
  auto lower_prefix = [&text](std::string_view prefix) {
    if (text.size() < prefix.size())
      return false;
    for (size_t i = 0; i < prefix.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(text[i])) != prefix[i])
        return false;
    return true;
  };
  bool tls = false;
  if (lower_prefix("https://")) {
    tls = true;
    text.remove_prefix(8);
  } else if (lower_prefix("http://")) {
    text.remove_prefix(7);
  } else if (text.find("://") != std::string_view::npos) {
    return std::string{"expected http://HOST:PORT, https://HOST:PORT or "
                       "HOST:PORT"};
  }
  if (!text.empty() && text.back() == '/')
    text.remove_suffix(1);
  if (text.find_first_of("/?#@") != std::string_view::npos)
    return std::string{"expected http://HOST:PORT without a path, query or "
                       "user"};
  node_address out;
  out.tls = tls;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos)
      return std::string{"unclosed [ in the address"};
    auto host = text.substr(1, close - 1);
    if (host.empty() || !std::all_of(host.begin(), host.end(), v6_char))
      return std::string{"expected an IPv6 address in [ ]"};
    out.host = std::string{host};
    auto rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':')
        return std::string{"expected :PORT after ]"};
      port_text = rest.substr(1);
      if (port_text.empty())
        return std::string{"expected a port after :"};
    }
  } else {
    auto colon = text.find(':');
    if (colon != std::string_view::npos
        && text.find(':', colon + 1) != std::string_view::npos)
      return std::string{"write an IPv6 address in brackets: [::1]:8080"};
    auto host = text.substr(0, colon);
    if (host.empty() || !std::all_of(host.begin(), host.end(), name_char))
      return std::string{"expected a host name or address"};
    out.host = std::string{host};
    if (colon != std::string_view::npos) {
      port_text = text.substr(colon + 1);
      if (port_text.empty())
        return std::string{"expected a port after :"};
    }
  }
  if (!port_text.empty()) {
    uint32_t port = 0;
    if (port_text.size() > 5
        || !std::all_of(port_text.begin(), port_text.end(),
                        [](char c) { return c >= '0' && c <= '9'; }))
      return std::string{"the port must be 1..65535"};
    for (auto c : port_text)
      port = port * 10 + static_cast<uint32_t>(c - '0');
    if (port < 1 || port > 65535)
      return std::string{"the port must be 1..65535"};
    out.port = static_cast<uint16_t>(port);
  }
  return out;
}

std::variant<std::shared_ptr<const gateway::upstream_tls>, std::string>
make_client_tls(const std::string& ca_file) {
  std::string error;
  auto culprit = gateway::upstream_tls_files::part::ca_file;
  gateway::upstream_tls_files files;
  files.ca_file = ca_file;
  if (auto ctx = gateway::upstream_tls::make(files, error, culprit))
    return ctx;
  return error;
}

node_client::node_client(node_address where, std::string token,
                         transport_limits limits, std::string user_agent,
                         std::shared_ptr<const gateway::upstream_tls> tls)
  : where_(std::move(where)),
    token_(std::move(token)),
    limits_(limits),
    user_agent_(std::move(user_agent)),
    tls_(std::move(tls)) {
  // nop
}

std::variant<node_answer, transport_failure>
node_client::send(const node_request& req) const {
  auto verb = http::string_to_verb(req.method);
  if (verb == http::verb::unknown)
    return transport_failure{"unknown method " + req.method};
  http::request<http::string_body> msg{verb, req.target, 11};
  msg.set(http::field::host, where_.authority());
  msg.set(http::field::user_agent, user_agent_);
  msg.set(http::field::accept, "application/json, application/problem+json");
  msg.set(http::field::connection, "close");
  if (!token_.empty())
    msg.set(http::field::authorization, "Bearer " + token_);
  if (!req.json_body.empty()) {
    msg.set(http::field::content_type, "application/json");
    msg.body() = req.json_body;
  }
  msg.prepare_payload();
  if (where_.tls && !tls_)
    return transport_failure{"no TLS context for an https:// node"};
  asio::io_context ioc;
  exchange ex{ioc, where_, limits_, where_.tls ? tls_.get() : nullptr,
              std::move(msg)};
  ex.start();
  ioc.run();
  return ex.result();
}

} // namespace oncegate::cli
