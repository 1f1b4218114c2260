#include "baton/runtime/json_input.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"

namespace baton {
namespace {

TEST(JsonInputTest, DeepNestingIsRefusedBeforeParsing) {
  // 60,000 levels crashed a recursive dump; any depth past the bound is
  // refused by the scan, brackets inside strings do not count.
  const std::string deep = std::string(60000, '[') + std::string(60000, ']');
  auto j = ParseJsonInput(deep, "config.json");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(j.status().message().find("nested deeper than 64"), std::string::npos)
      << j.status();
  const std::string at_limit =
      std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(ParseJsonInput(at_limit, "x").ok());
  const std::string over = "[" + at_limit + "]";
  EXPECT_FALSE(ParseJsonInput(over, "x").ok());
  EXPECT_TRUE(ParseJsonInput(R"({"a": "[[[[\"[[[[", "b": [1]})", "x").ok());
  EXPECT_FALSE(ParseJsonInput("{\"a\": ", "x").ok());
  EXPECT_FALSE(ParseJsonInput("]]]", "x").ok());
}

TEST(JsonInputTest, DuplicateKeysAreRefusedNamingTheKeyAndWhere) {
  auto refused = [](const std::string& text) {
    auto j = ParseJsonInput(text, "policy file x.json");
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument) << text;
    return std::string(j.status().message());
  };
  EXPECT_EQ(refused(R"({"micro_steps": 2, "name": "a", "micro_steps": 3})"),
            "policy file x.json: duplicate key \"micro_steps\"");
  EXPECT_EQ(refused(R"({"results": [{"size": 1}, {"size": 2, "x": {}, "size": 3}]})"),
            "policy file x.json: duplicate key \"size\" at results[1]");
  EXPECT_EQ(refused(R"([[], [{"a": {"b": [7, {"c": 1, "c": 1}]}}]])"),
            "policy file x.json: duplicate key \"c\" at [1][0].a.b[1]");
  // Equal values are still two values; keys differing only by escapes are
  // the same key once decoded.
  EXPECT_EQ(refused(R"({"a": 1, "\u0061": 1})"), "policy file x.json: duplicate key \"a\"");
  // The same key in sibling or nested objects is no duplicate.
  auto ok = ParseJsonInput(
      R"({"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}], "c": {"d": {"a": [1, {"a": 0}]}}})", "x");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)["b"][1]["a"], 2);
  EXPECT_TRUE(ParseJsonInput("[1, 2, 1]", "x").ok());
  EXPECT_TRUE(ParseJsonInput("{}", "x").ok());
}

TEST(JsonInputTest, IntegersAreRangeCheckedNotWrapped) {
  const nlohmann::json j = nlohmann::json::parse(
      R"({"big": 4294967304, "huge": 18446744073709551615, "f": 8.0,
          "s": "8", "n": null, "neg": -3, "ok": 8, "e": 1e3})");
  EXPECT_EQ(*JsonInt(j["ok"], "gpus_per_node", 1, 1024), 8);
  for (const char* k : {"big", "huge", "f", "s", "n", "neg", "e"}) {
    auto v = JsonInt(j[k], k, 1, 1024);
    ASSERT_FALSE(v.ok()) << k;
    EXPECT_NE(v.status().message().find("must be an integer in [1, 1024]"),
              std::string::npos)
        << v.status();
  }
  EXPECT_EQ(*JsonInt(nlohmann::json(int64_t{-1}), "x", -5, 5), -1);
}

TEST(JsonInputTest, NumbersMustBeFiniteAndInRange) {
  const nlohmann::json j = nlohmann::json::parse(
      R"({"tiny": 1e-300, "big": 1e308, "ok": 2.5, "s": "inf", "a": [1]})");
  EXPECT_EQ(*JsonNumber(j["ok"], "x", 0, 10), 2.5);
  for (const char* k : {"tiny", "big", "s", "a"}) {
    auto v = JsonNumber(j[k], k, 1e-3, 1e6);
    ASSERT_FALSE(v.ok()) << k;
    EXPECT_NE(v.status().message().find(k), std::string::npos) << v.status();
  }
  EXPECT_FALSE(JsonNumber(nlohmann::json(std::nan("")), "x", 0, 1).ok());
}

TEST(JsonInputTest, BriefNeverDumpsContainers) {
  EXPECT_EQ(JsonBrief(nlohmann::json::array({1, 2})), "an array");
  EXPECT_EQ(JsonBrief(nlohmann::json::object()), "an object");
  EXPECT_EQ(JsonBrief(nlohmann::json(std::string(100, 'x'))).size(), 40u);
  EXPECT_EQ(JsonBrief(nlohmann::json("\xff")), "\"\xEF\xBF\xBD\"");  // replaced
}

}  // namespace
}  // namespace baton
