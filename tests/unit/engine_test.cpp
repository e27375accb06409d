// The idempotency state machine against the in-memory store, on a fake clock.
#include "idemproxy/engine/engine.hpp"

#include <gtest/gtest.h>

#include "idemproxy/store/memory_store.hpp"

using namespace idemproxy;
using namespace idemproxy::engine;
using namespace std::chrono_literals;
using Kind = Admission::Kind;

namespace {

class EngineTest : public ::testing::Test {
 protected:
  store::ClaimRequest request(std::string key, std::string fp = "fp-1", std::string scope = "") {
    return {{std::move(scope), std::move(key)},
            std::move(fp),
            policy.lease,
            policy.ttl,
            "orders",
            "POST",
            "/v1/orders",
            policy.on_stale == OnStale::retake,
            policy.after_expiry_reject};
  }
  store::StoredResponse created(std::string body = R"({"id":"ord_1"})") {
    return {201,
            {{"Content-Type", "application/json"},
             {"Set-Cookie", "session=secret"},
             {"Connection", "keep-alive"},
             {"Content-Length", "14"},
             {"X-Request-Cost", "3"}},
            std::move(body)};
  }

  // Claims `key` and finishes it with an answer whose upstream said `policy_field`
  // (Idempotency-Policy); the replay's expiry when it was stored.
  TimePoint finish_saying(const std::string& key, const std::string& policy_field,
                          Finish want = Finish::stored) {
    const auto first = engine.admit(request(key));
    auto answer = created();
    answer.headers.push_back({"Idempotency-Policy", policy_field});
    TimePoint expires_at{};
    EXPECT_EQ(engine.finish({"", key}, first.token, policy, answer, &expires_at), want);
    return expires_at;
  }

  FakeClock clock;
  store::MemoryStore memory{clock};
  Engine engine{memory};
  RoutePolicy policy;
};

}  // namespace

TEST_F(EngineTest, FirstRequestExecutesAndRetriesReplayTheStoredResponse) {
  const auto first = engine.admit(request("k"));
  ASSERT_EQ(first.kind, Kind::execute);
  EXPECT_EQ(engine.finish({"", "k"}, first.token, policy, created()), Finish::stored);

  const auto retry = engine.admit(request("k"));
  ASSERT_EQ(retry.kind, Kind::replay);
  EXPECT_EQ(retry.replay->status, 201);
  EXPECT_EQ(retry.replay->body, R"({"id":"ord_1"})");
}

TEST_F(EngineTest, FinishHandsBackTheStoredFormThatReplaysSend) {
  const auto first = engine.admit(request("k"));
  store::StoredResponse stored;
  TimePoint expires_at{};
  ASSERT_EQ(engine.finish({"", "k"}, first.token, policy, created(), &expires_at, &stored),
            Finish::stored);
  const auto retry = engine.admit(request("k"));
  ASSERT_EQ(retry.kind, Kind::replay);
  EXPECT_EQ(stored.headers, retry.replay->headers);  // what the replay cache keeps
  EXPECT_EQ(stored.body, retry.replay->body);
  EXPECT_EQ(expires_at, retry.expires_at);
}

TEST_F(EngineTest, StoredHeadersDropHopByHopAndDeniedOnes) {
  const auto first = engine.admit(request("k"));
  engine.finish({"", "k"}, first.token, policy, created());
  const auto retry = engine.admit(request("k"));
  ASSERT_EQ(retry.kind, Kind::replay);
  const std::vector<store::Header> expected = {{"Content-Type", "application/json"},
                                               {"X-Request-Cost", "3"}};
  EXPECT_EQ(retry.replay->headers, expected);
}

