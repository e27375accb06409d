// ClaimPermit (src/proxy/claim_permit.hpp): a claim that no one completes or abandons
// is abandoned when its permit goes, and the in-flight gauge comes back to zero. The
// mutant that drops the destructor's abandon leaves the record in flight (the second
// claim below is refused with in_flight) and the gauge at 1.
#include "proxy/claim_permit.hpp"

#include <gtest/gtest.h>

#include <future>

#include "idemproxy/store/memory_store.hpp"
#include "proxy/policy_document.hpp"

namespace {

using namespace idemproxy;
using namespace idemproxy::http;
using AdmissionKind = engine::Admission::Kind;

struct PermitWorld {
  asio::io_context io;
  SystemClock clock;
  store::MemoryStore store{clock};
  ops::Metrics metrics;
  Runtime runtime{io,
                  make_settings(config::parse_config(
                      "upstream: {url: 'http://127.0.0.1:9'}\nstore: {memory: {}}\n"
                      "routes: [{name: any, path_prefix: /any}]\n",
                      "test.yaml", [](const std::string&) { return std::nullopt; })),
                  store, metrics, 1};

  store::ClaimRequest request(const std::string& key) const {
    store::ClaimRequest c;
    c.id = {"", key};
    c.fingerprint = "f";
    c.lease = std::chrono::seconds{30};
    c.ttl = std::chrono::hours{1};
    c.route = "any";
    c.method = "POST";
    c.target = "/any";
    return c;
  }
  // Waits until what the permit posted to the database pool has run.
  void drain_pool() {
    std::promise<void> ran;
    asio::post(runtime.db_pool, [&ran] { ran.set_value(); });
    ran.get_future().wait();
  }
  std::int64_t in_flight() { return metrics.snapshot()["claims_in_flight"].get<std::int64_t>(); }
};

TEST(ClaimPermit, AClaimLeftUnsettledBeforeForwardingIsReleasedForARetry) {
  PermitWorld fx;
  const auto claim = fx.request("before-forwarding");
  const auto first = fx.runtime.coordinator.claim(claim);
  ASSERT_EQ(first.kind, AdmissionKind::execute);
  {
    ClaimPermit permit(fx.runtime, claim.id, first.token);
    EXPECT_EQ(fx.in_flight(), 1);
  }  // an early return, say
  fx.drain_pool();
  EXPECT_EQ(fx.in_flight(), 0);
  // Never sent: the key is free again, and a retry executes.
  EXPECT_EQ(fx.runtime.coordinator.claim(claim).kind, AdmissionKind::execute);
}

TEST(ClaimPermit, AClaimLeftUnsettledAfterForwardingIsIndeterminate) {
  PermitWorld fx;
  const auto claim = fx.request("after-forwarding");
  const auto first = fx.runtime.coordinator.claim(claim);
  ASSERT_EQ(first.kind, AdmissionKind::execute);
  {
    ClaimPermit permit(fx.runtime, claim.id, first.token);
    permit.forwarding();
  }  // an exception while the upstream had the request, say
  fx.drain_pool();
  EXPECT_EQ(fx.in_flight(), 0);
  // The upstream may have acted: never executed again (on_stale: fail).
  EXPECT_EQ(fx.runtime.coordinator.claim(claim).kind, AdmissionKind::indeterminate);
}

TEST(ClaimPermit, ASettledPermitLeavesItsClaimToItsHolderAndAMovedOneCountsOnce) {
  PermitWorld fx;
  const auto claim = fx.request("settled");
  const auto first = fx.runtime.coordinator.claim(claim);
  ASSERT_EQ(first.kind, AdmissionKind::execute);
  {
    ClaimPermit permit(fx.runtime, claim.id, first.token);
    ClaimPermit moved(std::move(permit));
    EXPECT_EQ(fx.in_flight(), 1);
    moved.settled();
    EXPECT_EQ(fx.in_flight(), 0);
  }
  fx.drain_pool();
  EXPECT_EQ(fx.in_flight(), 0);
  // Not abandoned: the holder still has it.
  EXPECT_EQ(fx.runtime.coordinator.claim(claim).kind, AdmissionKind::in_flight);
}

}  // namespace
