// Cluster secrets, role keys and call tokens (credentials.h), over OpenSSL's
// HMAC-SHA256, random source and constant-time comparison.
#include "terngrad/comm/credentials.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace terngrad::comm {

namespace {

constexpr char kHeader[] = "terngrad-secret";
constexpr char kVersion[] = "v1";

Key hmac(const uint8_t* key, size_t key_len, std::string_view message) {
  Key out{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key, static_cast<int>(key_len), reinterpret_cast<const unsigned char*>(message.data()),
           message.size(), out.data(), &len) == nullptr ||
      len != out.size())
    throw std::runtime_error("credentials: HMAC-SHA256 failed");
  return out;
}

std::string to_hex(const uint8_t* p, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = digits[p[i] >> 4];
    s[2 * i + 1] = digits[p[i] & 15];
  }
  return s;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// 64 hex digits -> 32 bytes; false on anything else.
bool parse_key(std::string_view hex, Key& out) {
  if (hex.size() != 2 * out.size()) return false;
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(16 * hi + lo);
  }
  return true;
}

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
    const size_t start = i;
    while (i < s.size() && !(s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s.substr(0, 40)) out += (c >= 32 && c < 127) ? c : '?';
  if (s.size() > 40) out += "...";
  return out + "\"";
}

}  // namespace

std::string Role::name() const {
  return kind == Kind::kObserver ? "observer" : "replica." + std::to_string(replica);
}

std::optional<Role> Role::parse(std::string_view name) {
  if (name == "observer") return observer();
  constexpr std::string_view prefix = "replica.";
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  const std::string_view digits = name.substr(prefix.size());
  if (digits.empty() || digits.size() > 4 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  uint32_t r = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    r = 10 * r + static_cast<uint32_t>(c - '0');
  }
  if (r >= kMaxReplicas) return std::nullopt;
  return replica_role(r);
}

ClusterSecret ClusterSecret::generate() {
  ClusterSecret s;
  if (RAND_bytes(s.bytes_.data(), static_cast<int>(s.bytes_.size())) != 1)
    throw std::runtime_error("credentials: the system's random source failed to produce a cluster secret");
  return s;
}

ClusterSecret ClusterSecret::from_hex(std::string_view hex, const std::string& where) {
  ClusterSecret s;
  if (!parse_key(hex, s.bytes_))
    throw std::invalid_argument(where + ": the cluster secret must be 64 hex digits (got " + std::to_string(hex.size()) +
                                " characters)");
  return s;
}

std::string ClusterSecret::hex() const { return to_hex(bytes_.data(), bytes_.size()); }

Key ClusterSecret::key_for(const Role& role) const {
  return hmac(bytes_.data(), bytes_.size(), "terngrad/v1/role/" + role.name());
}

std::string Credential::call_token() const {
  const Key t = hmac(key.data(), key.size(), "terngrad/v1/call");
  return role.name() + ":" + to_hex(t.data(), t.size());
}

Credential SecretMaterial::credential_for(const Role& role, const std::string& where) const {
  if (cluster) return {role, cluster->key_for(role)};
  if (role_key && role_key->role == role) return *role_key;
  throw std::invalid_argument(where + " holds the key of " + (role_key ? role_key->role.name() : std::string("nobody")) +
                              ", but this task is " + role.name() + ": give it its own key or the cluster secret");
}

SecretMaterial parse_secret(std::string_view text, const std::string& where) {
  const std::vector<std::string_view> w = words(text);
  SecretMaterial m;
  if (w.size() == 1) {  // only the cluster secret's hex digits (TG_CLUSTER_SECRET)
    m.cluster = ClusterSecret::from_hex(w[0], where);
    return m;
  }
  if (w.size() < 4 || w[0] != kHeader)
    throw std::invalid_argument(where + ": expected \"terngrad-secret v1 cluster|replica <r>|observer <64 hex digits>\"");
  if (w[1] != kVersion) throw std::invalid_argument(where + ": unknown secret format version " + quoted(w[1]));
  const std::string_view kind = w[2];
  if (kind == "cluster" && w.size() == 4) {
    m.cluster = ClusterSecret::from_hex(w[3], where);
    return m;
  }
  std::optional<Role> role;
  std::string_view hex;
  if (kind == "observer" && w.size() == 4) {
    role = Role::observer();
    hex = w[3];
  } else if (kind == "replica" && w.size() == 5) {
    role = Role::parse("replica." + std::string(w[3]));
    if (!role)
      throw std::invalid_argument(where + ": replica " + quoted(w[3]) + " is not a number below " +
                                  std::to_string(kMaxReplicas));
    hex = w[4];
  } else {
    throw std::invalid_argument(where + ": unknown secret kind " + quoted(kind) + " (or wrong number of fields)");
  }
  Credential c{*role, {}};
  if (!parse_key(hex, c.key)) throw std::invalid_argument(where + ": the key must be 64 hex digits");
  m.role_key = c;
  return m;
}

SecretMaterial read_secret_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw std::invalid_argument("secret file " + path + ": " + std::strerror(errno));
  if ((st.st_mode & 077) != 0)
    std::fprintf(stderr, "warning: secret file %s can be read by other users (mode %03o); chmod 600 it\n", path.c_str(),
                 static_cast<unsigned>(st.st_mode & 0777));
  if (st.st_size > 4096) throw std::invalid_argument("secret file " + path + ": " + std::to_string(st.st_size) + " bytes; a secret is one short line");
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("secret file " + path + ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_secret(ss.str(), "secret file " + path);
}

void write_secret_file(const std::string& path, const std::string& line) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot create " + tmp + ": " + std::strerror(errno));
  const std::string text = line + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write secret file " + path + ": " + why);
  }
}

std::string cluster_secret_line(const ClusterSecret& secret) {
  return std::string(kHeader) + " " + kVersion + " cluster " + secret.hex();
}

std::string role_key_line(const Credential& c) {
  const std::string key = to_hex(c.key.data(), c.key.size());
  if (c.role.kind == Role::Kind::kObserver) return std::string(kHeader) + " " + kVersion + " observer " + key;
  return std::string(kHeader) + " " + kVersion + " replica " + std::to_string(c.role.replica) + " " + key;
}

std::optional<SecretMaterial> secret_from_flag_or_environment(const std::string& secret_file) {
  if (!secret_file.empty()) return read_secret_file(secret_file);
  const char* env = std::getenv("TG_CLUSTER_SECRET");
  if (env != nullptr && *env != '\0') return parse_secret(env, "TG_CLUSTER_SECRET");
  return std::nullopt;
}

std::string new_session_id() {
  uint8_t b[16];
  if (RAND_bytes(b, sizeof b) != 1) throw std::runtime_error("credentials: the system's random source failed");
  return to_hex(b, sizeof b);
}

std::optional<Role> CallAuthenticator::verify(std::string_view value) const {
  const size_t colon = value.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const std::optional<Role> role = Role::parse(value.substr(0, colon));
  if (!role) return std::nullopt;
  const std::string expected = Credential{*role, secret_.key_for(*role)}.call_token();
  if (expected.size() != value.size()) return std::nullopt;
  if (CRYPTO_memcmp(expected.data(), value.data(), value.size()) != 0) return std::nullopt;
  return role;
}

bool is_loopback_address(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace terngrad::comm