// The kept form is made from the answer in place: what the upstream asked is read
// first, then its fields and trailers are cut, and its body moves, not copied.
TEST_F(EngineTest, KeepReadsWhatTheUpstreamAskedThenCutsTheFieldsInPlace) {
  policy.ttl = std::chrono::hours{1};
  policy.max_ttl = std::chrono::hours{2};
  auto answer = created(std::string(4096, 'x'));
  answer.headers.push_back({"Idempotency-Policy", "max-age=60"});
  answer.headers.push_back({"X-Request-Id", "req-1"});
  answer.trailers = {{"Grpc-Message", "ok"}, {"Set-Cookie", "late=secret"}};
  const char* body = answer.body.data();
  const KeptAnswer kept = Engine::keep(std::move(answer), policy);
  EXPECT_TRUE(kept.stores);
  EXPECT_EQ(kept.keep.answer, std::chrono::seconds{60});
  const std::vector<store::Header> fields = {{"Content-Type", "application/json"},
                                             {"X-Request-Cost", "3"}};
  EXPECT_EQ(kept.answer.headers, fields);
  const std::vector<store::Header> trailers = {{"Grpc-Message", "ok"}};
  EXPECT_EQ(kept.answer.trailers, trailers);
  EXPECT_EQ(kept.answer.body.data(), body);  // the same buffer: moved

  auto refused = created();
  refused.headers.push_back({"Idempotency-Policy", "no-store, max-age=60"});
  const KeptAnswer not_kept = Engine::keep(store::StoredResponse(refused), policy);
  EXPECT_FALSE(not_kept.stores);
  EXPECT_EQ(Engine::stores(policy, refused), not_kept.stores);
  EXPECT_EQ(Engine::retention(policy, refused).answer, not_kept.keep.answer);
}

TEST_F(EngineTest, ConcurrentRequestSeesInFlight) {
  ASSERT_EQ(engine.admit(request("k")).kind, Kind::execute);
  const auto second = engine.admit(request("k"));
  EXPECT_EQ(second.kind, Kind::in_flight);
  EXPECT_EQ(second.locked_until, clock.now() + policy.lease);
}

TEST_F(EngineTest, DifferentFingerprintIsAMismatchInEveryState) {
  const auto first = engine.admit(request("k", "fp-1"));
  EXPECT_EQ(engine.admit(request("k", "fp-2")).kind, Kind::mismatch);  // in flight
  engine.finish({"", "k"}, first.token, policy, created());
  EXPECT_EQ(engine.admit(request("k", "fp-2")).kind, Kind::mismatch);  // completed
}

TEST_F(EngineTest, UnstorableStatusReleasesTheClaimSoARetryExecutes) {
  const auto first = engine.admit(request("k"));
  EXPECT_EQ(engine.finish({"", "k"}, first.token, policy, {503, {}, "busy"}), Finish::released);
  const auto retry = engine.admit(request("k"));
  ASSERT_EQ(retry.kind, Kind::execute);
  EXPECT_NE(retry.token, first.token);
}

TEST_F(EngineTest, AnUpstreamThatSaysNoStoreReleasesTheClaim) {
  const auto first = engine.admit(request("k"));
  auto answer = created();
  answer.headers.push_back({"Idempotency-Policy", "No-Store"});
  EXPECT_EQ(engine.finish({"", "k"}, first.token, policy, answer), Finish::released);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::execute);  // the retry runs again

  // Any other value is stored, without the field (it speaks to the proxy).
  const auto again = engine.admit(request("k2"));
  answer.headers.back().value = "store";
  ASSERT_EQ(engine.finish({"", "k2"}, again.token, policy, answer), Finish::stored);
  const auto retry = engine.admit(request("k2"));
  ASSERT_EQ(retry.kind, Kind::replay);
  for (const auto& h : retry.replay->headers) EXPECT_NE(h.name, "Idempotency-Policy");
}

TEST(AnswerPolicy, NoStoreIsOneOfTheCommaSeparatedDirectivesCaseInsensitively) {
  EXPECT_TRUE(read_answer_policy("no-store").no_store);
  EXPECT_TRUE(read_answer_policy("NO-STORE").no_store);
  EXPECT_TRUE(read_answer_policy("x-other, no-store").no_store);
  EXPECT_TRUE(read_answer_policy(" no-store ,max-age=5").no_store);
  EXPECT_FALSE(read_answer_policy("").no_store);
  EXPECT_FALSE(read_answer_policy("no-stores").no_store);
  EXPECT_FALSE(read_answer_policy("store, no_store").no_store);
  EXPECT_FALSE(read_answer_policy("\"no-store\"").no_store);
  EXPECT_FALSE(read_answer_policy("no-store=1").no_store);
}

