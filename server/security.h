// Who may talk to tlpd: TLS (server certificate, optionally client certificates too) and
// bearer tokens for tlp.v1, basic auth for /metrics. Everything is off by default, and then the
// daemon binds loopback only unless told otherwise.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace tlp::server {

struct SecurityOptions {
  std::string tls_cert;           // PEM server certificate chain; with tls_key turns TLS on
  std::string tls_key;            // PEM private key
  std::string tls_client_ca;      // PEM CA bundle: clients must present a certificate it signed
  std::string token_file;         // bearer tokens, one per line ('#' comments); on = required
  std::string admin_token_file;   // tlp.v1.Admin's tokens (required for it when token_file is)
  std::string metrics_auth_file;  // "user:password" lines for /metrics basic auth
};

// Server credentials for `options`: insecure when no certificate is given.
Status MakeServerCredentials(const SecurityOptions& options,
                             std::shared_ptr<grpc::ServerCredentials>* credentials);

// Reads a secrets file: one secret per line, blank lines and '#' comments skipped. Fails when the
// file cannot be read or holds no secret.
Status ReadSecrets(const std::string& path, std::vector<std::string>* secrets);

// Equality that takes the same time wherever the strings differ (only their lengths leak).
bool ConstantTimeEquals(const std::string& a, const std::string& b);

// Checks `authorization: Bearer <token>` against the accepted tokens (several, for rotation).
class TokenAuthenticator {
 public:
  explicit TokenAuthenticator(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {}
  // OK, or UNAUTHENTICATED saying what is missing or wrong (never the expected token).
  grpc::Status Check(const grpc::ServerContext& context) const;

 private:
  std::vector<std::string> tokens_;
};

}  // namespace tlp::server
