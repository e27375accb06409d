// PgStore group commit: batches behind a busy connection, one key many times in a
// batch, a failing member, awkward bytes in the multi-row statements.
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "idemproxy/common/handoff.hpp"
#include "pg_store_fixture.hpp"
#include "store/pg/pool.hpp"

using idemproxy::testing::wait_until_blocked_by;
using idemproxy::testing::wait_until_queued;

namespace {

namespace pg = idemproxy::store::pg;

/// `tx`'s session as the pool sets up its own (force_generic_plan among them).
void as_the_pool(pqxx::transaction_base& tx, const std::string& dsn) {
  for (const auto& s : pg::session_settings(PgOptions{dsn}, false)) tx.exec(s);
}

/// Prepares statement `s` in `tx`'s session and explains `EXECUTE` of it with `args`,
/// with `options` ("" or "(ANALYZE, ...)"): the plan's text, a line per node.
std::string explain(pqxx::transaction_base& tx, const pg::Statement& s, const std::string& args,
                    const std::string& options = "") {
  std::string text;
  for (const auto& row : tx.exec("EXPLAIN " + options + " EXECUTE " + s.name + args)) {
    text += row[0].c_str();
    text += '\n';
  }
  return text;
}

}  // namespace

TEST_F(PgStoreTest, ClaimsQueuedBehindABusyConnectionCommitTogether) {
  if (citus()) GTEST_SKIP() << "on Citus only claims are batched, per shard (PgCitusTest)";
  PgStore one({dsn(), 1, 5s});
  HeldConnection held(one, request("gate"));
  constexpr int kClaims = 24;
  std::vector<Result<ClaimResult>> results(kClaims, StoreError{});
  const auto before = one.batch_stats();
  held.queue_and_release(kClaims,
                         [&](int i) { results[i] = one.claim(request("k" + std::to_string(i))); });
  const auto after = one.batch_stats();
  // The held completion was one batch; the 24 claims were one more, not 24.
  EXPECT_EQ(after.batches - before.batches, 2);
  EXPECT_EQ(after.operations - before.operations, kClaims + 1);
  EXPECT_EQ(after.fallbacks, 0);
  std::set<std::int64_t> tokens;
  for (int i = 0; i < kClaims; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].error().detail;
    ASSERT_TRUE(std::holds_alternative<Claimed>(results[i].value())) << i;
    tokens.insert(std::get<Claimed>(results[i].value()).token);
    // Committed: another session sees every claim.
    auto found = store->find(request("k" + std::to_string(i)).id);
    ASSERT_TRUE(found.ok() && found.value());
    EXPECT_EQ(found.value()->state, RecordState::in_flight);
  }
  EXPECT_EQ(tokens.size(), static_cast<std::size_t>(kClaims));
}

TEST_F(PgStoreTest, OneKeyClaimedManyTimesInOneBatchHasExactlyOneWinner) {
  if (citus()) GTEST_SKIP() << "on Citus only claims are batched, per shard (PgCitusTest)";
  PgStore one({dsn(), 1, 5s});
  HeldConnection held(one, request("gate"));
  constexpr int kClaims = 16;
  std::vector<Result<ClaimResult>> results(kClaims, StoreError{});
  held.queue_and_release(kClaims, [&](int i) { results[i] = one.claim(request("storm")); });
  int winners = 0;
  std::int64_t token = 0;
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.error().detail;
    if (std::holds_alternative<Claimed>(r.value())) {
      ++winners;
      token = std::get<Claimed>(r.value()).token;
    }
  }
  ASSERT_EQ(winners, 1);
  for (const auto& r : results) {
    if (const auto* rec = std::get_if<Record>(&r.value())) {
      EXPECT_EQ(rec->state, RecordState::in_flight);
      EXPECT_EQ(rec->token, token);
    }
  }
}