TEST(AnswerPolicy, MaxAgeIsSecondsAsDigitsAlone) {
  EXPECT_EQ(read_answer_policy("max-age=60").max_age, std::chrono::seconds(60));
  EXPECT_EQ(read_answer_policy("Max-Age=0").max_age, std::chrono::seconds(0));
  EXPECT_EQ(read_answer_policy("no-store, max-age=5").max_age, std::chrono::seconds(5));
  EXPECT_TRUE(read_answer_policy("max-age=60").malformed.empty());
  // Past ten years it reads ten years (max_ttl bounds it anyway), never a wrapped value.
  EXPECT_EQ(read_answer_policy("max-age=99999999999999999999999").max_age,
            std::chrono::seconds(10LL * 366 * 24 * 3600));
  for (const char* bad : {"max-age=", "max-age=-1", "max-age=+5", "max-age=1.5", "max-age=5s",
                          "max-age=\"5\"", "max-age", "max_age=5", "maxage=5"}) {
    const AnswerPolicy read = read_answer_policy(bad);
    EXPECT_FALSE(read.max_age) << bad;
    EXPECT_EQ(read.malformed, bad);  // logged by the proxy, then ignored
  }
  // The first it cannot read is named; what it can read still counts.
  const AnswerPolicy mixed = read_answer_policy("max-age=x, no-store, max-age=7, bogus");
  EXPECT_TRUE(mixed.no_store);
  EXPECT_EQ(mixed.max_age, std::chrono::seconds(7));
  EXPECT_EQ(mixed.malformed, "max-age=x");
}

TEST(AnswerPolicy, SeveralFieldsReadTogetherAndTheShorterMaxAgeWins) {
  const AnswerPolicy read = answer_policy({{"idempotency-policy", "max-age=30"},
                                           {"X-Other", "max-age=1"},
                                           {"Idempotency-Policy", "max-age=10"}});
  EXPECT_EQ(read.max_age, std::chrono::seconds(10));
  EXPECT_FALSE(read.no_store);
  EXPECT_FALSE(answer_policy({{"Cache-Control", "max-age=5"}}).max_age);
}

TEST(Header, NamedMatchesTheLowerCaseNameInAnyCaseAndNothingElse) {
  EXPECT_TRUE((Header{"Grpc-Status", "0"}.named("grpc-status")));
  EXPECT_TRUE((Header{"GRPC-STATUS", "0"}.named("grpc-status")));
  EXPECT_TRUE((Header{"grpc-status", "0"}.named("grpc-status")));
  EXPECT_FALSE((Header{"grpc-statusx", "0"}.named("grpc-status")));
  EXPECT_FALSE((Header{"grpc-statu", "0"}.named("grpc-status")));
  EXPECT_FALSE((Header{"grpc_status", "0"}.named("grpc-status")));
  // Only ASCII letters fold: '@' is 'A' - 1 and '[' is 'Z' + 1; '`' is 'a' - 1.
  EXPECT_FALSE((Header{"@", ""}.named("`")));
  EXPECT_FALSE((Header{"[", ""}.named("{")));
  EXPECT_TRUE((Header{"", ""}.named("")));
}

TEST(Retention, MaxAgeShortensTtlAndLengthensItOnlyUpToMaxTtl) {
  RoutePolicy route;
  route.ttl = 1h;
  EXPECT_EQ(route.retention().answer, 1h);
  EXPECT_EQ(route.retention(10min).answer, 10min);
  EXPECT_EQ(route.retention(10min).record, 10min);
  EXPECT_EQ(route.retention(0s).answer, 0s);
  EXPECT_EQ(route.retention(2h).answer, 1h);  // max_ttl defaults to ttl
  route.max_ttl = 6h;
  EXPECT_EQ(route.retention(2h).answer, 2h);
  EXPECT_EQ(route.retention(48h).answer, 6h);
  EXPECT_EQ(route.retention().answer, 1h);  // no max-age: ttl, whatever max_ttl
}

TEST(Retention, WithTombstonesTheTombstoneStartsAtTheAnswersEndAndNeverEndsSooner) {
  RoutePolicy route;
  route.ttl = 1h;
  route.max_ttl = 6h;
  route.after_expiry_reject = true;
  route.tombstone_ttl = 24h;
  EXPECT_EQ(route.retention().answer, 1h);
  EXPECT_EQ(route.retention().record, 24h);
  // Shorter: refused sooner, never executed again sooner.
  EXPECT_EQ(route.retention(10min).answer, 10min);
  EXPECT_EQ(route.retention(10min).record, 24h);
  // Longer: the tombstone keeps its 23 h after the answer's end.
  EXPECT_EQ(route.retention(5h).answer, 5h);
  EXPECT_EQ(route.retention(5h).record, 28h);
}

