#include "link/tls_identity.hpp"

// The node-identity rule (tls_identity.hpp): node names in certificates,
// and reading and checking the cluster CA and a node's own certificate and
// key. No connection, no SSL_CTX and no wording of errors here: the two
// TLS units (replication/tls_transport, routing/peer_tls) do those.

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace oncegate::tls {

void openssl_free::operator()(x509_st* p) const {
  X509_free(p);
}

void openssl_free::operator()(evp_pkey_st* p) const {
  EVP_PKEY_free(p);
}

namespace {

struct bio_free {
  void operator()(BIO* p) const { BIO_free(p); }
};

struct store_free {
  void operator()(X509_STORE* p) const { X509_STORE_free(p); }
  void operator()(X509_STORE_CTX* p) const { X509_STORE_CTX_free(p); }
};

using bio_ptr = std::unique_ptr<BIO, bio_free>;
using store_ptr = std::unique_ptr<X509_STORE, store_free>;
using store_ctx_ptr = std::unique_ptr<X509_STORE_CTX, store_free>;

constexpr std::string_view name_prefix = "node-";
constexpr std::string_view name_suffix = ".oncegate";

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i) {
    auto x = a[i] >= 'A' && a[i] <= 'Z' ? a[i] - 'A' + 'a' : a[i];
    if (x != b[i])
      return false;
  }
  return true;
}

// Calls `fn` with each DNS subjectAltName of `cert`; false if it has no
// subjectAltName extension.
template <class Fn>
bool for_each_dns_name(x509_st* cert, Fn fn) {
  auto names = static_cast<GENERAL_NAMES*>(
    X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr)
    return false;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    auto name = sk_GENERAL_NAME_value(names, i);
    if (name->type != GEN_DNS)
      continue;
    auto str = name->d.dNSName;
    fn(std::string_view{
      reinterpret_cast<const char*>(ASN1_STRING_get0_data(str)),
      static_cast<size_t>(ASN1_STRING_length(str))});
  }
  GENERAL_NAMES_free(names);
  return true;
}

int no_passphrase(char*, int, int, void*) {
  return 0; // encrypted keys are refused rather than prompted for
}

// Every certificate in the PEM file `path`, in order; false with
// `unreadable` or the error set if it cannot be opened or holds none.
bool read_certificates(const std::string& path, std::vector<x509_ptr>& out,
                       bool& unreadable, std::string& detail) {
  bio_ptr bio{BIO_new_file(path.c_str(), "r")};
  unreadable = !bio;
  if (unreadable) {
    detail = openssl_error();
    return false;
  }
  while (auto x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr))
    out.emplace_back(x);
  if (out.empty()) {
    detail = openssl_error();
    return false;
  }
  ERR_clear_error(); // the end of the file
  return true;
}

// The private key in the PEM file `path` (see `identity_files`).
bool read_key(const std::string& path,
              const std::optional<std::string>& passphrase, pkey_ptr& out,
              identity_failure& why) {
  bio_ptr bio{BIO_new_file(path.c_str(), "r")};
  if (!bio) {
    why.step = identity_failure::key_unreadable;
    why.detail = openssl_error();
    return false;
  }
  pem_password_cb* cb = passphrase ? nullptr : no_passphrase;
  // With a null callback, OpenSSL takes `u` as the passphrase.
  auto u = passphrase && !passphrase->empty()
             ? const_cast<char*>(passphrase->c_str())
             : nullptr;
  out.reset(PEM_read_bio_PrivateKey(bio.get(), nullptr, cb, u));
  if (!out) {
    why.step = identity_failure::key_unusable;
    why.detail = openssl_error();
    return false;
  }
  return true;
}

// Empty if `leaf` (with the intermediates `chain`) chains to one of `cas`
// for `purpose`, else the verification error.
std::string chain_error(const ca_bundle& cas, x509_st* leaf,
                        const std::vector<x509_ptr>& chain,
                        tls_purpose purpose) {
  store_ptr store{X509_STORE_new()};
  store_ctx_ptr ctx{X509_STORE_CTX_new()};
  STACK_OF(X509)* untrusted = sk_X509_new_null();
  for (auto& c : chain)
    sk_X509_push(untrusted, c.get());
  auto id = purpose == tls_purpose::server ? X509_PURPOSE_SSL_SERVER
                                           : X509_PURPOSE_SSL_CLIENT;
  bool added = store != nullptr;
  for (auto& ca : cas)
    added = added && X509_STORE_add_cert(store.get(), ca.get()) == 1;
  bool ok = added && ctx
            && X509_STORE_CTX_init(ctx.get(), store.get(), leaf, untrusted)
                 == 1
            && (purpose == tls_purpose::any
                || X509_STORE_CTX_set_purpose(ctx.get(), id) == 1)
            && X509_verify_cert(ctx.get()) == 1;
  auto err = ctx ? X509_STORE_CTX_get_error(ctx.get()) : X509_V_OK;
  sk_X509_free(untrusted);
  ERR_clear_error();
  return ok ? std::string{} : X509_verify_cert_error_string(err);
}

} // namespace

std::string openssl_error() {
  std::string out;
  while (auto e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty())
      out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown error" : out;
}

// -- node names ---------------------------------------------------------------

std::string node_name(uint64_t id) {
  return std::string{name_prefix} + std::to_string(id)
         + std::string{name_suffix};
}

