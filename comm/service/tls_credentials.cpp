#include "tls_credentials.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace terngrad::comm::detail {

namespace {

std::string read_pem(const std::string& path, const char* option) {
  if (path.empty()) throw std::invalid_argument(std::string("TLS: ") + option + " is needed");
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(std::string("TLS: ") + option + " " + path + " cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string pem = ss.str();
  if (pem.find("-----BEGIN ") == std::string::npos)
    throw std::invalid_argument(std::string("TLS: ") + option + " " + path + " is not a PEM file");
  return pem;
}

}  // namespace

std::shared_ptr<grpc::ServerCredentials> server_credentials(const TlsOptions& tls) {
  if (!tls.server_enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(tls.verify_clients ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                                         : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  o.pem_key_cert_pairs.push_back({read_pem(tls.key_file, "--tls_key"), read_pem(tls.cert_file, "--tls_cert")});
  if (tls.verify_clients) o.pem_root_certs = read_pem(tls.ca_file, "--tls_ca (to verify client certificates)");
  return grpc::SslServerCredentials(o);
}

std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const TlsOptions& tls) {
  if (!tls.client_enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = read_pem(tls.ca_file, "--tls_ca");
  if (!tls.cert_file.empty() || !tls.key_file.empty()) {
    o.pem_cert_chain = read_pem(tls.cert_file, "--tls_cert");
    o.pem_private_key = read_pem(tls.key_file, "--tls_key");
  }
  return grpc::SslCredentials(o);
}

void add_tls_channel_arguments(const TlsOptions& tls, grpc::ChannelArguments& args) {
  if (tls.client_enabled() && !tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
}

}  // namespace terngrad::comm::detail