// A later claim of a key in the batch that claimed it is given the record the first
// claim wrote, as reading its row gives it: that row answers only the token and the
// lease (IDEMPROXY_OWN_CLAIM_COLUMNS), so the record comes from the first's request.
// Each claim sends its own fingerprint, target, lease and TTL, so one taken from the
// wrong request shows; in the clear and sealed.
TEST_F(PgStoreTest, ALaterClaimInTheBatchSeesTheRecordTheFirstWroteAsItsRowHoldsIt) {
  if (citus()) GTEST_SKIP() << "on Citus only claims are batched, per shard (PgCitusTest)";
  for (const bool sealed : {false, true}) {
    PgStore one({dsn(), 1, 5s, false, sealed ? ring({{"k1", 7}}) : nullptr});
    const std::string key = sealed ? "sealed-storm" : "clear-storm";
    constexpr int kClaims = 6;
    std::vector<ClaimRequest> requests;
    for (int i = 0; i < kClaims; ++i) {
      requests.push_back(request(key, 30s + std::chrono::milliseconds(7 * i),
                                 1h + std::chrono::milliseconds(11 * i),
                                 "fp-" + std::to_string(i)));
      requests.back().target = "/v1/orders/" + std::to_string(i);
    }
    std::vector<Result<ClaimResult>> results(kClaims, StoreError{});
    {
      HeldConnection held(one, request(key + "-gate"));
      held.queue_and_release(kClaims, [&](int i) { results[i] = one.claim(requests[i]); });
    }
    int winner = -1;
    for (int i = 0; i < kClaims; ++i) {
      ASSERT_TRUE(results[i].ok()) << results[i].error().detail;
      if (std::holds_alternative<Claimed>(results[i].value())) winner = i;
    }
    ASSERT_GE(winner, 0);
    const auto found = one.find(requests[winner].id);
    ASSERT_TRUE(found.ok() && found.value());
    const Record& row = *found.value();
    EXPECT_EQ(row.fingerprint, "fp-" + std::to_string(winner));
    EXPECT_EQ(row.sealed_with.has_value(), sealed);
    for (int i = 0; i < kClaims; ++i) {
      if (i == winner) continue;
      const auto* r = std::get_if<Record>(&results[i].value());
      ASSERT_NE(r, nullptr) << i;
      EXPECT_EQ(r->state, RecordState::in_flight);
      EXPECT_EQ(r->token, std::get<Claimed>(results[winner].value()).token);
      EXPECT_EQ(r->fingerprint, row.fingerprint);
      EXPECT_EQ(r->route, row.route);
      EXPECT_EQ(r->method, row.method);
      EXPECT_EQ(r->target, row.target);
      EXPECT_EQ(r->created_at, row.created_at);
      EXPECT_EQ(r->locked_until, row.locked_until);
      EXPECT_EQ(r->expires_at, row.expires_at);
      EXPECT_EQ(r->completed_at, row.completed_at);
      EXPECT_EQ(r->store_now, row.created_at);  // read in the claim's own transaction
      EXPECT_EQ(r->sealed_with, row.sealed_with);
      EXPECT_FALSE(r->expired || r->stale || r->response || r->streaming);
    }
  }
}

TEST_F(PgStoreTest, AFailingStatementDoesNotFailTheRestOfItsBatch) {
  if (citus()) GTEST_SKIP() << "on Citus only claims are batched, per shard (PgCitusTest)";
  PgStore one({dsn(), 1, 5s});
  HeldConnection held(one, request("gate"));
  // A claim and a completion that will share the batch with one bad statement.
  const auto done_req = request("to-complete");
  const auto done_token = claim_token(done_req);
  std::optional<Result<ClaimResult>> good, bad;
  std::optional<Result<TimePoint>> completed;
  held.queue_and_release(3, [&](int i) {
    if (i == 0) good = one.claim(request("good"));
    if (i == 1) completed = one.complete(done_req.id, done_token, {200, {}, "ok"}, 1h);
    if (i == 2) bad = one.claim(request("not-utf8-\xff\xfe"));  // the server refuses it
  });
  EXPECT_EQ(one.batch_stats().fallbacks, 1);
  ASSERT_TRUE(good->ok()) << good->error().detail;
  EXPECT_TRUE(std::holds_alternative<Claimed>(good->value()));
  ASSERT_TRUE(completed->ok()) << completed->error().detail;
  EXPECT_EQ(store->find(done_req.id).value()->response->body, "ok");
  ASSERT_FALSE(bad->ok());
  EXPECT_EQ(bad->error().code, StoreErrc::unavailable);
  EXPECT_NE(bad->error().detail.find("UTF8"), std::string::npos) << bad->error().detail;
}

// Keys, headers and bodies that need quoting in an array literal, bytes that are not
// text, an empty body and a status-only record: all survive one multi-row claim and
// one multi-row completion byte for byte, in the clear and sealed.
TEST_F(PgStoreTest, BatchedClaimsAndCompletionsRoundTripAwkwardBytes) {
  if (citus()) GTEST_SKIP() << "on Citus only claims are batched, per shard (PgCitusTest)";
  std::string binary;
  for (int i = 0; i < 3000; ++i) binary += static_cast<char>(i % 256);
  const std::vector<std::string> keys = {
      "plain", "with \"quotes\"", "back\\slash", "{braces},comma", "NULL", "ünïcødé", " spaced "};
  const std::vector<StoredResponse> answers = {
      {201, {{"Content-Type", "application/json"}}, "{\"id\":1}"},
      {200, {{"X-Quote", "say \"hi\""}, {"X-Back", "a\\b"}}, binary},
      {204, {}, ""},
      {200, {{"X-Multi", "a"}, {"X-Multi", "b"}}, "\\x00 not hex"},
      {202, {}, "NULL"},
      {200, {}, std::string("nul\0inside", 10)},
      {500, {}, "too big to keep", false}};
  for (const bool sealed : {false, true}) {
    PgStore one({dsn(), 1, 5s, false, sealed ? ring({{"k1", 7}}) : nullptr});
    const std::string prefix = sealed ? "sealed/" : "clear/";
    std::vector<std::int64_t> tokens(keys.size());
    {
      HeldConnection held(one, request(prefix + "gate-claims"));
      held.queue_and_release(static_cast<int>(keys.size()), [&](int i) {
        auto r = one.claim(request(prefix + keys[i]));
        tokens[i] = r.ok() && std::holds_alternative<Claimed>(r.value())
                        ? std::get<Claimed>(r.value()).token
                        : -1;
      });
    }
    for (const auto t : tokens) ASSERT_GT(t, 0);
    const auto before = one.batch_stats();
    {
      HeldConnection held(one, request(prefix + "gate-completions"));
      std::vector<char> ok(keys.size());  // not vector<bool>: its bits share words
      held.queue_and_release(static_cast<int>(keys.size()), [&](int i) {
        ok[i] = one.complete(request(prefix + keys[i]).id, tokens[i], answers[i], 1h).ok();
      });
      for (std::size_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(ok[i]) << keys[i];
    }
    // The gate's claim, the gate's completion, and one for all seven completions.
    EXPECT_EQ(one.batch_stats().batches - before.batches, 3);
    EXPECT_EQ(one.batch_stats().fallbacks, 0);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      auto found = one.find(request(prefix + keys[i]).id);
      ASSERT_TRUE(found.ok() && found.value()) << keys[i];
      const Record& r = *found.value();
      EXPECT_EQ(r.state, RecordState::completed) << keys[i];
      EXPECT_EQ(r.token, tokens[i]);
      EXPECT_EQ(r.fingerprint, "fp-1");
      ASSERT_TRUE(r.response) << keys[i];
      EXPECT_EQ(r.response->status, answers[i].status);
      EXPECT_EQ(r.response->body_stored, answers[i].body_stored) << keys[i];
      if (answers[i].body_stored) {
        EXPECT_EQ(r.response->body, answers[i].body) << keys[i];
        EXPECT_EQ(r.response->headers, answers[i].headers) << keys[i];
      }
    }
  }
}

