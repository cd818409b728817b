#include "tests/http/tls_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "tests/http/sockets.hpp"

namespace oncegate::test {

namespace {

void die(const std::string& what) {
  std::fprintf(stderr, "tls_server: %s\n", what.c_str());
  std::abort();
}

void run(const std::string& cmd) {
  if (std::system((cmd + " >/dev/null 2>&1").c_str()) != 0)
    die("failed: " + cmd);
}

// The directory, removed when the process ends.
struct cert_dir {
  std::string path;

  cert_dir() {
    auto base = std::getenv("TMPDIR");
    std::string tmpl = std::string{base ? base : "/tmp"}
                       + "/oncegate-upstream-tls-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr)
      die("mkdtemp failed");
    path = tmpl;
  }

  ~cert_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

constexpr const char* ec_key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
                               " -nodes";

// A self-signed CA `name`.pem / `name`.key in `dir`.
void make_ca(const std::string& dir, const std::string& name,
             const std::string& cn) {
  run("openssl req -x509 " + std::string{ec_key} + " -days 2 -subj '/CN=" + cn
      + "' -addext basicConstraints=critical,CA:TRUE"
        " -addext keyUsage=critical,keyCertSign,cRLSign -keyout "
      + dir + "/" + name + ".key -out " + dir + "/" + name + ".pem");
}

// A leaf `name`.pem / `name`.key signed by CA `ca`, with the extensions
// `ext` (one per line).
void make_leaf(const std::string& dir, const std::string& name,
               const std::string& ca, const std::string& cn,
               const std::string& ext) {
  auto base = dir + "/" + name;
  run("openssl req -new " + std::string{ec_key} + " -subj '/CN=" + cn
      + "' -keyout " + base + ".key -out " + base + ".csr");
  std::ofstream{base + ".ext"} << ext << "basicConstraints=CA:FALSE\n";
  run("openssl x509 -req -in " + base + ".csr -CA " + dir + "/" + ca
      + ".pem -CAkey " + dir + "/" + ca + ".key -set_serial 0x$(openssl rand "
        "-hex 8) -days 2 -extfile " + base + ".ext -out " + base + ".pem");
}

std::string openssl_reason() {
  auto code = ERR_get_error();
  ERR_clear_error();
  if (code == 0)
    return "closed";
  auto reason = ERR_reason_error_string(code);
  return reason ? reason : "error " + std::to_string(code);
}

// The value of header `name` (lower case) in `head`, "" when absent.
std::string header(const std::string& head, const std::string& name) {
  auto pos = lower(head).find("\r\n" + name + ":");
  if (pos == std::string::npos)
    return {};
  pos += name.size() + 3;
  auto eol = head.find("\r\n", pos);
  auto value = head.substr(pos, eol - pos);
  while (!value.empty() && value.front() == ' ')
    value.erase(0, 1);
  return value;
}

} // namespace

const test_certs& test_certs::get() {
  static cert_dir dir;
  static test_certs certs = [] {
    test_certs c;
    auto& d = dir.path;
    c.dir = d;
    make_ca(d, "ca", "oncegate test CA");
    make_ca(d, "other-ca", "a CA nobody trusts");
    auto server_ext = std::string{"subjectAltName=DNS:localhost,IP:127.0.0.1"
                                  "\nextendedKeyUsage=serverAuth\n"};
    make_leaf(d, "server", "ca", "localhost", server_ext);
    make_leaf(d, "stranger", "other-ca", "localhost", server_ext);
    make_leaf(d, "wrong-name", "ca", "wrong.example",
              "subjectAltName=DNS:wrong.example\n"
              "extendedKeyUsage=serverAuth\n");
    make_leaf(d, "client", "ca", "oncegate client",
              "extendedKeyUsage=clientAuth\n");
    c.ca = d + "/ca.pem";
    c.ca_key = d + "/ca.key";
    c.server = d + "/server.pem";
    c.server_key = d + "/server.key";
    c.wrong_name = d + "/wrong-name.pem";
    c.wrong_name_key = d + "/wrong-name.key";
    c.other_ca = d + "/other-ca.pem";
    c.stranger = d + "/stranger.pem";
    c.stranger_key = d + "/stranger.key";
    c.client = d + "/client.pem";
    c.client_key = d + "/client.key";
    return c;
  }();
  return certs;
}

tls_server::tls_server(tls_server_options opts) : opts_(std::move(opts)) {
  // OpenSSL writes to the socket itself (an alert to a client that left):
  // without MSG_NOSIGNAL, so a closed peer must not end the test process.
  std::signal(SIGPIPE, SIG_IGN);
  if (!opts_.cert.empty()) {
    ctx_ = SSL_CTX_new(TLS_server_method());
    if (ctx_ == nullptr
        || SSL_CTX_use_certificate_chain_file(ctx_, opts_.cert.c_str()) != 1
        || SSL_CTX_use_PrivateKey_file(ctx_, opts_.key.c_str(),
                                       SSL_FILETYPE_PEM)
             != 1)
      die("cannot load " + opts_.cert + ": " + openssl_reason());
    if (opts_.max_version != 0)
      SSL_CTX_set_max_proto_version(ctx_, opts_.max_version);
    if (!opts_.client_ca.empty()) {
      if (SSL_CTX_load_verify_locations(ctx_, opts_.client_ca.c_str(),
                                        nullptr)
          != 1)
        die("cannot load " + opts_.client_ca);
      SSL_CTX_set_client_CA_list(ctx_,
                                 SSL_load_client_CA_file(
                                   opts_.client_ca.c_str()));
      SSL_CTX_set_verify(ctx_,
                         SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                         nullptr);
    }
  }
  listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
  auto addr = loopback(0);
  if (listener_ < 0
      || ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr))
           != 0
      || ::listen(listener_, 64) != 0 || ::pipe(stop_) != 0)
    die("cannot listen");
  socklen_t len = sizeof(addr);
  ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

tls_server::~tls_server() {
  char c = 0;
  [[maybe_unused]] auto n = ::write(stop_[1], &c, 1);
  acceptor_.join();
  {
    // Wakes the workers blocked in SSL_read or SSL_accept.
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto fd : fds_)
      ::shutdown(fd, SHUT_RDWR);
  }
  for (auto& t : workers_)
    t.join();
  ::close(listener_);
  ::close(stop_[0]);
  ::close(stop_[1]);
  if (ctx_ != nullptr)
    SSL_CTX_free(ctx_);
}

