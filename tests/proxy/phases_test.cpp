// The proxy's phases with fakes at both seams and no sockets: a FakeExchange for the
// client, a FakeUpstream for the upstream, the memory store. What the phases do with
// interim answers, a client that leaves mid-answer, an upstream that breaks off, and
// two claims racing for one key.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "../unit/faulty_store.hpp"
#include "fakes.hpp"
#include "idemproxy/ops/logging.hpp"
#include "idemproxy/store/memory_store.hpp"
#include "proxy/policy_document.hpp"
#include "proxy/remote_feed.hpp"
#include "proxy/runtime.hpp"
#include "proxy/serve.hpp"

namespace idemproxy::testing::phases_test {
namespace {

using namespace std::chrono_literals;

// One proxy over the fakes, and the exchanges it serves.
class Stage {
 public:
  /// Over the memory store, or over `store` when given.
  explicit Stage(const std::string& config, store::Store* store = nullptr)
      : upstream(log), store_(clock_) {
    ops::configure_logging("warn", "text");
    auto cfg = config::parse_config("upstream: {url: 'http://127.0.0.1:9'}\n" + config, "fake.yaml",
                                    [](const std::string&) { return std::nullopt; });
    settings_ = proxy::make_settings(std::move(cfg));
    if (store != nullptr) used_ = store;
    runtime_ = std::make_unique<proxy::Runtime>(io, settings_, *used_, metrics_, 2, &upstream);
    proxy_ = std::make_unique<proxy::Proxy>(*runtime_);
  }
  ~Stage() {
    if (listening_) used_->watch({});  // before the runtime goes
    runtime_.reset();
  }

  /// Hears the store's announcements, as the server's upkeep wires them.
  void listen() {
    used_->watch(proxy::announcement_watchers(*runtime_));
    listening_ = true;
  }

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

  const std::shared_ptr<const Settings>& settings() const { return settings_; }

  asio::io_context io;
  Log log;
  FakeUpstream upstream;