// The proxy's I/O thread hands its claims and completions to group commit and goes
// on: claim_async and complete_async return while the database is busy, and their
// answers come later, from a runner thread, once their batch committed. (Before
// this, every call held a thread of the proxy's database pool until its batch had
// run: a thread hop and a context switch each way, docs/PERFORMANCE.md.)
TEST_F(PgStoreTest, QueuedCallsReturnAtOnceAndAreAnsweredFromARunnerThread) {
  PgStore one({dsn(), 1, 5s});
  ASSERT_TRUE(one.queues_calls());
  HeldConnection held(one, request("gate"));
  constexpr int kClaims = 12;
  std::vector<ClaimRequest> requests;
  for (int i = 0; i < kClaims; ++i) requests.push_back(request("async-" + std::to_string(i)));
  std::mutex mu;
  std::condition_variable answered;
  std::vector<Result<ClaimResult>> results;
  std::set<std::thread::id> answered_on;
  const auto started = std::chrono::steady_clock::now();
  for (const auto& r : requests) {
    one.claim_async(r, [&](Result<ClaimResult> result) {
      std::lock_guard lock(mu);
      results.push_back(std::move(result));
      answered_on.insert(std::this_thread::get_id());
      answered.notify_one();
    });
  }
  // The only connection is held: had a call waited for its answer, this would not
  // be reached before the release.
  EXPECT_LT(std::chrono::steady_clock::now() - started, 1s);
  idemproxy::testing::wait_until_queued(one, kClaims);
  {
    std::lock_guard lock(mu);
    EXPECT_TRUE(results.empty());
  }
  EXPECT_TRUE(held.release());
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(answered.wait_for(lock, 10s, [&] { return results.size() == kClaims; }));
  }
  EXPECT_FALSE(answered_on.count(std::this_thread::get_id()));
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.error().detail;
    ASSERT_TRUE(std::holds_alternative<Claimed>(r.value()));
  }
  // Their completions, queued the same way.
  std::vector<std::pair<RecordId, std::int64_t>> held_keys;
  for (const auto& r : requests) {
    const auto found = store->find(r.id).value();
    ASSERT_TRUE(found);
    held_keys.emplace_back(r.id, found->token);
  }
  const StoredResponse response{201, {{"X-Async", "1"}}, "done"};
  std::atomic<int> completed{0};
  for (const auto& [id, token] : held_keys) {
    one.complete_async(id, token, response, 1h, [&](Result<TimePoint> r) {
      // The count too, under the lock: the test ends, and `answered` goes, once the
      // count is full, so no runner may still be about to notify it.
      std::lock_guard lock(mu);
      if (r.ok()) ++completed;
      answered.notify_one();
    });
  }
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(answered.wait_for(lock, 10s, [&] { return completed.load() == kClaims; }));
  }
  for (const auto& [id, token] : held_keys) {
    const auto found = store->find(id).value();
    ASSERT_TRUE(found && found->response);
    EXPECT_EQ(found->state, RecordState::completed);
    EXPECT_EQ(found->response->body, "done");
  }
}

