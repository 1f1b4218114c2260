#include "baton/runtime/trace_json.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace baton {
namespace {

// Every event kind, parsed back: the fields the viewers read.
TEST(TraceJsonTest, EventsParseBackWithTheirFields) {
  TraceJsonWriter w;
  w.ProcessName(3, "rank 3");
  w.ProcessSortIndex(3, 3);
  w.ThreadName(3, 1, "all-gather");
  w.ThreadSortIndex(3, 1, 1);
  w.Complete(3, 1, "AG block 0", "copy", 12.5, 0.25,
             {{"step", int64_t{7}}, {"kind", std::string("all_gather")}});
  w.Complete(3, 0, "fwd", "forward", 0, 1e6);
  w.Counter(3, "memory", 2.0, {{"bytes", 1.5e9}});
  EXPECT_EQ(w.size(), 7u);

  const std::string text = w.Json();
  EXPECT_EQ(text.find('\n'), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["displayTimeUnit"], "ms");
  const nlohmann::json& e = j["traceEvents"];
  ASSERT_EQ(e.size(), 7u);
  EXPECT_EQ(e[0], nlohmann::json::parse(
                      R"({"ph":"M","name":"process_name","pid":3,"args":{"name":"rank 3"}})"));
  EXPECT_EQ(e[1], nlohmann::json::parse(
                      R"({"ph":"M","name":"process_sort_index","pid":3,"args":{"sort_index":3}})"));
  EXPECT_EQ(e[2], nlohmann::json::parse(
                      R"({"ph":"M","name":"thread_name","pid":3,"tid":1,"args":{"name":"all-gather"}})"));
  EXPECT_EQ(e[3], nlohmann::json::parse(
                      R"({"ph":"M","name":"thread_sort_index","pid":3,"tid":1,"args":{"sort_index":1}})"));
  EXPECT_EQ(e[4], nlohmann::json::parse(
                      R"({"ph":"X","name":"AG block 0","cat":"copy","pid":3,"tid":1,"ts":12.5,
                          "dur":0.25,"args":{"step":7,"kind":"all_gather"}})"));
  EXPECT_TRUE(e[4]["args"]["step"].is_number_integer());
  EXPECT_FALSE(e[5].contains("args"));  // none given, none written
  EXPECT_EQ(e[5]["dur"], 1e6);
  EXPECT_EQ(e[6], nlohmann::json::parse(
                      R"({"ph":"C","name":"memory","pid":3,"ts":2.0,"args":{"bytes":1.5e9}})"));
}

// Quotes, backslashes and control characters are escaped; bytes that are
// not UTF-8 become U+FFFD; valid UTF-8 passes through. The text parses and
// gives the names back.
TEST(TraceJsonTest, NamesAreEscapedAndTheOutputAlwaysParses) {
  TraceJsonWriter w;
  const std::string tricky = "a \"quoted\" \\path\\\nline\ttab\x01 end";
  const std::string utf8 = "\xc3\xa9t\xc3\xa9";  // "été"
  const std::string bad = std::string("x\xff") + "y";
  w.ThreadName(0, 0, tricky);
  w.Complete(0, 0, utf8, bad, 1, 2, {{bad, std::string("v\"")}});

  const std::string text = w.Json();
  EXPECT_NE(text.find(R"(a \"quoted\" \\path\\\nline\ttab\u0001 end)"), std::string::npos)
      << text;
  EXPECT_NE(text.find(utf8), std::string::npos) << text;
  EXPECT_EQ(text.find('\xff'), std::string::npos) << text;

  const nlohmann::json j = nlohmann::json::parse(text);
  const nlohmann::json& e = j["traceEvents"];
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0]["args"]["name"], tricky);
  EXPECT_EQ(e[1]["name"], utf8);
  const std::string replaced = "x\xef\xbf\xbdy";  // U+FFFD in UTF-8
  EXPECT_EQ(e[1]["cat"], replaced);
  EXPECT_EQ(e[1]["args"][replaced], "v\"");
}

TEST(TraceJsonTest, AnEmptyTraceIsValid) {
  const nlohmann::json j = nlohmann::json::parse(TraceJsonWriter().Json());
  EXPECT_TRUE(j["traceEvents"].is_array());
  EXPECT_TRUE(j["traceEvents"].empty());
}

TEST(TraceJsonTest, WriteReplacesTheFileAndNamesAPathItCannotWrite) {
  TraceJsonWriter w;
  w.Counter(0, "n", 0, {{"v", int64_t{1}}});
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/trace_json_test.json";
  {
    std::ofstream old(path);
    old << "an older, longer file that Write must replace entirely\n";
  }
  ASSERT_TRUE(w.Write(path).ok());
  std::ifstream in(path);
  std::stringstream got;
  got << in.rdbuf();
  EXPECT_EQ(got.str(), w.Json() + "\n");
  std::remove(path.c_str());

  const Status s = w.Write("/nonexistent-dir/t.json");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("/nonexistent-dir/t.json"), std::string::npos) << s;
  // A full disk shows only at the flush: still an error.
  const Status full = w.Write("/dev/full");
  EXPECT_EQ(full.message(), "cannot write the trace /dev/full: No space left on device")
      << full;
}

}  // namespace
}  // namespace baton
