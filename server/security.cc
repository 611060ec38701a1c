#include "server/security.h"

#include <fstream>
#include <sstream>

namespace tlp::server {
namespace {

Status ReadFile(const std::string& path, const char* what, std::string* contents) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(std::string("cannot read ") + what + " '" + path + "'");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  *contents = buffer.str();
  return Status::Ok();
}

}  // namespace

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return difference == 0;
}

Status ReadSecrets(const std::string& path, std::vector<std::string>* secrets) {
  std::string contents;
  Status status = ReadFile(path, "secrets file", &contents);
  if (!status.ok()) return status;
  secrets->clear();
  std::istringstream lines(contents);
  for (std::string line; std::getline(lines, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty() || line.front() == '#') continue;
    secrets->push_back(line);
  }
  if (secrets->empty()) return Status::InvalidArgument("secrets file '" + path + "' is empty");
  return Status::Ok();
}

Status MakeServerCredentials(const SecurityOptions& options,
                             std::shared_ptr<grpc::ServerCredentials>* credentials) {
  if (options.tls_cert.empty() && options.tls_key.empty()) {
    if (!options.tls_client_ca.empty()) {
      return Status::InvalidArgument("--tls-client-ca needs --tls-cert and --tls-key");
    }
    *credentials = grpc::InsecureServerCredentials();
    return Status::Ok();
  }
  if (options.tls_cert.empty() || options.tls_key.empty()) {
    return Status::InvalidArgument("TLS needs both --tls-cert and --tls-key");
  }
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  Status status = ReadFile(options.tls_key, "TLS key", &pair.private_key);
  if (status.ok()) status = ReadFile(options.tls_cert, "TLS certificate", &pair.cert_chain);
  if (!status.ok()) return status;
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!options.tls_client_ca.empty()) {
    status = ReadFile(options.tls_client_ca, "client CA", &ssl.pem_root_certs);
    if (!status.ok()) return status;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  *credentials = grpc::SslServerCredentials(ssl);
  return Status::Ok();
}

grpc::Status TokenAuthenticator::Check(const grpc::ServerContext& context) const {
  const auto& metadata = context.client_metadata();
  const auto found = metadata.find("authorization");
  if (found == metadata.end()) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            "missing 'authorization: Bearer <token>' metadata (tlpctl --token-file)"};
  }
  const std::string value(found->second.data(), found->second.size());
  static const std::string kScheme = "Bearer ";
  if (value.compare(0, kScheme.size(), kScheme) != 0) {
    return {grpc::StatusCode::UNAUTHENTICATED, "'authorization' must use the Bearer scheme"};
  }
  const std::string presented = value.substr(kScheme.size());
  // Compare against every token so the time does not depend on which one matches.
  bool accepted = false;
  for (const std::string& token : tokens_) accepted |= ConstantTimeEquals(presented, token);
  if (!accepted) return {grpc::StatusCode::UNAUTHENTICATED, "bearer token not accepted"};
  return grpc::Status::OK;
}

}  // namespace tlp::server
