// The access log's text line (ops::log_access), read back from standard output: the
// fields in their order, the durations to the microsecond, "-" for an absent key and
// trace id, and the original trace id only on a replay. Buffered, the lines wait for a
// full buffer, the flusher or flush_access_log, in the order they ended, never torn.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../captured_stdout.hpp"
#include "idemproxy/ops/logging.hpp"

using namespace idemproxy;
using idemproxy::testing::captured_stdout;

namespace {

ops::AccessRecord record() {
  ops::AccessRecord r;
  r.request_id = "0123456789abcdef0123456789abcdef";
  r.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  r.peer = "127.0.0.1";
  r.method = "POST";
  r.target = "/v1/orders?x=1";
  r.route = "orders";
  r.outcome = "executed";
  r.status = 201;
  r.upstream_status = 201;
  r.key_hash = "54a983e0d368cb34";
  r.duration_ms = 12.25;
  r.upstream_ms = 0.0625;  // 62.5 us: to the microsecond, rounded half away from zero
  return r;
}

const std::regex kStamp(R"(^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z )");

}  // namespace

TEST(AccessLog, TextLineHasEveryFieldInOrder) {
  ops::configure_logging("info", "text");
  const std::string out = captured_stdout([] { ops::log_access(record()); });
  ASSERT_TRUE(std::regex_search(out, kStamp)) << out;
  EXPECT_EQ(out.substr(25),
            "info [access] POST /v1/orders?x=1 route=orders outcome=executed status=201 "
            "upstream_status=201 key=54a983e0d368cb34 ms=12.250 upstream_ms=0.063 "
            "request_id=0123456789abcdef0123456789abcdef peer=127.0.0.1 "
            "trace_id=4bf92f3577b34da6a3ce929d0e0e4736\n");
}

TEST(AccessLog, AReplayNamesTheOriginalTraceAndAbsentFieldsReadAsDashes) {
  ops::configure_logging("info", "text");
  auto r = record();
  r.outcome = "replayed";
  r.upstream_status = 0;
  r.upstream_ms = 0;
  r.duration_ms = 1234.5;
  r.key_hash = {};
  r.trace_id = {};
  r.original_trace_id = "ffe4a77207e987a07f76243f81d18a1e";
  const std::string out = captured_stdout([&] { ops::log_access(r); });
  EXPECT_NE(out.find(" upstream_status=0 key=- ms=1234.500 upstream_ms=0.000 "), std::string::npos)
      << out;
  EXPECT_NE(out.find(" trace_id=- original_trace_id=ffe4a77207e987a07f76243f81d18a1e\n"),
            std::string::npos)
      << out;
}

TEST(AccessLog, AJsonLineIsOneObjectOnALineOfItsOwn) {
  ops::configure_logging("info", "json");
  const std::string out = captured_stdout([] { ops::log_access(record()); });
  ops::configure_logging("info", "text");
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.find('\n'), out.size() - 1) << out;
  const auto line = nlohmann::json::parse(out);
  EXPECT_EQ(line["msg"], "request");
  EXPECT_EQ(line["level"], "info");
  EXPECT_EQ(line["target"], "/v1/orders?x=1");
  EXPECT_EQ(line["status"], 201);
  EXPECT_EQ(line["key_hash"], "54a983e0d368cb34");
  EXPECT_DOUBLE_EQ(line["duration_ms"].get<double>(), 12.25);
  EXPECT_FALSE(line.contains("original_trace_id"));
}

TEST(AccessLog, NothingIsWrittenBelowTheConfiguredLevel) {
  ops::configure_logging("warn", "text");
  EXPECT_FALSE(ops::access_log_enabled());
  EXPECT_EQ(captured_stdout([] { ops::log_access(record()); }), "");
  ops::configure_logging("info", "text");
}