TEST_F(EngineTest, AnUpstreamsMaxAgeShortensWhatThisAnswerReplaysFor) {
  policy.ttl = 1h;
  const auto first = engine.admit(request("k"));
  auto answer = created();
  answer.headers.push_back({"Idempotency-Policy", "max-age=600"});
  TimePoint expires_at{};
  store::StoredResponse stored;
  ASSERT_EQ(engine.finish({"", "k"}, first.token, policy, answer, &expires_at, &stored),
            Finish::stored);
  EXPECT_EQ(expires_at, clock.now() + 10min);
  for (const auto& h : stored.headers) EXPECT_NE(h.name, "Idempotency-Policy");
  clock.advance(9min);
  const auto replay = engine.admit(request("k"));
  ASSERT_EQ(replay.kind, Kind::replay);
  EXPECT_EQ(replay.expires_at, expires_at);
  clock.advance(1min);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::execute);  // not the route's hour
}

TEST_F(EngineTest, AnUpstreamsMaxAgeLengthensItOnlyUpToMaxTtl) {
  policy.ttl = 1h;
  policy.max_ttl = 2h;
  EXPECT_EQ(finish_saying("k", "max-age=86400"), clock.now() + 2h);
  clock.advance(2h - 1ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::replay);
  clock.advance(1ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::execute);
}

TEST_F(EngineTest, AMalformedMaxAgeLeavesTheRoutesTtl) {
  policy.ttl = 1h;
  EXPECT_EQ(finish_saying("k", "max-age=soon"), clock.now() + 1h);
}

TEST_F(EngineTest, MaxAgeWithNoStoreStoresNothing) {
  finish_saying("k", "max-age=600, no-store", Finish::released);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::execute);
}

TEST_F(EngineTest, AShorterMaxAgeStartsTheTombstoneAtItsOwnExpiry) {
  policy.ttl = 1h;
  policy.after_expiry_reject = true;
  policy.tombstone_ttl = 24h;
  const TimePoint expires_at = finish_saying("k", "max-age=600");
  EXPECT_EQ(expires_at, clock.now() + 10min);
  clock.advance(9min);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::replay);
  // GC drops its answer at its own expiry, not the route's ttl, and none earlier.
  EXPECT_EQ(memory.drop_answers("orders", policy.ttl, 10).value(), 0);
  clock.advance(1min);
  const auto late = engine.admit(request("k"));
  ASSERT_EQ(late.kind, Kind::expired);
  EXPECT_EQ(late.expires_at, expires_at);
  EXPECT_EQ(memory.drop_answers("orders", policy.ttl, 10).value(), 1);
  // The tombstone lasts as the route says: refused until tombstone_ttl, then free.
  clock.advance(24h - 10min - 1ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::expired);
  clock.advance(1ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::execute);
}

TEST_F(EngineTest, ALongerMaxAgeKeepsTheAnswerPastTtlAndGcLeavesIt) {
  policy.ttl = 1h;
  policy.max_ttl = 6h;
  policy.after_expiry_reject = true;
  policy.tombstone_ttl = 24h;
  finish_saying("k", "max-age=7200");
  clock.advance(90min);
  // Past the route's ttl: GC keeps this answer, and it still replays.
  EXPECT_EQ(memory.drop_answers("orders", policy.ttl, 10).value(), 0);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::replay);
  clock.advance(30min);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::expired);
  // Its tombstone keeps its 23 h after the answer's end.
  clock.advance(23h - 1ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::expired);
  clock.advance(1ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::execute);
}

TEST_F(EngineTest, RetryableClientErrorsAreReleasedToo) {
  for (int status : {408, 409, 425, 429}) {
    const auto key = "k" + std::to_string(status);
    const auto first = engine.admit(request(key));
    EXPECT_EQ(engine.finish({"", key}, first.token, policy, {status, {}, ""}), Finish::released);
    EXPECT_EQ(engine.admit(request(key)).kind, Kind::execute) << status;
  }
}

TEST_F(EngineTest, ClientErrorsAreStoredByDefault) {
  const auto first = engine.admit(request("k"));
  EXPECT_EQ(engine.finish({"", "k"}, first.token, policy, {400, {}, "bad amount"}), Finish::stored);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::replay);
}

