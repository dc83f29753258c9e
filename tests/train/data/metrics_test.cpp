// JSONL metrics (escaping, non-finite values, append across runs) and the
// console progress line.
#include <cmath>
#include <limits>

#include "terngrad/train/metrics.h"
#include "test_util.h"

namespace {

using namespace terngrad::train;
using namespace tg_test;

TEST(JsonObject, EscapesAndFormats) {
  JsonObject o;
  o.add("event", "train")
      .add("quote", std::string("a\"b\\c/d"))
      .add("ctrl", std::string_view("line\nnext\ttab\r\x01\x1f"))
      .add("utf8", "é→")
      .add("step", int64_t{-42})
      .add("big", std::numeric_limits<uint64_t>::max())
      .add("int", 7)
      .add("flag", true)
      .add("loss", 0.1)
      .add("nan", std::nan(""))
      .add("inf", -std::numeric_limits<double>::infinity())
      .add("f", 0.25f)
      .add_null("none");
  EXPECT_EQ(o.str(),
            "{\"event\":\"train\",\"quote\":\"a\\\"b\\\\c/d\",\"ctrl\":\"line\\nnext\\ttab\\r\\u0001\\u001f\","
            "\"utf8\":\"é→\",\"step\":-42,\"big\":18446744073709551615,\"int\":7,\"flag\":true,\"loss\":0.1,"
            "\"nan\":null,\"inf\":null,\"f\":0.25,\"none\":null}");
}

TEST(JsonlWriter, OneLinePerObjectAndAppendAcrossRuns) {
  TempDir t;
  const std::string path = t / "metrics.jsonl";
  {
    JsonlWriter w(path);
    w.write(JsonObject().add("step", 1).add("loss", 2.5));
    w.write(JsonObject().add("step", 2).add("msg", "tab\there"));
    // Flushed per line: visible before the writer is closed.
    EXPECT_EQ(read_text(path), "{\"step\":1,\"loss\":2.5}\n{\"step\":2,\"msg\":\"tab\\there\"}\n");
  }
  {
    JsonlWriter w(path, true);  // a resumed run
    w.write(JsonObject().add("step", 3));
  }
  EXPECT_EQ(read_text(path), "{\"step\":1,\"loss\":2.5}\n{\"step\":2,\"msg\":\"tab\\there\"}\n{\"step\":3}\n");
  {
    JsonlWriter w(path, false);  // a fresh run truncates
    w.write(JsonObject().add("step", 0));
  }
  EXPECT_EQ(read_text(path), "{\"step\":0}\n");
  // A run that died mid-line: the next record still starts on its own line.
  std::ofstream(path, std::ios::app) << "{\"step\":1,\"lo";
  {
    JsonlWriter w(path);
    w.write(JsonObject().add("step", 1));
  }
  EXPECT_EQ(read_text(path), "{\"step\":0}\n{\"step\":1,\"lo\n{\"step\":1}\n");
  EXPECT_CONTAINS(error_of<std::runtime_error>([&] { JsonlWriter w(t / "no/such/dir/m.jsonl"); }), "no/such/dir");
}

TEST(JsonlWriter, PythonJsonReadsEveryLine) {
  if (!have_python3()) GTEST_SKIP() << "python3 not available";
  TempDir t;
  const std::string path = t / "m.jsonl";
  {
    JsonlWriter w(path);
    w.write(JsonObject().add("s", std::string_view("\"\\\n\x02 é")).add("x", std::nan("")).add("y", 1e-300));
    w.write(JsonObject().add("step", 5).add("top1", 0.9921875));
  }
  const std::string cmd = "python3 -c \"import json,sys\n"
                          "rows=[json.loads(l) for l in open(sys.argv[1], encoding='utf-8')]\n"
                          "assert rows[0]=={'s':'\\\"\\\\\\\\\\n\\x02 \\u00e9','x':None,'y':1e-300}, rows[0]\n"
                          "assert rows[1]=={'step':5,'top1':0.9921875}, rows[1]\" " +
                          path + " > " + (t / "out.txt") + " 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << read_text(t / "out.txt");
}

TEST(Progress, FormatsAndRateLimits) {
  EXPECT_EQ(format_duration(45.2), "45s");
  EXPECT_EQ(format_duration(187), "3m07s");
  EXPECT_EQ(format_duration(7500), "2h05m");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(Progress::format(120, 1000, 0.4312, 1234.4, 83), "step 120/1000  loss 0.4312  1234 ex/s  ETA 1m23s");

  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p(100, 64, false, f, 1000.0);  // only the first and the last step print
    for (int s = 51; s <= 100; ++s) p.update(s, 1.0 / s);  // resumed at step 50
    p.finish();
  }
  std::rewind(f);
  std::string text;
  for (int c; (c = std::fgetc(f)) != EOF;) text.push_back(static_cast<char>(c));
  std::fclose(f);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  EXPECT_CONTAINS(text, "step 51/100");
  EXPECT_CONTAINS(text, "step 100/100  loss 0.0100");
  EXPECT_CONTAINS(text, "ETA 0s");

  Progress quiet(10, 1, true, stderr);  // prints nothing
  quiet.update(1, 0.5);
  quiet.finish();
}

}  // namespace