namespace {

// Lines in `text`, each checked to be one whole access line.
std::size_t whole_lines(const std::string& text) {
  static const std::regex line(
      R"(^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z info \[access\] POST /v1/orders\?x=\d+ .* trace_id=\S+$)");
  std::istringstream in(text);
  std::size_t n = 0;
  for (std::string l; std::getline(in, l); ++n) EXPECT_TRUE(std::regex_match(l, line)) << l;
  return n;
}

// Buffered access lines; each test leaves the log unbuffered, as it found it.
class BufferedAccessLog : public ::testing::Test {
 protected:
  void SetUp() override { ops::configure_logging("info", "text"); }
  void TearDown() override { ops::configure_access_log(0, std::chrono::seconds{1}); }
};

ops::AccessRecord numbered(const std::string& target) {
  auto r = record();
  r.target = target;
  return r;
}

}  // namespace

TEST_F(BufferedAccessLog, LinesWaitForTheFlushAndKeepTheOrderTheyEndedIn) {
  ops::configure_access_log(64 << 10, std::chrono::minutes{1});
  const std::vector<std::string> targets = {"/v1/orders?x=1", "/v1/orders?x=2", "/v1/orders?x=3"};
  EXPECT_EQ(captured_stdout([&] {
              for (const auto& t : targets) ops::log_access(numbered(t));
            }),
            "");
  const std::string out = captured_stdout([] { ops::flush_access_log(); });
  ASSERT_EQ(whole_lines(out), 3U) << out;
  EXPECT_LT(out.find("x=1 "), out.find("x=2 "));
  EXPECT_LT(out.find("x=2 "), out.find("x=3 "));
  EXPECT_EQ(captured_stdout([] { ops::flush_access_log(); }), "");  // written once
}

TEST_F(BufferedAccessLog, AFullBufferIsWrittenBeforeTheLineThatWouldNotFit) {
  const auto line_size = captured_stdout([] { ops::log_access(record()); }).size();
  ops::configure_access_log(3 * line_size + line_size / 2, std::chrono::minutes{1});
  const std::string full = captured_stdout([] {
    for (int i = 0; i < 4; ++i) ops::log_access(record());
  });
  EXPECT_EQ(whole_lines(full), 3U) << full;  // the fourth did not fit: the three went out
  EXPECT_EQ(whole_lines(captured_stdout([] { ops::flush_access_log(); })), 1U);
  // A line longer than the whole buffer is written as it ends, after what was held.
  ops::configure_access_log(line_size / 2, std::chrono::minutes{1});
  EXPECT_EQ(whole_lines(captured_stdout([] { ops::log_access(record()); })), 1U);
}

TEST_F(BufferedAccessLog, TheFlusherWritesHeldLinesWithinItsInterval) {
  ops::configure_access_log(64 << 10, std::chrono::milliseconds{20});
  const std::string out = captured_stdout([] {
    ops::log_access(record());
    struct stat st {};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{5};
    while (::fstat(STDOUT_FILENO, &st) == 0 && st.st_size == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds{5});
    }
  });
  EXPECT_EQ(whole_lines(out), 1U) << "nothing was written within 5 s of a 20 ms flush";
}

TEST_F(BufferedAccessLog, LinesFromManyThreadsAreNeverTornOrLost) {
  ops::configure_access_log(4 << 10, std::chrono::milliseconds{1});
  const std::string out = captured_stdout([] {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([t] {
        for (int i = 0; i < 500; ++i)
          ops::log_access(numbered("/v1/orders?x=" + std::to_string(t * 1000 + i)));
      });
    }
    for (auto& t : threads) t.join();
    ops::flush_access_log();
  });
  EXPECT_EQ(whole_lines(out), 2000U);
}

TEST_F(BufferedAccessLog, ReconfiguringWritesWhatTheOldBufferHeld) {
  ops::configure_access_log(64 << 10, std::chrono::minutes{1});
  const std::string out = captured_stdout([] {
    ops::log_access(record());
    ops::configure_access_log(0, std::chrono::seconds{1});
  });
  EXPECT_EQ(whole_lines(out), 1U);
}