TEST_F(EngineTest, AbandonedClaimLetsTheRetryExecute) {
  const auto first = engine.admit(request("k"));
  EXPECT_EQ(engine.abandon({"", "k"}, first.token), Finish::released);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::execute);
}

TEST_F(EngineTest, ExpiredRecordIsNeverReplayed) {
  const auto first = engine.admit(request("k"));
  engine.finish({"", "k"}, first.token, policy, created());
  clock.advance(policy.ttl - 1ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::replay);
  clock.advance(1ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::execute);
}

TEST_F(EngineTest, ExpiredRecordDoesNotCauseAMismatch) {
  const auto first = engine.admit(request("k", "fp-1"));
  engine.finish({"", "k"}, first.token, policy, created());
  clock.advance(policy.ttl);
  EXPECT_EQ(engine.admit(request("k", "fp-2")).kind, Kind::execute);
}

TEST_F(EngineTest, LeaseTakeoverFencesTheOldHolder) {
  policy.on_stale = OnStale::retake;
  const auto old_holder = engine.admit(request("k"));
  clock.advance(policy.lease - 1ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::in_flight);
  clock.advance(1ms);
  const auto new_holder = engine.admit(request("k"));
  ASSERT_EQ(new_holder.kind, Kind::execute);
  EXPECT_NE(new_holder.token, old_holder.token);

  // The old holder wakes up late: it must not overwrite or release anything.
  EXPECT_EQ(engine.finish({"", "k"}, old_holder.token, policy, created("stale")), Finish::fenced);
  EXPECT_EQ(engine.abandon({"", "k"}, old_holder.token), Finish::fenced);
  EXPECT_EQ(engine.finish({"", "k"}, new_holder.token, policy, created("fresh")), Finish::stored);
  const auto replay = engine.admit(request("k"));
  ASSERT_EQ(replay.kind, Kind::replay);
  EXPECT_EQ(replay.replay->body, "fresh");
}

TEST_F(EngineTest, VanishedHolderMeansOutcomeUnknownByDefault) {
  const auto holder = engine.admit(request("k"));
  clock.advance(policy.lease);
  // at most once: the retry is not executed, and learns the outcome is unknown
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::stale);
  EXPECT_EQ(engine.admit(request("k", "fp-2")).kind, Kind::mismatch);
  // a late completion by the holder is still accepted: nobody took over
  EXPECT_EQ(engine.finish({"", "k"}, holder.token, policy, created()), Finish::stored);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::replay);
}

TEST_F(EngineTest, StaleRecordBlocksTheKeyUntilItsTtl) {
  engine.admit(request("k"));
  clock.advance(policy.ttl - 1ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::stale);
  clock.advance(1ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::execute);
}

TEST_F(EngineTest, IndeterminateOutcomeIsReportedAndNeverExecutedAgainByDefault) {
  const auto holder = engine.admit(request("k"));
  EXPECT_EQ(engine.mark_indeterminate({"", "k"}, holder.token), Finish::indeterminate);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::indeterminate);
  clock.advance(policy.lease * 2);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::indeterminate);
  // the holder cannot complete it afterwards with a body it never received
  EXPECT_EQ(engine.finish({"", "k"}, holder.token, policy, created()), Finish::fenced);
}

TEST_F(EngineTest, IndeterminateOutcomeIsRetakenAfterTheLeaseWithRetake) {
  policy.on_stale = OnStale::retake;
  const auto holder = engine.admit(request("k"));
  engine.mark_indeterminate({"", "k"}, holder.token);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::indeterminate);  // lease still running
  clock.advance(policy.lease);
  const auto retry = engine.admit(request("k"));
  ASSERT_EQ(retry.kind, Kind::execute);
  EXPECT_NE(retry.token, holder.token);
}

TEST_F(EngineTest, OperatorResolveReleasesIndeterminateAndStaleRecords) {
  const auto a = engine.admit(request("a"));
  engine.mark_indeterminate({"", "a"}, a.token);
  engine.admit(request("b"));
  EXPECT_FALSE(memory.resolve({"", "b"}).value());  // b's holder is still within its lease
  clock.advance(policy.lease);
  EXPECT_TRUE(memory.resolve({"", "a"}).value());
  EXPECT_TRUE(memory.resolve({"", "b"}).value());
  EXPECT_EQ(engine.admit(request("a")).kind, Kind::execute);
  EXPECT_EQ(engine.admit(request("b")).kind, Kind::execute);
  EXPECT_FALSE(memory.resolve({"", "missing"}).value());
}