// The pool's sessions keep generic plans (force_generic_plan), made once from what
// the table looked like then. Plans made on an empty table (a new deployment) chose
// sequential scans and kept them as the table grew: a fresh proxy slowed from 3,451
// to 1,457 fresh keys/s in 12 s, reading 11.5 million rows in its first 4 s
// (docs/PERFORMANCE.md). Made under the pool's own session settings, on an empty copy
// of the table, the plans of the batch statements and the lookup still read it by
// index once it holds 50,000 rows.
TEST_F(PgStoreTest, PlansMadeOnAnEmptyTableStillUseTheIndexOnceItGrows) {
  if (citus()) GTEST_SKIP() << "on Citus the workers plan each shard's statement";
  pqxx::connection c(dsn());
  pqxx::nontransaction tx(c);
  as_the_pool(tx, dsn());
  // An empty copy, in front of the real table for this session only.
  tx.exec("CREATE TEMP TABLE idempotency_records (LIKE public.idempotency_records INCLUDING ALL)");
  const std::vector<std::pair<const pg::Statement*, std::string>> statements{
      {&pg::kClaimMany,
       "('{s}', '{k}', '{f}', '{r}', '{POST}', '{/t}', '{30000}', '{3600000}', '{NULL}', "
       "false, '{1}', '{NULL}')"},
      {&pg::kCompleteMany,
       "('{s}', '{k}', '{1}', '{201}', '{NULL}', '{NULL}', '{3600000}', '{NULL}', '{3600000}')"},
      {&pg::kClaimCompleteMany,
       "('{s}', '{k}', '{f}', '{r}', '{POST}', '{/t}', '{30000}', '{3600000}', '{NULL}', "
       "false, '{1}', '{s}', '{k2}', '{1}', '{201}', '{NULL}', '{NULL}', '{3600000}', '{NULL}', "
       "'{3600000}', '{NULL}')"},
      {&pg::kFind, "('s', 'k')"},
  };
  for (const auto& [s, args] : statements) {
    tx.exec("PREPARE " + std::string(s->name) + " AS " + s->sql);
    explain(tx, *s, args);  // the generic plan is made now, on the empty table, and cached
  }
  tx.exec(
      "INSERT INTO idempotency_records (scope, key, fingerprint, state, token, expires_at)"
      " SELECT 's', 'k' || i, 'f', 'completed', i, now() + interval '1 hour'"
      " FROM generate_series(1, 50000) AS i");
  for (const auto& [s, args] : statements) {
    const std::string text = explain(tx, *s, args);
    EXPECT_EQ(text.find("Seq Scan on idempotency_records"), std::string::npos) << s->name << ":\n"
                                                                               << text;
  }
}

// A batch of claims looks up live rows only for the members it did not claim. The
// statement's snapshot does not see the rows it inserted, so a lookup per member
// found nothing for every claim that won: a primary-key descent each, for nothing
// (bench/ab.sh at equal rates: 0.983 of the database's CPU per fresh key without it).
// A batch of new keys, whose claims all win, reads the table by index not at all.
TEST_F(PgStoreTest, ABatchOfClaimsThatAllWinLooksUpNoLiveRows) {
  if (citus()) GTEST_SKIP() << "on Citus a batch's claims go as rows (claim_rows_sql)";
  pqxx::connection c(dsn());
  pqxx::work tx(c);
  as_the_pool(tx, dsn());
  tx.exec("PREPARE " + std::string(pg::kClaimMany.name) + " AS " + pg::kClaimMany.sql);
  const std::string key = "all-win-" + std::to_string(::getpid());
  const std::string text =
      explain(tx, pg::kClaimMany,
              "('{s,s,s}', '{" + key + "-1," + key + "-2," + key +
                  "-3}', '{f,f,f}', '{r,r,r}', '{POST,POST,POST}', '{/t,/t,/t}', "
                  "'{30000,30000,30000}', '{3600000,3600000,3600000}', '{NULL,NULL,NULL}', "
                  "false, '{1,2,3}', '{NULL,NULL,NULL}')",
              "(ANALYZE, COSTS OFF, TIMING OFF)");
  tx.abort();
  EXPECT_NE(text.find("Tuples Inserted: 3"), std::string::npos) << text;
  // The one index scan of the table is the unclaimed members' lookup.
  const auto scan = text.find("Index Scan using idempotency_records_pkey on idempotency_records");
  ASSERT_NE(scan, std::string::npos) << text;
  const std::string line = text.substr(scan, text.find('\n', scan) - scan);
  EXPECT_NE(line.find("(never executed)"), std::string::npos) << text;
  EXPECT_EQ(text.find("Index Scan using idempotency_records_pkey", scan + 1), std::string::npos)
      << text;
}

