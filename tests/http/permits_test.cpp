// The guards for calls that must be paired (src/proxy/permits.hpp, and the session
// tracker's entry), each shown by what goes wrong without it: a claim let go without
// an answer is abandoned (and counted out of the in-flight gauge); a claim cut off
// past the drain is left to its lease; a waiter whose coroutine ended is never
// woken; a connection whose session ended leaves the tracker.
#include "proxy/permits.hpp"

#include <gtest/gtest.h>

#include <variant>

#include "idemproxy/common/clock.hpp"
#include "idemproxy/store/memory_store.hpp"
#include "server/server_runtime.hpp"
#include "server/session_tracker.hpp"

namespace idemproxy::http {
namespace {

class Permits : public ::testing::Test {
 protected:
  Permits()
      : settings(proxy::make_settings(
            config::parse_config("upstream: {url: 'http://127.0.0.1:9'}\nstore: {memory: {}}\n"
                                 "routes: [{name: any, path_prefix: /any}]\n",
                                 "test.yaml", [](const std::string&) { return std::nullopt; }))),
        store(clock),
        runtime(io, settings, store, metrics, 1) {}

  /// Claims `key` in the store; the token the holder got.
  std::int64_t claim(const std::string& key) {
    request.id = {"scope", key};
    request.fingerprint = "fp";
    request.lease = std::chrono::seconds{30};
    request.ttl = std::chrono::hours{1};
    auto result = store.claim(request);
    EXPECT_TRUE(result.ok());
    const auto* won = std::get_if<store::Claimed>(&result.value());
    EXPECT_NE(won, nullptr);
    return won == nullptr ? 0 : won->token;
  }
  /// Whether `key` can be claimed again (its claim was given up), after the
  /// database pool ran what was posted to it.
  bool claimable_again() {
    runtime.db_pool.join();
    auto result = store.claim(request);
    return result.ok() && std::holds_alternative<store::Claimed>(result.value());
  }
  std::string state(const std::string& key) {
    runtime.db_pool.join();
    const auto record = store.find({"scope", key});
    if (!record.ok() || !record.value()) return "none";
    return std::string(store::to_string(record.value()->state));
  }

  asio::io_context io;
  std::shared_ptr<const Settings> settings;
  SystemClock clock;
  store::MemoryStore store;
  ops::Metrics metrics;
  server::ServerRuntime runtime;
  store::ClaimRequest request;
};

TEST_F(Permits, AClaimLetGoBeforeItWasSentIsReleasedAndCountedOut) {
  const auto token = claim("early-return");
  {
    proxy::ClaimPermit permit(runtime, request.id, token);
    EXPECT_EQ(metrics.in_flight_claims(), 1);
  }  // an early return, an exception, a destroyed frame: no complete, no abandon
  EXPECT_EQ(metrics.in_flight_claims(), 0);
  EXPECT_TRUE(claimable_again());
}

TEST_F(Permits, AClaimLetGoAfterItMayHaveBeenSentIsMarkedIndeterminate) {
  const auto token = claim("sent");
  {
    proxy::ClaimPermit permit(runtime, request.id, token);
    permit.mark_sent();
  }
  EXPECT_EQ(state("sent"), "indeterminate");
}

TEST_F(Permits, ASettledClaimIsLeftToWhoeverSettledIt) {
  const auto token = claim("settled");
  {
    proxy::ClaimPermit permit(runtime, request.id, token);
    permit.settle();
    EXPECT_EQ(metrics.in_flight_claims(), 0);
  }
  EXPECT_EQ(state("settled"), "in_flight");
}

TEST_F(Permits, PastTheDrainAClaimIsLeftToItsLease) {
  const auto token = claim("drained");
  {
    proxy::ClaimPermit permit(runtime, request.id, token);
    permit.mark_sent();
    runtime.leave_claims_to_leases();  // what ProxyServer::run does once io stops
  }
  EXPECT_EQ(state("drained"), "in_flight");
}

TEST_F(Permits, AMovedPermitHoldsTheClaimOnce) {
  const auto token = claim("moved");
  {
    proxy::ClaimPermit first(runtime, request.id, token);
    proxy::ClaimPermit second(std::move(first));
    EXPECT_FALSE(first.held());  // NOLINT(bugprone-use-after-move): what a move leaves
    EXPECT_TRUE(second.held());
  }
  EXPECT_EQ(metrics.in_flight_claims(), 0);
  EXPECT_TRUE(claimable_again());
}

struct CountingWaiter : engine::Waiter {
  void wake() override { ++woken; }
  int woken = 0;
};

TEST_F(Permits, AWaiterThatStoppedWaitingElsewhereIsNeverWoken) {
  const store::RecordId id{"scope", "elsewhere"};
  store::Watches::Watchers announcing;
  announcing.finished = [](const store::RecordId&) {};
  store.watch(announcing);  // the store announces finishes, as PostgreSQL's NOTIFY does
  auto gone = std::make_shared<CountingWaiter>();
  auto staying = std::make_shared<CountingWaiter>();
  const proxy::WaitingElsewhere stays(runtime, id, *staying);
  runtime.coordinator.wait_elsewhere(id, staying);
  {
    const proxy::WaitingElsewhere registered(runtime, id, *gone);
    runtime.coordinator.wait_elsewhere(id, gone);
  }  // its coroutine ended (answered, or destroyed mid-sleep)
  runtime.coordinator.finished_elsewhere(id);
  EXPECT_EQ(gone->woken, 0);
  EXPECT_EQ(staying->woken, 1);
}

// The drain waits until the tracker is empty: a connection whose session ended by
// an exception, and stayed counted, would hold every shutdown to its timeout.
TEST(SessionTrackerEntry, AConnectionLeavesTheTrackerWhateverWayItsSessionEnds) {
  asio::io_context io;
  server::SessionTracker tracker;
  auto conn = std::make_shared<ClientConnection>(tcp::socket(io), nullptr);
  const auto session = [&](bool fails) {
    const auto tracked = tracker.track(conn);
    EXPECT_EQ(tracker.connections(), 1u);
    if (fails) throw std::runtime_error("the session failed");
  };
  session(false);
  EXPECT_EQ(tracker.connections(), 0u);
  EXPECT_THROW(session(true), std::runtime_error);
  EXPECT_EQ(tracker.connections(), 0u);
}

}  // namespace
}  // namespace idemproxy::http
