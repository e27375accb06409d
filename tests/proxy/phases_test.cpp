// The proxy's phases with fakes at both seams and no sockets: a FakeExchange for the
// client, a FakeUpstream for the upstream, the memory store. What the phases do with
// interim answers, a client that leaves mid-answer, an upstream that breaks off, and
// two claims racing for one key.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "fakes.hpp"
#include "idemproxy/ops/logging.hpp"
#include "idemproxy/store/memory_store.hpp"
#include "proxy/policy_document.hpp"
#include "proxy/runtime.hpp"
#include "proxy/serve.hpp"

namespace idemproxy::testing::phases_test {
namespace {

using namespace std::chrono_literals;

// One proxy over the fakes, and the exchanges it serves.
class Stage {
 public:
  explicit Stage(const std::string& config) : upstream(log), store_(clock_) {
    ops::configure_logging("warn", "text");
    auto cfg = config::parse_config("upstream: {url: 'http://127.0.0.1:9'}\n" + config, "fake.yaml",
                                    [](const std::string&) { return std::nullopt; });
    settings_ = proxy::make_settings(std::move(cfg));
    runtime_ = std::make_unique<proxy::Runtime>(io, settings_, store_, metrics_, 2, &upstream);
    proxy_ = std::make_unique<proxy::Proxy>(*runtime_);
  }
  ~Stage() { runtime_.reset(); }

  /// A client POSTing `body` with `key` to `target`.
  std::unique_ptr<FakeExchange> client(const std::string& key,
                                       const std::string& target = "/v1/orders",
                                       std::string body = "{}") {
    auto ex = std::make_unique<FakeExchange>(log, std::vector<std::string>{std::move(body)});
    ex->request(settings_, target,
                {{"Host", "test"},
                 {"Idempotency-Key", key},
                 {"Content-Type", "application/json"},
                 {"Content-Length", "2"}});
    return ex;
  }

  /// Serves every exchange at once, until each is done.
  void serve(std::vector<FakeExchange*> exchanges) {
    std::size_t pending = exchanges.size();
    for (auto* ex : exchanges) {
      asio::co_spawn(
          io,
          [this, ex, &pending]() -> asio::awaitable<void> {
            co_await proxy_->serve(*ex);
            --pending;
          },
          [](const std::exception_ptr& e) {
            if (e) std::rethrow_exception(e);
          });
    }
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    // Work waits on the database pool too: the loop runs until the exchanges end,
    // through moments when this context has nothing queued.
    while (pending > 0 && std::chrono::steady_clock::now() < deadline) {
      if (io.stopped()) io.restart();
      io.run_one_for(20ms);
    }
    ASSERT_EQ(pending, 0U) << "not served within 10 s";
  }

  asio::io_context io;
  Log log;
  FakeUpstream upstream;