// A batch that holds both claims and completions goes as one statement
// (kClaimCompleteMany): one round trip and one commit where kClaimMany and
// kCompleteMany took two of each. Measured with bench/ab.sh: 1.10 × the fresh keys
// per second at 0.93 × the proxy's CPU per key (docs/PERFORMANCE.md). Every member
// still gets its own answer, awkward bytes included.
TEST_F(PgStoreTest, ClaimsAndCompletionsOfOneBatchGoAsOneStatement) {
  if (citus()) GTEST_SKIP() << "on Citus only claims are batched, per shard (PgCitusTest)";
  PgStore one({dsn(), 1, 5s});
  constexpr int kEach = 6;
  std::vector<std::int64_t> held_tokens;
  for (int i = 0; i < kEach; ++i)
    held_tokens.push_back(claim_token(request("done-" + std::to_string(i))));
  std::string binary;
  for (int i = 0; i < 600; ++i) binary += static_cast<char>(i % 256);
  const StoredResponse answer{201, {{"X-Quote", "say \"hi\""}, {"X-Back", "a\\b"}}, binary};
  HeldConnection held(one, request("gate"));
  const auto before = one.batch_stats();
  std::vector<Result<ClaimResult>> claims(kEach, StoreError{});
  std::vector<char> completed(kEach);  // not vector<bool>: its bits share words
  held.queue_and_release(2 * kEach, [&](int i) {
    if (i < kEach) {
      claims[i] = one.claim(request("new-" + std::to_string(i)));
    } else {
      const int j = i - kEach;
      completed[j] =
          one.complete(request("done-" + std::to_string(j)).id, held_tokens[j], answer, 1h).ok();
    }
  });
  const auto after = one.batch_stats();
  // The held completion was one batch; the twelve were one more, in one statement.
  EXPECT_EQ(after.batches - before.batches, 2);
  EXPECT_EQ(after.operations - before.operations, 2 * kEach + 1);
  EXPECT_EQ(after.multi_row - before.multi_row, 1);
  EXPECT_EQ(after.fallbacks, 0);
  std::set<std::int64_t> tokens;
  for (int i = 0; i < kEach; ++i) {
    ASSERT_TRUE(claims[i].ok()) << claims[i].error().detail;
    ASSERT_TRUE(std::holds_alternative<Claimed>(claims[i].value())) << i;
    tokens.insert(std::get<Claimed>(claims[i].value()).token);
    const auto found = store->find(request("new-" + std::to_string(i)).id).value();
    ASSERT_TRUE(found);
    EXPECT_EQ(found->state, RecordState::in_flight);
    EXPECT_EQ(found->token, std::get<Claimed>(claims[i].value()).token);
  }
  EXPECT_EQ(tokens.size(), static_cast<std::size_t>(kEach));
  for (int j = 0; j < kEach; ++j) {
    EXPECT_TRUE(completed[j]) << j;
    const auto found = store->find(request("done-" + std::to_string(j)).id).value();
    ASSERT_TRUE(found && found->response) << j;
    EXPECT_EQ(found->state, RecordState::completed);
    EXPECT_EQ(found->response->body, binary);
    EXPECT_EQ(found->response->headers, answer.headers);
  }
}

// A key both claimed (a retry) and completed in one batch is kept out of the shared
// statement: two parts of one statement must not change one row (PostgreSQL refuses
// it: "ON CONFLICT DO UPDATE command cannot affect row a second time"), which would
// fail the whole batch over to one statement per member.
TEST_F(PgStoreTest, AKeyClaimedAndCompletedInOneBatchIsKeptApart) {
  if (citus()) GTEST_SKIP() << "on Citus only claims are batched, per shard (PgCitusTest)";
  PgStore one({dsn(), 1, 5s});
  const auto token = claim_token(request("busy"));
  HeldConnection held(one, request("gate"));
  std::optional<Result<ClaimResult>> retry, fresh;
  std::optional<Result<TimePoint>> completed;
  held.queue_and_release(3, [&](int i) {
    if (i == 0) completed = one.complete(request("busy").id, token, {201, {}, "ok"}, 1h);
    if (i == 1) retry = one.claim(request("busy"));
    if (i == 2) fresh = one.claim(request("fresh"));
  });
  EXPECT_EQ(one.batch_stats().fallbacks, 0);
  ASSERT_TRUE(completed->ok()) << completed->error().detail;
  ASSERT_TRUE(retry->ok()) << retry->error().detail;
  // The retry found the record held or done, never a claim of its own.
  ASSERT_TRUE(std::holds_alternative<Record>(retry->value()));
  EXPECT_EQ(std::get<Record>(retry->value()).token, token);
  ASSERT_TRUE(fresh->ok()) << fresh->error().detail;
  EXPECT_TRUE(std::holds_alternative<Claimed>(fresh->value()));
  EXPECT_EQ(store->find(request("busy").id).value()->response->body, "ok");
}

// One batch at a time makes the largest batches, the cheapest per key for the database
// (docs/PERFORMANCE.md, issue 26): calls queued behind a running batch wait for its
// runner, though a slot is free, until a full batch (batch_max) waits; then a second
// batch runs beside the first.
TEST_F(PgStoreTest, ASecondBatchStartsBesideARunningOneOnlyOnceAFullBatchWaits) {
  if (citus()) GTEST_SKIP() << "on Citus each worker's lane runs one batch at a time";
  // Two batch slots. The gate's completion waits on its lock for as long as the test
  // waits below (up to 10 s), so its statement_timeout is longer than that: with 5 s,
  // the completion timed out once under ASan in CI while the claims took their time,
  // and release() read false (the test ran 5063 ms).
  PgOptions options{dsn(), 8, 30s};
  options.batch_max = 4;
  PgStore eight(options);
  HeldConnection held(eight, request("gate"));  // the running batch, held on a lock
  std::mutex mu;
  std::condition_variable answered;
  int claimed = 0;
  std::deque<ClaimRequest> requests;  // a queued call refers to its request until answered
  const auto claim = [&](const std::string& key) {
    eight.claim_async(requests.emplace_back(request(key)), [&](Result<ClaimResult> r) {
      std::lock_guard lock(mu);
      if (r.ok() && std::holds_alternative<Claimed>(r.value())) ++claimed;
      answered.notify_one();
    });
  };
  for (int i = 0; i < 3; ++i) claim("few-" + std::to_string(i));
  wait_until_queued(eight, 3);
  std::this_thread::sleep_for(300ms);  // time enough for a second batch to have started
  EXPECT_EQ(eight.batch_stats().queued, 3);
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(claimed, 0);
  }
  for (int i = 0; i < 2; ++i) claim("full-" + std::to_string(i));  // five queued: a full batch
  {
    std::unique_lock lock(mu);
    // All five, while the first batch is still held: a batch of four, then the one left.
    EXPECT_TRUE(answered.wait_for(lock, 10s, [&] { return claimed == 5; })) << claimed;
  }
  EXPECT_TRUE(held.release());
}