 private:
  SystemClock clock_;
  store::MemoryStore store_;
  store::Store* used_ = &store_;
  ops::Metrics metrics_;
  std::shared_ptr<const Settings> settings_;
  std::unique_ptr<proxy::Runtime> runtime_;
  std::unique_ptr<proxy::Proxy> proxy_;
  bool listening_ = false;
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

// A streamed body under no route, between two full-duplex sides (HTTP/2 peers):
// pass-through reads the answer while the request goes, as a bidirectional gRPC call
// needs. Sent first, the request would wait for the client's "b", which waits for "A".
// A full-duplex client under no route, sending `pieces` as a stream of unknown length,
// to a full-duplex upstream that answers each with "A", then "B".
std::unique_ptr<FakeExchange> conversation(Stage& stage, std::vector<std::string> pieces) {
  Script s;
  s.duplex = true;
  s.pieces = {"A", "B"};
  stage.upstream.scripts = {s};
  auto ex = std::make_unique<FakeExchange>(stage.log, std::move(pieces));
  ex->request(stage.settings(), "/chat", {{"Host", "test"}});
  ex->unknown_length();
  ex->duplex = true;
  return ex;
}

TEST(Phases, ABodyStillComingPassesThroughAsAConversationBetweenFullDuplexPeers) {
  Stage stage(kConfig);
  auto ex = conversation(stage, {"a", "b"});
  stage.serve({ex.get()});
  EXPECT_EQ(ex->status, 200U);
  EXPECT_EQ(ex->body, "AB");
  EXPECT_TRUE(ex->ended);
  EXPECT_EQ(stage.upstream.last.body, "ab");
  EXPECT_TRUE(stage.upstream.last.ended);
}

TEST(Phases, AConversationTheUpstreamEndsBeforeItsHeadIsAProblemNotAReset) {
  Stage stage(kConfig);
  auto ex = conversation(stage, {"a"});
  ex->stays_open = true;
  Script s = stage.upstream.scripts.front();
  s.head_error = asio::error::connection_reset;
  stage.upstream.scripts = {s};
  stage.serve({ex.get()});
  EXPECT_EQ(ex->status, 502U);
  EXPECT_TRUE(problem_type(*ex).ends_with("/upstream-failed")) << ex->body;
  EXPECT_EQ(std::find(stage.log.begin(), stage.log.end(), "client reset"), stage.log.end());
}

TEST(Phases, AConversationTheClientBreaksOffResetsItsAnswer) {
  Stage stage(kConfig);
  auto ex = conversation(stage, {"a"});
  ex->fails_with = BodyPiece::Error::gone;
  stage.serve({ex.get()});
  EXPECT_EQ(ex->body, "A");
  EXPECT_FALSE(ex->ended);
  EXPECT_NE(std::find(stage.log.begin(), stage.log.end(), "upstream interrupted"), stage.log.end());
  EXPECT_NE(std::find(stage.log.begin(), stage.log.end(), "client reset"), stage.log.end());
  EXPECT_FALSE(stage.upstream.last.ended);
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

const char* kWaitConfig =
    "store: {memory: {}}\ndefaults: {on_concurrent: wait}\n"
    "routes: [{name: orders, path_prefix: /v1}]\n";

// The store hears the stage's watches and takes its claims in pairs, answering each
// pair last first, the second answer after the first one's caller ran; the upstream
// answers 201 with `body` (three times at most).
void claims_in_pairs(FaultyStore& store, Stage& stage, const std::string& body) {
  store.inner_watches = true;
  store.claims_together = 2;
  stage.listen();
  store.answer_later = [&stage](std::function<void()> answer) {
    asio::post(stage.io, std::move(answer));
  };
  Script s;
  s.heads = {{201, {}}};
  s.framing = Framing::of(8);
  s.pieces = {body};
  stage.upstream.scripts = {s, s, s};
}

// Two claims of one key from this process, answered by the store last first (two
// connections' batches: PostgreSQL's group commit, or claims run alone on Citus). The
// loser is told the key is in flight before its winner knows it won. It sleeps on
// the winner's claim, then replays the winner's answer from the cache: two claims,
// one completion, and no store call to watch the key. Without the claim on its way
// counted, the loser takes the key for another instance's and watches it in the
// store (the Citus storm's extra store calls). The loser's replay is finished whole
// whether its client's socket takes it at once or not.
TEST(Phases, ALoserToldBeforeItsWinnerWaitsForItHereAndNotInTheStore) {
  for (const bool later : {false, true}) {
    SystemClock clock;
    FaultyStore store(clock);
    Stage stage(kWaitConfig, &store);
    claims_in_pairs(store, stage, R"({"id":7})");
    auto winner = stage.client("k-race");
    auto loser = stage.client("k-race");
    loser->replay_later = later;
    stage.serve({winner.get(), loser.get()});
    EXPECT_EQ(stage.upstream.opened, 1);
    EXPECT_EQ(winner->status, 201U);
    EXPECT_FALSE(winner->replayed);
    EXPECT_EQ(loser->status, 201U);
    EXPECT_TRUE(loser->replayed);
    EXPECT_TRUE(loser->ended) << later;
    EXPECT_EQ(loser->body, R"({"id":7})");
    EXPECT_EQ(store.claims, 2);
    EXPECT_EQ(store.completes, 1);
    EXPECT_EQ(store.watches, 0);
  }
}

// A replay from the cache at intake that the client's socket does not take at once is
// begun without a coroutine frame and finished awaited.
TEST(Phases, AReplayTheClientCannotTakeAtOnceIsFinishedWhole) {
  Stage stage(kConfig);
  Script s;
  s.pieces = {R"({"id":1})"};
  stage.upstream.scripts = {s};
  auto first = stage.client("k-later");
  stage.serve({first.get()});
  auto again = stage.client("k-later");
  again->replay_later = true;
  stage.serve({again.get()});
  EXPECT_TRUE(again->replayed);
  EXPECT_TRUE(again->ended);
  EXPECT_EQ(again->body, R"({"id":1})");
  const auto head = std::find(stage.log.begin(), stage.log.end(),
                              "client got replay head " + std::to_string(first->status));
  ASSERT_NE(head, stage.log.end());
  EXPECT_NE(std::find(head, stage.log.end(), "client got replay rest"), stage.log.end());
}

// Claims of this process that all lose, the key held by another instance: the one
// told first sleeps on the other claim, wakes at its verdict, and then waits for the
// other instance like the rest, by one watch, without claiming again meanwhile.
// (Woken requests that claimed again at once would make each other sleep on their
// claims, round after round.) When the other instance gives the key up, one of them
// executes and the other replays its answer.
TEST(Phases, ClaimsThatAllLoseWaitForTheOtherInstanceWithoutClaimingAgain) {
  SystemClock clock;
  FaultyStore store(clock);
  Stage stage(kWaitConfig, &store);
  claims_in_pairs(store, stage, R"({"id":8})");
  // The request's fingerprint, as this proxy makes it: from a first key, claimed alone.
  store.claims_together = 0;
  auto probe = stage.client("k-probe");
  stage.serve({probe.get()});
  const auto probed = store.inner.find({"", "k-probe"});
  ASSERT_TRUE(probed.ok() && probed.value());
  store.claims_together = 2;
  // Another instance holds the key, for the same request.
  const store::ClaimRequest elsewhere{
      {"", "k-held"}, probed.value()->fingerprint, 30s, 24h, "orders", "POST", "/v1/orders", false};
  const auto held = store.inner.claim(elsewhere);
  ASSERT_TRUE(held.ok() && std::holds_alternative<store::Claimed>(held.value()));
  const std::int64_t token = std::get<store::Claimed>(held.value()).token;
  const int claims_before = store.claims_asked;
  int claims_while_held = -1;
  int watches_while_held = -1;
  asio::steady_timer gives_up(stage.io, 300ms);
  gives_up.async_wait([&](beast::error_code) {
    claims_while_held = store.claims_asked - claims_before;
    watches_while_held = store.watches;
    ASSERT_TRUE(store.inner.release(elsewhere.id, token).ok());
  });
  auto a = stage.client("k-held");
  auto b = stage.client("k-held");
  stage.serve({a.get(), b.get()});
  EXPECT_EQ(claims_while_held, 2);
  EXPECT_EQ(watches_while_held, 2);
  EXPECT_EQ(stage.upstream.opened, 2);  // the probe's, then one of the two
  EXPECT_EQ(a->status, 201U);
  EXPECT_EQ(b->status, 201U);
  EXPECT_NE(a->replayed, b->replayed);
  EXPECT_EQ(a->body, R"({"id":8})");
  EXPECT_EQ(b->body, R"({"id":8})");
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
