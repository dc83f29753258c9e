// terngrad::json: strict reading (syntax errors by byte, duplicate keys
// refused at any depth), exact 64-bit integers, and compact writing.
#include "terngrad/base/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace json = terngrad::json;

namespace {

std::string error_of(const std::string& text) {
  try {
    json::parse_strict(text);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST(Json, KeepsMembersInDocumentOrder) {
  const json::Json v = json::parse_strict(R"( {"z": 1, "a": [true, null, "s"], "m": {"y": 2, "b": 3}} )");
  std::string keys;
  for (const auto& [k, m] : v.items()) keys += k;
  EXPECT_EQ(keys, "zam");
  EXPECT_EQ(json::dump_line(v), R"({"z":1,"a":[true,null,"s"],"m":{"y":2,"b":3}})");
}

TEST(Json, SyntaxErrorsNameTheByte) {
  EXPECT_EQ(error_of(R"({"a": 1,})").rfind("JSON error at byte 8: ", 0), 0u) << error_of(R"({"a": 1,})");
  // "n" may start null: the first wrong byte is the "o".
  EXPECT_EQ(error_of("not json").rfind("JSON error at byte 1: ", 0), 0u) << error_of("not json");
  EXPECT_NE(error_of(R"({"a": 1} x)").find("JSON error at byte"), std::string::npos) << "trailing text";
  EXPECT_NE(error_of("").find("JSON error at byte"), std::string::npos);
}

TEST(Json, DuplicateKeysAreRefusedAtAnyDepth) {
  EXPECT_EQ(error_of(R"({"a": 1, "a": 2})"), R"(JSON error: duplicate key "a")");
  EXPECT_EQ(error_of(R"({"x": [{"b": 1}, {"c": {"d": 1, "d": 1}}]})"), R"(JSON error: duplicate key "d")");
  // The same key in sibling objects is no duplicate.
  EXPECT_NO_THROW(json::parse_strict(R"([{"a": 1}, {"a": 2}, {"n": {"a": 3}, "a": 4}])"));
}

// Found while fuzzing base/json (fuzz/fuzz_json with a long input): a deep
// nesting parsed, then dump_line() recursed once per level and overflowed the stack.
TEST(Json, NestingDeeperThanTheLimitIsRefused) {
  const auto nested = [](size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_NO_THROW(json::parse_strict(nested(json::kMaxDepth)));
  EXPECT_EQ(error_of(nested(json::kMaxDepth + 1)), "JSON error: arrays and objects nested deeper than 512 levels");
  EXPECT_EQ(error_of(nested(200000)), "JSON error: arrays and objects nested deeper than 512 levels");
  std::string objects;
  for (int i = 0; i < 1000; ++i) objects += "{\"a\":";
  objects += "1" + std::string(1000, '}');
  EXPECT_EQ(error_of(objects), "JSON error: arrays and objects nested deeper than 512 levels");
}

TEST(Json, NonNegativeIntegersAreExact) {
  const json::Json v = json::parse_strict(R"([18446744073709551615, 9007199254740993, 0, -1, 1.5, "7"])");
  EXPECT_EQ(json::as_u64(v[0], "max"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(json::as_u64(v[1], "2^53 + 1"), 9007199254740993ull);
  EXPECT_EQ(json::as_u64(v[2], "zero"), 0u);
  try {
    json::as_u64(v[3], "the offset");
    ADD_FAILURE() << "accepted -1";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "the offset is -1, expected a non-negative integer");
  }
  EXPECT_THROW(json::as_u64(v[4], "x"), std::runtime_error);
  try {
    json::as_u64(v[5], "the size");
    ADD_FAILURE() << "accepted a string";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "the size is not a number, expected a non-negative integer");
  }
}

TEST(Json, WritesNumbersThatReadBackAndNonFiniteAsNull) {
  json::Json v = {{"tenth", 0.1}, {"third", 1.0 / 3}, {"nan", std::nan("")}, {"inf", -INFINITY}, {"big", 1e300}};
  const std::string line = json::dump_line(v);
  EXPECT_NE(line.find(R"("tenth":0.1,)"), std::string::npos) << line;
  EXPECT_NE(line.find(R"("nan":null,"inf":null)"), std::string::npos) << line;
  const json::Json back = json::parse_strict(line);
  EXPECT_EQ(back["third"].get<double>(), 1.0 / 3);
  EXPECT_EQ(back["big"].get<double>(), 1e300);
}

TEST(Json, WritesEscapesAndReplacesBytesThatAreNotUtf8) {
  const json::Json v = {{"s", std::string("q\"b\\n\n\x01") + "\xff"}};
  const std::string line = json::dump_line(v);
  EXPECT_EQ(line, "{\"s\":\"q\\\"b\\\\n\\n\\u0001\xef\xbf\xbd\"}");
  EXPECT_EQ(json::parse_strict(line)["s"].get<std::string>(), "q\"b\\n\n\x01\xef\xbf\xbd");
}
