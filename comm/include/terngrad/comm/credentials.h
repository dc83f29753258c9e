// Who may talk to a parameter server, and as whom.
//
// A run has one cluster secret (32 random bytes). From it each role gets its
// own key: key(role) = HMAC-SHA256(secret, "terngrad/v1/role/" + role), where
// the role is "replica.<r>" (replica 0 is the chief) or "observer" (evaluators
// and launchers, which may only read Status). A task holds either the cluster
// secret (ps tasks; it can derive every key) or its own role's key (what the
// launchers hand a replica or an evaluator), so a worker cannot present
// itself as another replica, and only the chief's key can Init, Checkpoint or
// Shutdown. On every call a task sends its role and
// token(role) = HMAC-SHA256(key(role), "terngrad/v1/call") in the metadata;
// the ps recomputes it from the secret and compares in constant time.
//
// The token is a bearer credential: it never reveals the secret or a key,
// but on a plaintext link whoever reads the traffic can replay it. Use TLS
// (tls.h) on networks you do not control.
//
// Secret files hold one line (mode 0600; read_secret_file warns otherwise):
//   terngrad-secret v1 cluster <64 hex digits>
//   terngrad-secret v1 replica <r> <64 hex digits>     (that replica's key)
//   terngrad-secret v1 observer <64 hex digits>        (the observer key)
// The environment variable TG_CLUSTER_SECRET may hold the same line, or only
// the cluster secret's 64 hex digits. Secrets are never taken from the
// command line (argv is visible to every user of the machine).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace terngrad::comm {

// The most replicas a run may have (bounds what a request can make the ps allocate).
inline constexpr uint32_t kMaxReplicas = 4096;

struct Role {
  enum class Kind { kReplica, kObserver };
  Kind kind = Kind::kReplica;
  uint32_t replica = 0;  // kReplica only

  static Role replica_role(uint32_t r) { return {Kind::kReplica, r}; }
  static Role observer() { return {Kind::kObserver, 0}; }
  bool is_replica(uint32_t r) const { return kind == Kind::kReplica && replica == r; }
  // "replica.3" | "observer": as on the wire and in secret files.
  std::string name() const;
  // Parses name(); nullopt for anything else (including replicas >= kMaxReplicas).
  static std::optional<Role> parse(std::string_view name);
  bool operator==(const Role&) const = default;
};

using Key = std::array<uint8_t, 32>;

class ClusterSecret {
 public:
  // 32 bytes from the operating system's random source.
  static ClusterSecret generate();
  // 64 hex digits; std::invalid_argument naming `where` otherwise.
  static ClusterSecret from_hex(std::string_view hex, const std::string& where);
  std::string hex() const;
  Key key_for(const Role& role) const;

 private:
  Key bytes_{};
};

// What one task presents on every call: its role and that role's key.
struct Credential {
  Role role;
  Key key{};
  // The metadata value sent with each call: "<role name>:<64 hex digits of the token>".
  std::string call_token() const;
};

// The contents of a secret file or of TG_CLUSTER_SECRET: either the cluster
// secret or one role's key.
struct SecretMaterial {
  std::optional<ClusterSecret> cluster;
  std::optional<Credential> role_key;

  // The credential of `role`: derived from the cluster secret, or the role
  // key when it is that role's. std::invalid_argument naming `where`, the
  // role held and the role wanted otherwise.
  Credential credential_for(const Role& role, const std::string& where) const;
};

// Parses one secret line (format above). std::invalid_argument naming
// `where` and the field at fault.
SecretMaterial parse_secret(std::string_view text, const std::string& where);
// Reads a secret file; errors name the file. Warns on stderr when the file
// can be read by other users.
SecretMaterial read_secret_file(const std::string& path);
// Writes a secret line to path atomically with mode 0600.
void write_secret_file(const std::string& path, const std::string& line);
std::string cluster_secret_line(const ClusterSecret& secret);
std::string role_key_line(const Credential& credential);

// The secret a task was started with: --secret_file's path when given, else
// TG_CLUSTER_SECRET, else nullopt (an unauthenticated run).
std::optional<SecretMaterial> secret_from_flag_or_environment(const std::string& secret_file);

// The ps side: which role a call's "tg-auth" metadata value proves.
class CallAuthenticator {
 public:
  explicit CallAuthenticator(ClusterSecret secret) : secret_(secret) {}
  // nullopt unless the value is a role name and that role's exact token; the
  // token is compared in constant time.
  std::optional<Role> verify(std::string_view metadata_value) const;

 private:
  ClusterSecret secret_;
};

// A fresh session id (32 hex digits from the random source): what a replica
// process registers with and sends on every call, so that the ps can tell
// it from another process in its name, or from its own predecessor.
std::string new_session_id();

// The metadata keys of the service's calls.
inline constexpr char kAuthMetadataKey[] = "tg-auth";
inline constexpr char kSessionMetadataKey[] = "tg-session";

// Whether host:port names a loopback address (127.0.0.0/8, ::1, localhost),
// where a ps without a secret is only reachable from this machine.
bool is_loopback_address(const std::string& address);

}  // namespace terngrad::comm
