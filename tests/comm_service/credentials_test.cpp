// Cluster secrets, role keys and call tokens (comm/credentials.h), and the
// ps's rate-limited log of refused calls (comm/service/refusal_log.h).
#include "terngrad/comm/credentials.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "refusal_log.h"

namespace tc = terngrad::comm;
namespace fs = std::filesystem;

namespace {

std::string hex_of_bytes_0_to_31() {
  std::string s;
  const char* d = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) s += {d[i >> 4], d[i & 15]};
  return s;
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(Credentials, KeysAndTokensAreHmacSha256AsDocumented) {
  // Known answers computed independently with Python's hmac module for the
  // secret 00 01 .. 1f: key = HMAC(secret, "terngrad/v1/role/<role>"),
  // token = HMAC(key, "terngrad/v1/call").
  const tc::ClusterSecret s = tc::ClusterSecret::from_hex(hex_of_bytes_0_to_31(), "test");
  const tc::Role r3 = tc::Role::replica_role(3);
  const tc::Credential c{r3, s.key_for(r3)};
  EXPECT_EQ(tc::role_key_line(c),
            "terngrad-secret v1 replica 3 8f3c9bc32916204d07f74ad7e6fa005f6e51005e32d52205c9ef28bc79e51ce3");
  EXPECT_EQ(c.call_token(), "replica.3:ebb50d6aabb4881482de8ecc694cf9679d3bd09696b2c947734247b44514ef5a");
  EXPECT_EQ(tc::role_key_line({tc::Role::observer(), s.key_for(tc::Role::observer())}),
            "terngrad-secret v1 observer 12cc5bb7eb43440a40dce9a26a13a45f7381f32f6d59a7d3a0766af97a3b0fc2");
}

TEST(Credentials, TheAuthenticatorAcceptsExactlyTheRolesOwnToken) {
  const tc::ClusterSecret s = tc::ClusterSecret::generate();
  const tc::CallAuthenticator auth(s);
  for (const tc::Role role : {tc::Role::replica_role(0), tc::Role::replica_role(4095), tc::Role::observer()}) {
    const std::string token = tc::Credential{role, s.key_for(role)}.call_token();
    ASSERT_EQ(auth.verify(token), role) << token;
    std::string flipped = token;
    flipped.back() = flipped.back() == '0' ? '1' : '0';
    EXPECT_FALSE(auth.verify(flipped));
    EXPECT_FALSE(auth.verify(token.substr(0, token.size() - 1)));
    EXPECT_FALSE(auth.verify(token + "0"));
  }
  // Replica 1's token presented as replica 2's, another secret's, junk.
  const std::string one = tc::Credential{tc::Role::replica_role(1), s.key_for(tc::Role::replica_role(1))}.call_token();
  EXPECT_FALSE(auth.verify("replica.2" + one.substr(one.find(':'))));
  const tc::ClusterSecret other = tc::ClusterSecret::generate();
  EXPECT_FALSE(auth.verify(tc::Credential{tc::Role::replica_role(1), other.key_for(tc::Role::replica_role(1))}.call_token()));
  for (const char* junk : {"", ":", "replica.:00", "replica.01:00", "replica.4096:00", "chief:00", "observer"})
    EXPECT_FALSE(auth.verify(junk)) << junk;
}

TEST(Credentials, SecretLinesParseAndBadOnesAreNamed) {
  const std::string hex = hex_of_bytes_0_to_31();
  const tc::SecretMaterial cluster = tc::parse_secret("terngrad-secret v1 cluster " + hex + "\n", "f");
  ASSERT_TRUE(cluster.cluster);
  EXPECT_EQ(cluster.cluster->hex(), hex);
  const tc::SecretMaterial bare = tc::parse_secret(hex, "TG_CLUSTER_SECRET");
  ASSERT_TRUE(bare.cluster);
  // A cluster secret gives every role's credential; a role key only its own.
  const tc::Credential c5 = cluster.credential_for(tc::Role::replica_role(5), "f");
  const tc::SecretMaterial key5 = tc::parse_secret(tc::role_key_line(c5), "k");
  ASSERT_TRUE(key5.role_key);
  EXPECT_EQ(key5.credential_for(tc::Role::replica_role(5), "k").call_token(), c5.call_token());
  const std::string wrong = error_of([&] { key5.credential_for(tc::Role::replica_role(0), "secret file k"); });
  EXPECT_NE(wrong.find("secret file k holds the key of replica.5, but this task is replica.0"), std::string::npos) << wrong;

  EXPECT_NE(error_of([] { tc::parse_secret("abc", "TG_CLUSTER_SECRET"); }).find("TG_CLUSTER_SECRET: the cluster secret must be 64 hex digits"),
            std::string::npos);
  EXPECT_NE(error_of([&] { tc::parse_secret("terngrad-secret v2 cluster " + hex, "f"); }).find("unknown secret format version \"v2\""),
            std::string::npos);
  EXPECT_NE(error_of([&] { tc::parse_secret("terngrad-secret v1 replica x " + hex, "f"); }).find("replica \"x\" is not a number"),
            std::string::npos);
  EXPECT_NE(error_of([&] { tc::parse_secret("terngrad-secret v1 replica 9999 " + hex, "f"); }).find("below 4096"),
            std::string::npos);
  EXPECT_NE(error_of([&] { tc::parse_secret("terngrad-secret v1 admin " + hex, "f"); }).find("unknown secret kind \"admin\""),
            std::string::npos);
  EXPECT_NE(error_of([&] { tc::parse_secret("terngrad-secret v1 observer " + hex.substr(1) + "g", "f"); }).find("64 hex digits"),
            std::string::npos);
  EXPECT_NE(error_of([] { tc::parse_secret("", "f"); }).find("f: expected"), std::string::npos);
}

TEST(Credentials, SecretFilesAreWrittenAtomicallyForTheOwnerOnly) {
  const fs::path dir = fs::temp_directory_path() / ("tg_credentials_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "cluster.secret").string();
  const tc::ClusterSecret s = tc::ClusterSecret::generate();
  tc::write_secret_file(path, tc::cluster_secret_line(s));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(tc::read_secret_file(path).cluster->hex(), s.hex());
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);  // no temporary left
  EXPECT_NE(error_of([&] { tc::read_secret_file((dir / "missing").string()); }).find("missing: No such file"),
            std::string::npos);
  // Readable by others: still read, with a warning naming the file.
  fs::permissions(path, fs::perms::others_read, fs::perm_options::add);
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(tc::read_secret_file(path).cluster);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("can be read by other users"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Credentials, SessionIdsAreFreshAndLoopbackIsRecognized) {
  const std::string a = tc::new_session_id(), b = tc::new_session_id();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  for (const char* loop : {"127.0.0.1:2222", "localhost:1", "[::1]:5", "127.9.9.9:0"})
    EXPECT_TRUE(tc::is_loopback_address(loop)) << loop;
  for (const char* open : {"0.0.0.0:2222", "10.77.0.2:2222", "[::]:1", "myhost:80"})
    EXPECT_FALSE(tc::is_loopback_address(open)) << open;
}

TEST(RefusalLog, LogsABurstThenCountsWhatItLeftOut) {
  using Clock = terngrad::comm::detail::RefusalLog::Clock;
  terngrad::comm::detail::RefusalLog log(3, 10);
  const Clock::time_point t0{};
  int printed = 0;
  for (int i = 0; i < 8; ++i) printed += !log.refuse("ipv4:10.0.0.9:5000", "Push", "no", t0 + std::chrono::seconds(1)).empty();
  EXPECT_EQ(printed, 3);
  const std::string next = log.refuse("ipv4:10.0.0.9:5000", "Push", "no", t0 + std::chrono::seconds(12));
  EXPECT_EQ(next, "(5 more refused calls in the last 10 s were not logged) refused Push from ipv4:10.0.0.9:5000: no");
  EXPECT_EQ(log.total(), 9u);
}