 private:
  SystemClock clock_;
  store::MemoryStore store_;
  ops::Metrics metrics_;
  std::shared_ptr<const Settings> settings_;
  std::unique_ptr<proxy::Runtime> runtime_;
  std::unique_ptr<proxy::Proxy> proxy_;
};

const char* kConfig = "store: {memory: {}}\nroutes: [{name: orders, path_prefix: /v1}]\n";

std::string problem_type(const FakeExchange& ex) {
  return nlohmann::json::parse(ex.body, nullptr, false).value("type", std::string());
}

std::string field(const FakeExchange& ex, std::string_view name) {
  for (const auto& [n, v] : ex.fields) {
    if (beast::iequals(n, name)) return v;
  }
  return {};
}

TEST(Phases, InterimAnswersReachTheClientBeforeTheFinalOneWhichIsStored) {
  Stage stage(kConfig);
  Script s;
  s.heads = {{103, {{"Link", "</app.css>; rel=preload"}}}, {201, {}}};
  s.framing = Framing::of(8);
  s.pieces = {R"({"id":1})"};
  stage.upstream.scripts = {s};
  auto first = stage.client("k-1");
  stage.serve({first.get()});
  EXPECT_EQ(first->status, 201U);
  const auto interim = std::find(stage.log.begin(), stage.log.end(), "client got 103");
  const auto final_head = std::find(stage.log.begin(), stage.log.end(), "client got head 201");
  ASSERT_NE(interim, stage.log.end());
  EXPECT_LT(interim, final_head);
  auto again = stage.client("k-1");
  stage.serve({again.get()});
  EXPECT_TRUE(again->replayed);
  EXPECT_EQ(again->status, 201U);
  EXPECT_EQ(again->body, R"({"id":1})");
  EXPECT_EQ(stage.upstream.opened, 1);
}

TEST(Phases, AClientThatLeavesMidAnswerDoesNotStopItsRecording) {
  Stage stage(kConfig);
  Script s;
  s.pieces = {"data: 1\n\n", "data: 2\n\n", "data: 3\n\n"};
  stage.upstream.scripts = {s};
  auto first = stage.client("k-2");
  first->gone_after_sends = 0;  // takes the head, then is gone
  stage.serve({first.get()});
  EXPECT_FALSE(first->ended);
  auto again = stage.client("k-2");
  stage.serve({again.get()});
  EXPECT_TRUE(again->replayed);
  EXPECT_EQ(again->body, "data: 1\n\ndata: 2\n\ndata: 3\n\n");
  EXPECT_EQ(stage.upstream.opened, 1);
}

TEST(Phases, AnUpstreamThatBreaksOffMidBodyResetsTheClientAndLeavesTheRecordIndeterminate) {
  Stage stage(kConfig);
  Script s;
  s.pieces = {"part"};
  s.cut = bhttp::error::partial_message;
  stage.upstream.scripts = {s};
  auto first = stage.client("k-3");
  stage.serve({first.get()});
  EXPECT_FALSE(first->ended);
  EXPECT_NE(std::find(stage.log.begin(), stage.log.end(), "client reset"), stage.log.end());
  auto again = stage.client("k-3");
  stage.serve({again.get()});
  EXPECT_EQ(again->status, 409U);
  EXPECT_TRUE(problem_type(*again).ends_with("/outcome-indeterminate")) << again->body;
  EXPECT_EQ(stage.upstream.opened, 1);
}

TEST(Phases, AnUpstreamThatFailsBeforeItsHeadIsAProblemAndNothingIsSentTwice) {
  Stage stage(kConfig);
  Script s;
  s.head_error = beast::error::timeout;
  stage.upstream.scripts = {s};
  auto first = stage.client("k-4");
  stage.serve({first.get()});
  EXPECT_EQ(first->status, 504U);
  EXPECT_TRUE(problem_type(*first).ends_with("/upstream-timeout")) << first->body;
  // It was sent, so it may have acted: the retry is told so, not executed again.
  auto again = stage.client("k-4");
  stage.serve({again.get()});
  EXPECT_EQ(again->status, 409U);
  EXPECT_TRUE(problem_type(*again).ends_with("/outcome-indeterminate")) << again->body;
  EXPECT_EQ(stage.upstream.opened, 1);
}

TEST(Phases, TwoClaimsRacingForOneKeyExecuteOnce) {
  Stage stage(kConfig);
  Script s;
  s.delay = 100ms;
  s.framing = Framing::of(2);
  s.pieces = {"{}"};
  stage.upstream.scripts = {s, s};
  auto a = stage.client("k-5");
  auto b = stage.client("k-5");
  stage.serve({a.get(), b.get()});
  EXPECT_EQ(stage.upstream.opened, 1);
  const std::vector<unsigned> statuses = {a->status, b->status};
  EXPECT_NE(std::find(statuses.begin(), statuses.end(), 200U), statuses.end());
  EXPECT_NE(std::find(statuses.begin(), statuses.end(), 409U), statuses.end());
  const FakeExchange& refused = a->status == 409 ? *a : *b;
  EXPECT_TRUE(problem_type(refused).ends_with("/request-in-flight")) << refused.body;
  EXPECT_NE(field(refused, "Retry-After"), "");
}

TEST(Phases, AStreamedAnswersHeadSaysWhenItExpiresAndKeepsTheProxysFieldsOutOfTheRecord) {
  Stage stage(kConfig);
  Script s;
  s.heads = {{200, {{"Content-Type", "text/event-stream"}}}};
  s.pieces = {"a", "b"};
  stage.upstream.scripts = {s};
  auto first = stage.client("k-6");
  stage.serve({first.get()});
  EXPECT_NE(field(*first, "Idempotency-Key-Expires"), "");
  auto again = stage.client("k-6");
  stage.serve({again.get()});
  ASSERT_TRUE(again->replayed);
  int expires = 0;
  for (const auto& [n, v] : again->fields) expires += beast::iequals(n, "Idempotency-Key-Expires");
  EXPECT_EQ(expires, 1);  // the replay's own, not a stored copy beside it
  EXPECT_EQ(field(*again, "Content-Type"), "text/event-stream");
  EXPECT_EQ(again->body, "ab");
}

TEST(Phases, TheBytesThatCompleteALengthWaitForTheRecordLikeTheEnd) {
  // An HTTP/1.1 client takes a body framed by its length for whole once it has that
  // many bytes; the upstream may say the answer ended only after them.
  Stage stage(kConfig);
  Script s;
  s.framing = Framing::of(4);
  s.pieces = {"ab", "cd"};
  s.end_apart = true;
  stage.upstream.scripts = {s};
  auto first = stage.client("k-7");
  stage.serve({first.get()});
  EXPECT_EQ(first->body, "abcd");
  const auto at = [&](const std::string& event) {
    return std::find(stage.log.begin(), stage.log.end(), event) - stage.log.begin();
  };
  EXPECT_LT(at("client got ab"), at("upstream sent cd"));   // streamed as it came
  EXPECT_LT(at("upstream sent end"), at("client got cd"));  // held until the end and record
}

}  // namespace
}  // namespace idemproxy::testing::phases_test
