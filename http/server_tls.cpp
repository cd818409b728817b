#include "http/server_tls.hpp"

#include <ctime>
#include <utility>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/ssl/context.hpp>

#include "common/tls_profile.hpp"
#include "http/tls_support.hpp"

namespace oncegate::gateway {

namespace ssl = boost::asio::ssl;

namespace {

// The key is read without a passphrase: OpenSSL's default callback would
// prompt on the terminal and block the start (or a reload) for good.
int no_passphrase(char*, int, int, void*) {
  return 0;
}

// `http/1.1` when the client offers it. Without a match the handshake goes
// on without ALPN, as with a client that offers none (curl, Python and the
// webhook senders all offer http/1.1 or nothing).
int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen,
                const unsigned char* in, unsigned int inlen, void*) {
  static const unsigned char ours[] = "\x08http/1.1";
  unsigned char* chosen = nullptr;
  if (SSL_select_next_proto(&chosen, outlen, ours, sizeof(ours) - 1, in,
                            inlen)
      != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

struct bio_free {
  void operator()(BIO* x) const {
    BIO_free(x);
  }
};
struct x509_free {
  void operator()(X509* x) const {
    X509_free(x);
  }
};
struct pkey_free {
  void operator()(EVP_PKEY* x) const {
    EVP_PKEY_free(x);
  }
};
using bio_ptr = std::unique_ptr<BIO, bio_free>;
using x509_ptr = std::unique_ptr<X509, x509_free>;
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;

bio_ptr memory_bio(const std::string& text) {
  return bio_ptr{BIO_new_mem_buf(text.data(), static_cast<int>(text.size()))};
}

// Whether the oldest error on the queue is PEM's "no start line": the file
// holds no (further) PEM block of the kind asked for.
bool no_pem_block() {
  auto code = ERR_peek_error();
  return ERR_GET_LIB(code) == ERR_LIB_PEM
         && ERR_GET_REASON(code) == PEM_R_NO_START_LINE;
}

std::string serial_text(X509* cert) {
  std::string res;
  if (auto bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr)) {
    if (auto hex = BN_bn2hex(bn)) {
      res = hex;
      OPENSSL_free(hex);
    }
    BN_free(bn);
  }
  return res;
}

std::string time_text(const ASN1_TIME* t) {
  std::tm tm{};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1)
    return "?";
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Whether `text` holds a PEM block at all. OpenSSL 3's decoders report
// text without one as "unsupported", which says less.
bool has_pem_block(const std::string& text) {
  return text.find("-----BEGIN ") != std::string::npos;
}

// Reads the chain (leaf first) into `native`; false with `error`.
bool use_chain(SSL_CTX* native, const std::string& path,
               const std::string& pem, std::string& error) {
  if (!has_pem_block(pem)) {
    error = "no PEM certificate in " + path
            + " (expected -----BEGIN CERTIFICATE-----)";
    return false;
  }
  auto bio = memory_bio(pem);
  x509_ptr leaf{PEM_read_bio_X509_AUX(bio.get(), nullptr, no_passphrase,
                                      nullptr)};
  if (!leaf) {
    if (no_pem_block()) {
      ERR_clear_error();
      error = "no PEM certificate in " + path
              + " (expected -----BEGIN CERTIFICATE-----)";
    } else {
      error = "cannot load a certificate from " + path + ": "
              + detail::openssl_reason();
    }
    return false;
  }
  if (SSL_CTX_use_certificate(native, leaf.get()) != 1) {
    error = "cannot use the certificate in " + path + ": "
            + detail::openssl_reason();
    return false;
  }
  // The rest of the file: the intermediates the leaf is sent with.
  for (;;) {
    x509_ptr ca{PEM_read_bio_X509(bio.get(), nullptr, no_passphrase, nullptr)};
    if (!ca)
      break;
    if (SSL_CTX_add1_chain_cert(native, ca.get()) != 1) {
      error = "cannot use a chain certificate in " + path + ": "
              + detail::openssl_reason();
      return false;
    }
  }
  // The loop ends at the end of the file ("no start line") or at a block
  // that does not parse, which must not pass silently.
  if (!no_pem_block() && ERR_peek_error() != 0) {
    error = "cannot load a chain certificate from " + path + ": "
            + detail::openssl_reason();
    return false;
  }
  ERR_clear_error();
  return true;
}

bool use_key(SSL_CTX* native, const server_tls_files& files,
             const std::string& pem, std::string& error) {
  if (!has_pem_block(pem)) {
    error = "no PEM private key in " + files.key
            + " (expected -----BEGIN PRIVATE KEY-----)";
    return false;
  }
  if (pem.find("ENCRYPTED") != std::string::npos) {
    error = files.key + " is encrypted: the node reads an unencrypted key "
                        "(readable by its user only)";
    return false;
  }
  auto bio = memory_bio(pem);
  pkey_ptr key{PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase,
                                       nullptr)};
  if (!key) {
    if (no_pem_block()) {
      ERR_clear_error();
      error = "no PEM private key in " + files.key
              + " (expected -----BEGIN PRIVATE KEY-----)";
    } else {
      error = "cannot load a private key from " + files.key + ": "
              + detail::openssl_reason();
    }
    return false;
  }
  if (SSL_CTX_use_PrivateKey(native, key.get()) != 1) {
    // OpenSSL checks the key against the certificate as it takes it.
    unsigned long code = 0;
    auto reason = detail::openssl_reason(&code);
    if (ERR_GET_LIB(code) == ERR_LIB_X509
        && ERR_GET_REASON(code) == X509_R_KEY_VALUES_MISMATCH)
      error = files.key + " is not the key of " + files.certificate;
    else
      error = "cannot use the private key in " + files.key + ": " + reason;
    return false;
  }
  // A key of another type than the certificate's lands in another slot
  // unchecked: this catches it.
  if (SSL_CTX_check_private_key(native) != 1) {
    error = files.key + " is not the key of " + files.certificate + ": "
            + detail::openssl_reason();
    return false;
  }
  return true;
}

} // namespace