// Issue 37: store.postgres.batch_wait. A drain whose lane's last batch had company
// waits up to batch_wait for as many members as that batch had, and runs as soon as
// they are queued; after a batch of one, nothing waits, so a lone request's latency
// is as without the wait.
TEST_F(PgStoreTest, ABatchWaitsForCompanyOnlyAfterOneThatHadIt) {
  if (citus()) GTEST_SKIP() << "on Citus claims batch per worker; the lane rule is the same";
  PgOptions options{dsn(), 1, 5s};
  options.batch_max = 3;
  options.batch_wait = 1s;
  PgStore one(options);
  using Clock = std::chrono::steady_clock;
  // A claim answered through group commit, timed from its submission.
  struct Timed {
    std::mutex mu;
    std::condition_variable cv;
    int answered = 0;
    std::vector<Clock::duration> took;
  } timed;
  std::deque<ClaimRequest> requests;  // a queued claim refers to its request until answered
  auto submit = [&](const std::string& key) {
    const auto start = Clock::now();
    one.claim_async(requests.emplace_back(request(key)), [&timed, start](Result<ClaimResult> r) {
      EXPECT_TRUE(r.ok() && std::holds_alternative<Claimed>(r.value()));
      std::lock_guard lock(timed.mu);
      timed.took.push_back(Clock::now() - start);
      ++timed.answered;
      timed.cv.notify_all();
    });
  };
  auto await = [&](int n) {
    std::unique_lock lock(timed.mu);
    EXPECT_TRUE(timed.cv.wait_for(lock, 10s, [&] { return timed.answered >= n; }));
  };
  // The first batch ever, and every one after a batch of one: at once.
  auto started = Clock::now();
  ASSERT_TRUE(one.claim(request("wait-lone-1")).ok());
  EXPECT_LT(Clock::now() - started, 500ms);
  // Two claims queued behind a held connection run as a batch with company.
  {
    HeldConnection held(one, request("wait-gate"));
    held.queue_and_release(
        2, [&](int i) { ASSERT_TRUE(one.claim(request("wait-pair-" + std::to_string(i))).ok()); });
  }
  // So the next one waits for company, and runs as soon as two are queued.
  const auto before = one.batch_stats();
  submit("wait-a");
  std::this_thread::sleep_for(200ms);
  {
    std::lock_guard lock(timed.mu);
    EXPECT_EQ(timed.answered, 0) << "ran without waiting for company";
  }
  submit("wait-b");
  await(2);
  const auto after = one.batch_stats();
  EXPECT_EQ(after.batches - before.batches, 1);
  EXPECT_EQ(after.operations - before.operations, 2);
  EXPECT_LT(timed.took.at(0), 900ms) << "the expected company did not end the wait";
  // After that batch of two, a lone claim waits the whole batch_wait, no longer ...
  submit("wait-c");
  await(3);
  EXPECT_GE(timed.took.at(2), 900ms);
  EXPECT_LT(timed.took.at(2), 5s);
  // ... and, its batch having been one, the next runs at once.
  started = Clock::now();
  ASSERT_TRUE(one.claim(request("wait-lone-2")).ok());
  EXPECT_LT(Clock::now() - started, 500ms);
}

