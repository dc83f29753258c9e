// Optional TLS between the tasks of a run, with gRPC's SSL credentials.
//
// A ps serves TLS when it has a certificate and key; replicas, evaluators and
// launchers then connect with the CA that signed it (ca_file). With
// verify_clients the ps also requires a client certificate signed by
// ca_file. Authentication by the cluster secret (credentials.h) is
// independent and still applies: TLS keeps the secret's tokens and the
// gradients from being read or altered on the way.
#pragma once

#include <string>

namespace terngrad::comm {

struct TlsOptions {
  std::string ca_file;    // PEM: the CA that signed the peers' certificates
  std::string cert_file;  // PEM: this task's certificate (a ps: its server certificate)
  std::string key_file;   // PEM: its private key
  bool verify_clients = false;  // ps: require client certificates signed by ca_file
  // Client: the name the ps's certificate must carry when it is not the host
  // of its address (e.g. a certificate for "ps" reached at 10.0.0.2).
  std::string server_name;

  // Whether TLS is on: a ps needs cert_file and key_file; a client, ca_file.
  bool server_enabled() const { return !cert_file.empty() || !key_file.empty(); }
  bool client_enabled() const { return !ca_file.empty(); }
};

}  // namespace terngrad::comm