TEST_F(EngineTest, ScopesIsolateKeys) {
  const auto a = engine.admit(request("k", "fp-a", "tenant-a"));
  engine.finish({"tenant-a", "k"}, a.token, policy, created("for a"));
  // Same key, other tenant, even another body: its own record, no mismatch.
  const auto b = engine.admit(request("k", "fp-b", "tenant-b"));
  ASSERT_EQ(b.kind, Kind::execute);
  engine.finish({"tenant-b", "k"}, b.token, policy, created("for b"));
  EXPECT_EQ(engine.admit(request("k", "fp-a", "tenant-a")).replay->body, "for a");
  EXPECT_EQ(engine.admit(request("k", "fp-b", "tenant-b")).replay->body, "for b");
}

TEST_F(EngineTest, CompletionRestartsTheTtl) {
  const auto first = engine.admit(request("k"));
  clock.advance(10s);
  engine.finish({"", "k"}, first.token, policy, created());
  clock.advance(policy.ttl - 5s);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::replay);
}

// Issue 10, defect 5, on the memory store: the TTL of an in-flight record never frees
// it while the holder's lease runs; a renewed lease keeps it; a lapsed one frees it.
TEST_F(EngineTest, AnInFlightRecordPastItsTtlIsHeldUntilItsLeaseLapses) {
  policy.ttl = 2s;
  policy.lease = 3s;
  const auto first = engine.admit(request("k"));
  ASSERT_EQ(first.kind, Kind::execute);
  clock.advance(2800ms);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::in_flight);
  EXPECT_TRUE(engine.renew({"", "k"}, first.token, 3s));
  clock.advance(2s);  // 4.8 s: past the first lease, within the renewed one
  policy.on_stale = OnStale::retake;
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::in_flight);
  clock.advance(2s);  // the renewed lease lapsed: the holder is gone
  const auto retaken = engine.admit(request("k"));
  ASSERT_EQ(retaken.kind, Kind::execute);
  EXPECT_FALSE(engine.renew({"", "k"}, first.token, 3s));  // fenced
  EXPECT_EQ(engine.finish({"", "k"}, first.token, policy, created()), Finish::fenced);
}

// Issue 24 item 6: after_expiry: reject. Past ttl the record is a tombstone until
// tombstone_ttl: never replayed, never executed again; a replay's expiry is ttl's.
TEST_F(EngineTest, PastTtlATombstoneRefusesUntilItExpiresThenTheKeyIsFree) {
  policy.ttl = 1h;
  policy.after_expiry_reject = true;
  policy.tombstone_ttl = 24h;
  const auto first = engine.admit(request("k"));
  ASSERT_EQ(first.kind, Kind::execute);
  TimePoint expires_at{};
  ASSERT_EQ(engine.finish({"", "k"}, first.token, policy, created(), &expires_at), Finish::stored);
  EXPECT_EQ(expires_at, clock.now() + 1h);  // the answer's expiry, not the tombstone's
  clock.advance(59min);
  const auto replay = engine.admit(request("k"));
  ASSERT_EQ(replay.kind, Kind::replay);
  EXPECT_EQ(replay.expires_at, expires_at);
  clock.advance(2min);
  const auto late = engine.admit(request("k"));
  ASSERT_EQ(late.kind, Kind::expired);
  EXPECT_EQ(late.completed_at, clock.now() - 61min);
  EXPECT_EQ(engine.admit(request("k", "fp-other")).kind, Kind::mismatch);
  // GC drops the answer; the tombstone still refuses.
  EXPECT_EQ(memory.drop_answers("orders", policy.ttl, 10).value(), 1);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::expired);
  clock.advance(23h);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::execute);
}

TEST_F(EngineTest, WithoutTombstonesARetryPastTtlExecutesAgain) {
  policy.ttl = 1h;
  const auto first = engine.admit(request("k"));
  ASSERT_EQ(engine.finish({"", "k"}, first.token, policy, created()), Finish::stored);
  EXPECT_EQ(memory.drop_answers("orders", policy.ttl, 10).value(), 0);  // nothing past ttl
  clock.advance(61min);
  EXPECT_EQ(engine.admit(request("k")).kind, Kind::execute);
}