// A batch hands its members their answers through one common::Handoff, which the
// proxy delivers with one post per I/O thread instead of one per member (bench/ab.sh
// fresh: 1.13 x the keys/s at 0.90 x the proxy's CPU per key). Each answer is handed
// over while the batch's handoff is open, and the handoff delivers them together, in
// the batch's order, once every member has its answer.
TEST_F(PgStoreTest, ABatchHandsItsAnswersOverTogether) {
  if (citus()) GTEST_SKIP() << "on Citus a claim's batch is its worker's; the handoff is the same";
  PgStore one({dsn(), 1, 5s});
  HeldConnection held(one, request("handoff-gate"));
  struct Delivered {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::vector<int>> deliveries;  // the members' indexes, per delivery
    int answered = 0;
    int without_handoff = 0;
  } d;
  const common::Handoff::Deliver deliver = [](void* target,
                                              std::vector<common::Deferred>& answers) {
    auto& to = *static_cast<Delivered*>(target);
    std::lock_guard lock(to.mu);
    to.deliveries.emplace_back();
    for (auto& answer : answers) answer();  // each adds its index to this delivery
    to.cv.notify_all();
  };
  constexpr int kClaims = 4;
  std::deque<ClaimRequest> requests;  // a queued claim refers to its request until answered
  for (int i = 0; i < kClaims; ++i) {
    one.claim_async(requests.emplace_back(request("handoff-" + std::to_string(i))),
                    [&d, deliver, i](Result<ClaimResult> r) {
                      EXPECT_TRUE(r.ok() && std::holds_alternative<Claimed>(r.value()));
                      common::Handoff* batch = common::Handoff::current();
                      if (batch == nullptr) {
                        std::lock_guard lock(d.mu);
                        ++d.without_handoff;
                        ++d.answered;
                        d.cv.notify_all();
                        return;
                      }
                      batch->defer(&d, deliver, common::Deferred::of([&d, i] {
                        d.deliveries.back().push_back(i);
                        ++d.answered;
                      }));
                    });
  }
  wait_until_queued(one, kClaims);
  EXPECT_TRUE(held.release());
  std::unique_lock lock(d.mu);
  ASSERT_TRUE(d.cv.wait_for(lock, 10s, [&] { return d.answered == kClaims; })) << d.answered;
  EXPECT_EQ(d.without_handoff, 0);
  ASSERT_EQ(d.deliveries.size(), 1U) << "one delivery for the batch, not one per member";
  EXPECT_EQ(d.deliveries[0], (std::vector<int>{0, 1, 2, 3}));
}

// A streamed answer's chunks join a group commit of their own: chunks of many streams
// queued while one batch commits go together in the next, in one transaction.
TEST_F(PgStoreTest, ChunksOfManyStreamsQueuedTogetherCommitTogether) {
  PgStore one({dsn(), 1, 5s});
  const auto sample = [&](std::string_view name) {
    for (const auto& s : one.stats())
      if (name == s.name) return static_cast<std::int64_t>(s.value);
    ADD_FAILURE() << "no sample " << name;
    return std::int64_t{-1};
  };
  constexpr int kStreams = 4;
  constexpr int kChunks = 10;
  std::vector<std::int64_t> tokens;
  for (int s = 0; s < kStreams; ++s) {
    const auto r = one.claim(request("s" + std::to_string(s)));
    tokens.push_back(std::get<Claimed>(r.value()).token);
  }
  const auto batches_before = sample("idemproxy_db_chunk_batches_total");
  const auto chunks_before = sample("idemproxy_db_chunks_stored_total");
  std::mutex mu;
  std::condition_variable all_done;
  int pending = kStreams * kChunks;
  int failed = 0;
  const std::string bytes(1000, 'b');
  for (int i = 1; i <= kChunks; ++i) {
    for (int s = 0; s < kStreams; ++s) {
      one.append_async({scope, "s" + std::to_string(s)}, tokens[s], i, bytes, false,
                       [&](Result<Done> r) {
                         std::lock_guard lock(mu);
                         if (!r.ok()) ++failed;
                         if (--pending == 0) all_done.notify_one();
                       });
    }
  }
  {
    std::unique_lock lock(mu);
    all_done.wait(lock, [&] { return pending == 0; });
  }
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(sample("idemproxy_db_chunks_stored_total") - chunks_before, kStreams * kChunks);
  // 40 chunks queued within microseconds, while each commit takes far longer: a few
  // transactions, not 40.
  EXPECT_LE(sample("idemproxy_db_chunk_batches_total") - batches_before, 10);
  for (int s = 0; s < kStreams; ++s) {
    const auto stored = one.read_chunks({scope, "s" + std::to_string(s)}, tokens[s], 1, 100);
    ASSERT_TRUE(stored.ok());
    EXPECT_EQ(stored.value().size(), static_cast<std::size_t>(kChunks));
  }
}

// Two batches of chunks commit at once (ChunkCommit::kLaneBatches): one batch's
// commit mostly waits on the WAL's flush, which the next batch's insert overlaps. Here
// the first batch waits on a row lock another session holds (an uncommitted chunk of
// the same seq), and a second chunk of the stream is stored meanwhile; one batch at a
// time, it would wait behind the first.
TEST_F(PgStoreTest, ASecondBatchOfChunksCommitsWhileTheFirstWaits) {
  const auto r = store->claim(request("two-batches"));
  const std::int64_t token = std::get<Claimed>(r.value()).token;
  pqxx::connection outside(dsn());
  pqxx::work holding(outside);
  holding.exec_params(
      "INSERT INTO idempotency_chunks (scope, key, token, seq, bytes) VALUES ($1, $2, $3, 1, "
      "'\\x00'::bytea)",
      scope, std::string("two-batches"), static_cast<long long>(token));
  std::mutex mu;
  std::condition_variable changed;
  std::optional<bool> first, second;
  const auto note = [&](std::optional<bool>& slot) {
    return [&](Result<Done> done) {
      std::lock_guard lock(mu);
      slot = done.ok();
      changed.notify_all();
    };
  };
  store->append_async({scope, "two-batches"}, token, 1, "first chunk", false, note(first));
  ASSERT_TRUE(wait_until_blocked_by(outside)) << "the first batch never waited on the held row";
  store->append_async({scope, "two-batches"}, token, 2, "second chunk", false, note(second));
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(changed.wait_for(lock, 5s, [&] { return second.has_value(); }))
        << "the second batch waited behind the first";
    EXPECT_TRUE(*second);
    EXPECT_FALSE(first.has_value());
  }
  holding.abort();
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(changed.wait_for(lock, 10s, [&] { return first.has_value(); }));
    EXPECT_TRUE(*first);
  }
  const auto stored = store->read_chunks({scope, "two-batches"}, token, 1, 10);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored.value().size(), 2U);
  EXPECT_EQ(stored.value()[0].bytes, "first chunk");
  EXPECT_EQ(stored.value()[1].bytes, "second chunk");
}