server_tls::server_tls(server_tls_files files, std::unique_ptr<ssl::context> ctx)
  : files_(std::move(files)), ctx_(std::move(ctx)) {
  // nop
}

server_tls::~server_tls() {
  // nop
}

std::shared_ptr<const server_tls>
server_tls::load(const server_tls_files& files, std::string& error,
                 server_tls_files::part& culprit) {
  using part = server_tls_files::part;
  ERR_clear_error();
  std::string cert_pem;
  std::string key_pem;
  // The key's text is wiped from memory on every way out; the context
  // keeps its own copy of the key.
  struct wipe {
    std::string& text;
    ~wipe() {
      if (!text.empty())
        OPENSSL_cleanse(text.data(), text.size());
    }
  } wipe_key{key_pem};
  culprit = part::certificate;
  if (!detail::read_bounded_file(files.certificate, max_file_bytes, cert_pem,
                                 error))
    return nullptr;
  culprit = part::key;
  if (!detail::read_bounded_file(files.key, max_file_bytes, key_pem, error))
    return nullptr;
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
  auto native = ctx->native_handle();
  // Protocol versions, cipher suites, groups, preference, renegotiation:
  // the one profile of every TLS context we make.
  culprit = part::certificate;
  if (!tls::apply_profile(native, error))
    return nullptr;
  // An idle keep-alive connection gives its read and write buffers back
  // (about 34 KiB each): thousands of senders may hold one open.
  SSL_CTX_set_mode(native, SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_alpn_select_cb(native, select_alpn, nullptr);
  culprit = part::certificate;
  if (!use_chain(native, files.certificate, cert_pem, error))
    return nullptr;
  culprit = part::key;
  if (!use_key(native, files, key_pem, error))
    return nullptr;
  std::shared_ptr<server_tls> res{new server_tls(files, std::move(ctx))};
  auto leaf = SSL_CTX_get0_certificate(native);
  res->serial_ = serial_text(leaf);
  res->not_after_ = time_text(X509_get0_notAfter(leaf));
  res->out_of_validity_ = X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0
                          || X509_cmp_current_time(X509_get0_notBefore(leaf))
                               > 0;
  return res;
}

} // namespace oncegate::gateway
