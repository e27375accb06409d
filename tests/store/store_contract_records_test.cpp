// The contract of records past their request (store/views.hpp, store/maintenance.hpp):
// expiry, tombstones, resolve, purge and garbage collection, namespaces (scopes), and
// what operators read.
#include <algorithm>

#include "store_contract.hpp"

namespace idemproxy::testing {
namespace {

using store::Record;
using store::RecordState;

TEST_P(StoreContract, AnExpiredAnswerIsNotReplayedAndItsKeyIsClaimedAgain) {
  const auto old = claim_token(request("k"));
  ASSERT_TRUE(store->complete(id("k"), old, {200, {}, "old"}, kShort).ok());
  age(kPastShort);
  const Record expired = found("k");
  EXPECT_TRUE(expired.expired);
  EXPECT_EQ(expired.state, RecordState::completed);
  const auto fresh = claimed(request("k", 30s, 1h, "another fingerprint"));
  EXPECT_GT(fresh.token, old);
  EXPECT_FALSE(fresh.took_over);
  const Record r = found("k");
  EXPECT_EQ(r.state, RecordState::in_flight);
  EXPECT_EQ(r.fingerprint, "another fingerprint");
  EXPECT_FALSE(r.response.has_value());
  EXPECT_FALSE(r.expired);
}

// after_expiry: reject. Answers of one route whose replay window has ended are
// dropped; the record stays, as a tombstone, until it expires.
TEST_P(StoreContract, OldAnswersOfARouteBecomeTombstones) {
  // A window long enough to outlast the five writes before its first check on a busy
  // machine (kShort did not, on Citus under CI's load), and a little more to age past.
  constexpr Duration kWindow = 1s;
  const std::string route = "tombstones-" + scope;
  auto on_route = [&](const std::string& key, const std::string& r) {
    auto req = request(key, 30s, 1h, "fp-" + key);
    req.route = r;
    return req;
  };
  auto complete = [&](const store::ClaimRequest& req, store::StoredResponse answer) {
    ASSERT_TRUE(store->complete(req.id, claim_token(req), answer, {kWindow, 1h}).ok());
  };
  complete(on_route("old-1", route), {201, {{"X-N", "1"}}, "secret 1"});
  complete(on_route("old-2", route), {201, {{"X-N", "2"}}, "secret 2"});
  complete(on_route("too-large", route), {201, {}, "", false});
  complete(on_route("other-route", route + "-other"), {201, {}, "kept"});
  claim_token(on_route("in-flight", route));
  const Record before = found("old-1");
  ASSERT_TRUE(before.replay_until.has_value());
  EXPECT_EQ(*before.replay_until - before.completed_at, kWindow);
  EXPECT_EQ(before.expires_at - before.completed_at, 1h);
  // Answers within their window are kept.
  EXPECT_EQ(store->drop_answers(route, kWindow, 100).value(), 0);
  EXPECT_TRUE(found("old-1").response->body_stored);
  age(kWindow + 150ms);
  // Now two are older than kWindow: one at a time, then none. (On a shared database
  // another test may hold the GC lock for a moment: then a call drops nothing.)
  std::int64_t dropped = 0;
  for (int calls = 0; calls < 50 && dropped < 2; ++calls) {
    const auto n = store->drop_answers(route, kWindow, 1);
    ASSERT_TRUE(n.ok()) << n.error().detail;
    EXPECT_LE(n.value(), 1);
    dropped += n.value();
    if (n.value() == 0) age(10ms);
  }
  EXPECT_EQ(dropped, 2);
  EXPECT_EQ(store->drop_answers(route, kWindow, 100).value(), 0);
  for (const char* key : {"old-1", "old-2"}) {
    for (const Record& r : {found(key), existing(on_route(key, route))}) {
      EXPECT_EQ(r.state, RecordState::completed) << key;
      EXPECT_EQ(r.fingerprint, std::string("fp-") + key);
      ASSERT_TRUE(r.response.has_value()) << key;
      EXPECT_EQ(r.response->status, 201);
      EXPECT_FALSE(r.response->body_stored);
      EXPECT_TRUE(r.response->body.empty());
      EXPECT_TRUE(r.response->headers.empty());
    }
  }
  const Record tombstone = found("old-1");
  EXPECT_EQ(tombstone.completed_at, before.completed_at);
  EXPECT_EQ(tombstone.expires_at, before.expires_at);
  EXPECT_TRUE(found("other-route").response->body_stored);
  EXPECT_EQ(found("in-flight").state, RecordState::in_flight);
}

// An answer's window is its own (Idempotency-Policy: max-age): GC keeps an answer
// whose window outlasts the route's ttl, and drops one whose window is shorter.
TEST_P(StoreContract, EachAnswerKeepsTheReplayWindowItCompletedWith) {
  const std::string route = "own-window-" + scope;
  auto on_route = [&](const std::string& key) {
    auto req = request(key, 30s, 1h, "fp-" + key);
    req.route = route;
    return req;
  };
  const auto longer = on_route("longer");
  ASSERT_TRUE(store->complete(longer.id, claim_token(longer), {201, {}, "kept"}, {1h, 2h}).ok());
  const auto shorter = on_route("shorter");
  ASSERT_TRUE(
      store->complete(shorter.id, claim_token(shorter), {201, {}, "gone"}, {kShort, 1h}).ok());
  const Record kept = found("longer");
  ASSERT_TRUE(kept.replay_until.has_value());
  EXPECT_EQ(*kept.replay_until - kept.completed_at, 1h);
  EXPECT_EQ(kept.expires_at - kept.completed_at, 2h);
  // A claim answers with the window too (admission reads it there).
  ASSERT_TRUE(existing(longer).replay_until.has_value());
  EXPECT_EQ(*existing(longer).replay_until, *kept.replay_until);
  age(kPastShort);
  std::int64_t dropped = 0;
  for (int calls = 0; calls < 50 && dropped < 1; ++calls) {
    const auto n = store->drop_answers(route, kShort, 100);  // the route's ttl: kShort
    ASSERT_TRUE(n.ok()) << n.error().detail;
    dropped += n.value();
    if (n.value() == 0) age(10ms);
  }
  EXPECT_EQ(dropped, 1);
  EXPECT_TRUE(found("longer").response->body_stored);
  EXPECT_FALSE(found("shorter").response->body_stored);
  EXPECT_EQ(found("shorter").state, RecordState::completed);
}

TEST_P(StoreContract, ResolveReleasesAnIndeterminateOrStaleRecordAndNothingElse) {
  ASSERT_TRUE(
      store->mark_indeterminate(id("indeterminate"), claim_token(request("indeterminate", 30s)))
          .ok());
  claim_token(request("stale", kShort));
  claim_token(request("live", 30s));
  const auto done = claim_token(request("completed"));
  ASSERT_TRUE(store->complete(id("completed"), done, {200, {}, "ok"}, 1h).ok());
  ASSERT_TRUE(store->release(id("released"), claim_token(request("released"))).ok());
  age(kPastShort);
  for (const char* key : {"indeterminate", "stale"}) {
    const auto resolved = store->resolve(id(key));
    ASSERT_TRUE(resolved.ok());
    EXPECT_TRUE(resolved.value()) << key;
    EXPECT_EQ(found(key).state, RecordState::released) << key;
    claim_token(request(key));  // the next request executes
  }
  for (const char* key : {"live", "completed", "released", "missing"}) {
    const auto resolved = store->resolve(id(key));
    ASSERT_TRUE(resolved.ok());
    EXPECT_FALSE(resolved.value()) << key;
  }
  EXPECT_EQ(found("live").state, RecordState::in_flight);
  EXPECT_EQ(found("completed").state, RecordState::completed);
}

TEST_P(StoreContract, PurgeDeletesARecordInAnyStateAndFencesItsHolder) {
  const auto flying = claim_token(request("in-flight"));
  const auto done = claim_token(request("completed"));
  ASSERT_TRUE(store->complete(id("completed"), done, {200, {}, "ok"}, 1h).ok());
  ASSERT_TRUE(
      store->mark_indeterminate(id("indeterminate"), claim_token(request("indeterminate"))).ok());
  ASSERT_TRUE(store->release(id("released"), claim_token(request("released"))).ok());
  for (const char* key : {"in-flight", "completed", "indeterminate", "released"}) {
    const auto purged = store->purge(id(key));
    ASSERT_TRUE(purged.ok());
    EXPECT_TRUE(purged.value()) << key;
    EXPECT_TRUE(gone(key)) << key;
    EXPECT_FALSE(store->purge(id(key)).value()) << key;
  }
  EXPECT_FALSE(store->purge(id("missing")).value());
  const auto complete = store->complete(id("in-flight"), flying, {200, {}, "late"}, 1h);
  ASSERT_FALSE(complete.ok());
  EXPECT_EQ(complete.error().code, store::StoreErrc::fenced);
  EXPECT_GT(claim_token(request("in-flight")), flying);
}

TEST_P(StoreContract, GarbageCollectionDeletesExpiredRecordsInBatchesAndSparesLiveHolders) {
  std::vector<std::string> doomed;
  for (int i = 0; i < 5; ++i) {
    const auto key = "old-" + std::to_string(i);
    ASSERT_TRUE(store->complete(id(key), claim_token(request(key)), {200, {}, ""}, kShort).ok());
    doomed.push_back(key);
  }
  ASSERT_TRUE(store->release(id("released"), claim_token(request("released", 30s, kShort))).ok());
  claim_token(request("vanished", kShort, kShort));  // its lease ran out too
  doomed.insert(doomed.end(), {"released", "vanished"});
  claim_token(request("held", 30s, kShort));  // past its TTL, under a live lease
  ASSERT_TRUE(
      store->mark_indeterminate(id("unknown"), claim_token(request("unknown", 30s, kShort))).ok());
  ASSERT_TRUE(store->complete(id("live"), claim_token(request("live")), {200, {}, ""}, 1h).ok());
  age(kPastShort);
  const auto all_gone = [&] {
    return std::all_of(doomed.begin(), doomed.end(), [&](const auto& k) { return gone(k); });
  };
  // Other tests share a database's table: one may hold the GC lock for a moment (a
  // call then deletes nothing), or delete these rows first, and earlier runs may
  // have left many expired rows, which the GC takes in no order. Every call keeps to
  // its batch: 2 at first, then 1000 to work through such a backlog.
  int idle = 0;
  for (int calls = 0; calls < 10000 && idle < 500 && !all_gone(); ++calls) {
    const int limit = calls < 10 ? 2 : 1000;
    const auto n = store->delete_expired(limit);
    ASSERT_TRUE(n.ok()) << n.error().detail;
    EXPECT_LE(n.value(), limit);
    if (n.value() == 0) {
      ++idle;
      age(10ms);
    }
  }
  EXPECT_TRUE(all_gone());
  for (const char* key : {"held", "unknown", "live"}) EXPECT_FALSE(gone(key)) << key;
}

// A route's namespace is folded into the scope ("ns:<namespace>:<scope>"): one key in
// two scopes is two records.
TEST_P(StoreContract, OneKeyInTwoScopesIsTwoIndependentRecords) {
  const std::string other = "ns:v2:" + scope;
  auto there = request("k");
  there.id.scope = other;
  const auto here_token = claim_token(request("k"));
  const auto there_token = claim_token(there);
  EXPECT_NE(here_token, there_token);
  ASSERT_TRUE(store->complete(id("k"), here_token, {201, {}, "here"}, 1h).ok());
  const auto there_record = store->find(there.id).value();
  ASSERT_TRUE(there_record.has_value());
  EXPECT_EQ(there_record->state, RecordState::in_flight);
  EXPECT_EQ(there_record->id.scope, other);
  auto listed = store->list(std::nullopt, 1000).value();
  EXPECT_EQ(std::count_if(listed.begin(), listed.end(),
                          [&](const Record& r) {
                            return r.id.key == "k" && (r.id.scope == scope || r.id.scope == other);
                          }),
            2);
  ASSERT_TRUE(store->purge(id("k")).value());
  EXPECT_TRUE(store->find(there.id).value().has_value());
  ASSERT_TRUE(store->complete(there.id, there_token, {201, {}, "there"}, 1h).ok());
  EXPECT_EQ(store->find(there.id).value()->response->body, "there");
}

TEST_P(StoreContract, AListingShowsTheNewestRecordsFirstWithoutTheirAnswers) {
  claim_token(request("a"));
  age(20ms);
  ASSERT_TRUE(store
                  ->complete(id("b"), claim_token(request("b")),
                             {201, {{"X-Secret", "s"}}, "the answer"}, 1h)
                  .ok());
  age(20ms);
  ASSERT_TRUE(store->mark_indeterminate(id("c"), claim_token(request("c"))).ok());
  const auto mine = [&](std::optional<RecordState> state) {
    const auto listed = store->list(state, 1000);
    EXPECT_TRUE(listed.ok());
    std::vector<Record> out;
    for (const auto& r : listed.value()) {
      if (r.id.scope == scope) out.push_back(r);
    }
    return out;
  };
  const auto all = mine(std::nullopt);
  ASSERT_EQ(all.size(), 3U);
  EXPECT_EQ(all[0].id.key, "c");
  EXPECT_EQ(all[1].id.key, "b");
  EXPECT_EQ(all[2].id.key, "a");
  for (const Record& r : all) {
    const Record whole = found(r.id.key);
    EXPECT_EQ(r.state, whole.state);
    EXPECT_EQ(r.token, whole.token);
    EXPECT_EQ(r.fingerprint, whole.fingerprint);
    EXPECT_EQ(r.route, whole.route);
    EXPECT_EQ(r.method, whole.method);
    EXPECT_EQ(r.target, whole.target);
    EXPECT_EQ(r.created_at, whole.created_at);
    EXPECT_EQ(r.expires_at, whole.expires_at);
    EXPECT_EQ(r.completed_at, whole.completed_at);
    EXPECT_EQ(r.stale, whole.stale);
    EXPECT_EQ(r.expired, whole.expired);
    EXPECT_GE(r.store_now, r.created_at);
  }
  // The answer's status, never its fields or body.
  ASSERT_TRUE(all[1].response.has_value());
  EXPECT_EQ(all[1].response->status, 201);
  EXPECT_TRUE(all[1].response->body_stored);
  EXPECT_TRUE(all[1].response->headers.empty());
  EXPECT_TRUE(all[1].response->body.empty());
  EXPECT_FALSE(all[0].response.has_value());
  for (const auto& [state, key] : {std::pair{RecordState::in_flight, "a"},
                                   {RecordState::completed, "b"},
                                   {RecordState::indeterminate, "c"}}) {
    const auto only = mine(state);
    ASSERT_EQ(only.size(), 1U) << key;
    EXPECT_EQ(only[0].id.key, key);
  }
  const auto two = store->list(std::nullopt, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two.value().size(), 2U);
}

// The count an operator's gauge shows. Other tests on a shared database may mark or
// resolve records meanwhile: the change is looked for a few times.
TEST_P(StoreContract, IndeterminateRecordsAreCounted) {
  ASSERT_TRUE(store->ping().ok());
  std::int64_t change = 0;
  for (int attempt = 0; attempt < 10 && change != 1; ++attempt) {
    const auto key = "unknown-" + std::to_string(attempt);
    const auto before = store->count_indeterminate().value();
    ASSERT_TRUE(store->mark_indeterminate(id(key), claim_token(request(key))).ok());
    change = store->count_indeterminate().value() - before;
  }
  EXPECT_EQ(change, 1);
  change = 0;
  for (int attempt = 0; attempt < 10 && change != -1; ++attempt) {
    const auto key = "resolved-" + std::to_string(attempt);
    ASSERT_TRUE(store->mark_indeterminate(id(key), claim_token(request(key))).ok());
    const auto before = store->count_indeterminate().value();
    ASSERT_TRUE(store->resolve(id(key)).value());
    change = store->count_indeterminate().value() - before;
  }
  EXPECT_EQ(change, -1);
}

}  // namespace
}  // namespace idemproxy::testing