// With store.postgres.defer_chunk_flush, a batch of chunks commits without waiting for
// the WAL's flush (Write::FlushLater), and the completion that counts them commits
// durably, flushing the WAL past them; without it, every commit waits. Triggers on this
// test's scope note the synchronous_commit each row was written under. Not on Citus,
// where chunks always commit durably (a shard move's catch-up) and a trigger on a
// distributed table is refused.
TEST_F(PgStoreTest, DeferredChunksCommitWithoutWaitingForTheFlushAndTheirCompletionDurably) {
  if (citus()) GTEST_SKIP() << "chunks commit durably on Citus";
  pqxx::connection outside(dsn());
  const std::string suffix = std::to_string(::getpid());
  const std::string table = "idemproxy_test_commit_settings";
  {
    pqxx::work ddl(outside);
    ddl.exec("CREATE TABLE IF NOT EXISTS " + table +
             " (n bigserial, scope text, key text, rel text, sync text)");
    ddl.exec(
        "CREATE OR REPLACE FUNCTION idemproxy_test_note_sync() RETURNS trigger"
        " LANGUAGE plpgsql AS $$ BEGIN INSERT INTO " +
        table +
        " (scope, key, rel, sync) VALUES (NEW.scope, NEW.key, TG_TABLE_NAME,"
        " current_setting('synchronous_commit')); RETURN NEW; END $$");
    for (const char* rel : {"idempotency_chunks", "idempotency_records"}) {
      ddl.exec("CREATE TRIGGER note_sync_" + suffix + " AFTER INSERT OR UPDATE ON " + rel +
               " FOR EACH ROW WHEN (NEW.scope = " + ddl.quote(scope) +
               ") EXECUTE FUNCTION idemproxy_test_note_sync()");
    }
    ddl.commit();
  }
  struct Drop {
    pqxx::connection& c;
    std::string suffix;
    ~Drop() {
      pqxx::work ddl(c);
      for (const char* rel : {"idempotency_chunks", "idempotency_records"})
        ddl.exec("DROP TRIGGER IF EXISTS note_sync_" + suffix + " ON " + std::string(rel));
      ddl.commit();
    }
  } drop{outside, suffix};
  using Noted = std::vector<std::pair<std::string, std::string>>;
  const auto stream_through = [&](PgStore& s, const std::string& key) {
    const std::int64_t token = std::get<Claimed>(s.claim(request(key)).value()).token;
    for (std::int32_t seq = 1; seq <= 2; ++seq) {
      std::promise<bool> stored;
      s.append_async({scope, key}, token, seq, "chunk " + std::to_string(seq), false,
                     [&](Result<Done> r) { stored.set_value(r.ok()); });
      EXPECT_TRUE(stored.get_future().get());
    }
    StoredResponse answer{200, {{"Content-Type", "text/event-stream"}}, "", true};
    answer.chunks = 2;
    answer.body_length = 14;
    answer.body_digest = std::string(32, '\x5a');
    EXPECT_TRUE(s.complete({scope, key}, token, answer, 1h).ok());
    pqxx::nontransaction read(outside);
    Noted noted;
    for (const auto& row : read.exec_params(
             "SELECT rel, sync FROM " + table + " WHERE scope = $1 AND key = $2 ORDER BY n", scope,
             key))
      noted.emplace_back(row[0].as<std::string>(), row[1].as<std::string>());
    read.exec_params("DELETE FROM " + table + " WHERE scope = $1 AND key = $2", scope, key);
    return noted;
  };
  PgOptions deferring{dsn(), 4, 5s};
  deferring.defer_chunk_flush = true;
  PgStore deferred(deferring);
  EXPECT_EQ(stream_through(deferred, "deferred"),
            (Noted{{"idempotency_records", "on"},  // the claim
                   {"idempotency_chunks", "off"},  // each chunk
                   {"idempotency_chunks", "off"},
                   {"idempotency_records", "on"}}));  // the completion
  EXPECT_EQ(stream_through(*store, "by-default"), (Noted{{"idempotency_records", "on"},
                                                         {"idempotency_chunks", "on"},
                                                         {"idempotency_chunks", "on"},
                                                         {"idempotency_records", "on"}}));
}