std::vector<std::string> tls_server::server_names() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return names_;
}

std::vector<std::string> tls_server::failures() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return failures_;
}

bool tls_server::wait_closed(int n) {
  std::unique_lock<std::mutex> guard{mtx_};
  return cv_.wait_for(guard, std::chrono::seconds{10},
                      [&] { return closed_ >= n; });
}

void tls_server::accept_loop() {
  for (;;) {
    pollfd fds[] = {{stop_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0)
      continue;
    if (fds[0].revents != 0)
      return;
    auto fd = ::accept(listener_, nullptr, nullptr);
    if (fd < 0)
      continue;
    ++connections_;
    std::lock_guard<std::mutex> guard{mtx_};
    fds_.push_back(fd);
    workers_.emplace_back([this, fd] { serve(fd); });
  }
}

void tls_server::serve(int fd) {
  SSL* ssl = nullptr;
  bool ok = true;
  if (ctx_ != nullptr) {
    ssl = SSL_new(ctx_);
    SSL_set_fd(ssl, fd);
    ERR_clear_error();
    if (SSL_accept(ssl) != 1) {
      ok = false;
      ++failed_;
      std::lock_guard<std::mutex> guard{mtx_};
      failures_.push_back(openssl_reason());
    } else {
      ++handshakes_;
      auto name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
      std::lock_guard<std::mutex> guard{mtx_};
      names_.emplace_back(name ? name : "");
    }
  }
  auto read_some = [&](char* buf, int size) {
    return ssl ? SSL_read(ssl, buf, size)
               : static_cast<int>(::recv(fd, buf, size, 0));
  };
  auto write_all = [&](const std::string& bytes) {
    if (ssl)
      SSL_write(ssl, bytes.data(), static_cast<int>(bytes.size()));
    else
      send_all(fd, bytes);
  };
  std::string in;
  while (ok) {
    auto end = in.find("\r\n\r\n");
    if (end != std::string::npos
        && opts_.what == tls_server_options::mode::close_after_head)
      break;
    if (end != std::string::npos) {
      auto head = in.substr(0, end + 2);
      auto size = end + 4
                  + std::strtoul(header(head, "content-length").c_str(),
                                 nullptr, 10);
      if (in.size() >= size) {
        in.erase(0, size);
        ++requests_;
        if (opts_.what == tls_server_options::mode::close_after_request)
          break;
        auto body = "ok " + header(head, "idempotency-key");
        write_all("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                  "Content-Length: "
                  + std::to_string(body.size()) + "\r\n\r\n" + body);
        if (opts_.what == tls_server_options::mode::close_after_answer) {
          if (ssl)
            SSL_shutdown(ssl);
          break;
        }
        continue;
      }
    }
    char buf[4096];
    auto n = read_some(buf, sizeof(buf));
    if (n <= 0)
      break;
    in.append(buf, static_cast<std::size_t>(n));
  }
  if (ssl)
    SSL_free(ssl);
  std::lock_guard<std::mutex> guard{mtx_};
  fds_.erase(std::find(fds_.begin(), fds_.end(), fd));
  ::close(fd);
  ++closed_;
  cv_.notify_all();
}

silent_listener::silent_listener() {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  auto addr = loopback(0);
  if (fd_ < 0
      || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0
      || ::listen(fd_, 16) != 0)
    die("cannot listen");
  socklen_t len = sizeof(addr);
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
}

silent_listener::~silent_listener() {
  ::close(fd_);
}

} // namespace oncegate::test