uint64_t parse_node_name(std::string_view dns) {
  if (dns.size() <= name_prefix.size() + name_suffix.size()
      || !iequals(dns.substr(0, name_prefix.size()), name_prefix)
      || !iequals(dns.substr(dns.size() - name_suffix.size()), name_suffix))
    return 0;
  auto digits = dns.substr(name_prefix.size(), dns.size() - name_prefix.size()
                                                 - name_suffix.size());
  if (digits.size() > 19 || digits[0] == '0')
    return 0;
  uint64_t id = 0;
  for (auto c : digits) {
    if (c < '0' || c > '9')
      return 0;
    id = id * 10 + static_cast<uint64_t>(c - '0');
  }
  return id;
}

bool names_node(x509_st* cert, uint64_t id) {
  auto name = node_name(id);
  return cert != nullptr
         && X509_check_host(cert, name.data(), name.size(),
                            X509_CHECK_FLAG_NO_WILDCARDS
                              | X509_CHECK_FLAG_NEVER_CHECK_SUBJECT,
                            nullptr)
              == 1;
}

uint64_t named_node(x509_st* cert, std::string& why) {
  uint64_t found = 0;
  int count = 0;
  auto has_names = for_each_dns_name(cert, [&](std::string_view dns) {
    if (auto id = parse_node_name(dns); id != 0) {
      found = id;
      ++count;
    }
  });
  if (!has_names) {
    why = "certificate has no subjectAltName";
    return 0;
  }
  if (count == 0) {
    why = "certificate names no node-<id>.oncegate";
    return 0;
  }
  if (count > 1) {
    why = "certificate names more than one node";
    return 0;
  }
  return found;
}

uint64_t node_id_of_cert_file(const std::string& path, std::string& error) {
  std::vector<x509_ptr> certs;
  bool unreadable = false;
  std::string detail;
  if (!read_certificates(path, certs, unreadable, detail)) {
    error = "cannot read a certificate from " + path + ": " + detail;
    return 0;
  }
  return named_node(certs.front().get(), error);
}

std::string dns_names(x509_st* cert) {
  std::string out;
  for_each_dns_name(cert, [&](std::string_view dns) {
    if (!out.empty())
      out += ',';
    out += printable(dns.data(), dns.size(), 64);
  });
  return out.empty() ? "(none)" : out;
}

std::string printable(const char* data, size_t len, size_t limit) {
  std::string out;
  for (size_t i = 0; i < len && i < limit; ++i) {
    auto c = static_cast<unsigned char>(data[i]);
    out += (c >= 0x20 && c < 0x7f && c != ' ') ? static_cast<char>(c) : '?';
  }
  if (len > limit)
    out += "...";
  return out;
}

// -- loading and checking -----------------------------------------------------

ca_bundle copy_of(const ca_bundle& cas) {
  ca_bundle out;
  for (auto& ca : cas) {
    X509_up_ref(ca.get());
    out.emplace_back(ca.get());
  }
  return out;
}

bool is_one_of(x509_st* cert, const ca_bundle& cas) {
  for (auto& ca : cas)
    if (cert != nullptr && X509_cmp(cert, ca.get()) == 0)
      return true;
  return false;
}

bool load_ca(const std::string& path, ca_bundle& out, identity_failure& why) {
  ca_bundle certs;
  bool unreadable = false;
  if (!read_certificates(path, certs, unreadable, why.detail)) {
    why.step = unreadable ? identity_failure::ca_unreadable
                          : identity_failure::ca_empty;
    return false;
  }
  if (certs.size() > max_cluster_cas) {
    why.step = identity_failure::ca_several;
    return false;
  }
  for (auto& cert : certs) {
    if (X509_check_ca(cert.get()) < 1) {
      why.step = identity_failure::ca_not_ca;
      return false;
    }
  }
  out = std::move(certs);
  return true;
}

bool load_identity(const identity_files& files, const ca_bundle& cas,
                   const std::vector<tls_purpose>& purposes, uint64_t self_id,
                   node_identity& out, identity_failure& why) {
  node_identity result;
  {
    std::vector<x509_ptr> certs;
    bool unreadable = false;
    if (!read_certificates(files.cert_file, certs, unreadable, why.detail)) {
      why.step = unreadable ? identity_failure::cert_unreadable
                            : identity_failure::cert_empty;
      return false;
    }
    result.leaf = std::move(certs.front());
    for (size_t i = 1; i < certs.size(); ++i)
      result.chain.emplace_back(std::move(certs[i]));
  }
  if (!read_key(files.key_file, files.key_passphrase, result.key, why))
    return false;
  auto matches = X509_check_private_key(result.leaf.get(), result.key.get())
                 == 1;
  ERR_clear_error();
  if (!matches) {
    why.step = identity_failure::key_mismatch;
    return false;
  }
  for (auto purpose : purposes) {
    why.detail = chain_error(cas, result.leaf.get(), result.chain, purpose);
    if (!why.detail.empty()) {
      why.step = identity_failure::untrusted;
      why.purpose = purpose;
      return false;
    }
  }
  if (self_id != 0) {
    auto id = named_node(result.leaf.get(), why.detail);
    if (id == 0) {
      why.step = identity_failure::unnamed;
      return false;
    }
    if (id != self_id) {
      why.step = identity_failure::wrong_node;
      why.named = id;
      return false;
    }
  }
  out = std::move(result);
  return true;
}

} // namespace oncegate::tls
