// Group commit on the caller's event loop (src/store/pg/group_commit_reactor.cpp): the
// claims and completions made on a thread that names its loop go in batches sent and
// read there, answered on that thread; what the loop cannot do goes to the store's
// threads. Against the real PostgreSQL of IDEMPROXY_TEST_DSN.
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "http/io_reactor.hpp"
#include "pg_store_fixture.hpp"
#include "test_loop.hpp"

namespace idemproxy::testing {
namespace {

/// Answers to calls made together, with the thread each came on.
template <class T>
class Answers {
 public:
  explicit Answers(std::size_t n) : left_(n), results_(n, StoreError{}), threads_(n) {}
  std::function<void(Result<T>)> slot(std::size_t i) {
    return [this, i](Result<T> r) {
      std::lock_guard lock(mu_);
      results_[i] = std::move(r);
      threads_[i] = std::this_thread::get_id();
      if (--left_ == 0) all_.notify_all();
    };
  }
  /// Waits for every answer; false after `limit`.
  bool wait(std::chrono::milliseconds limit = std::chrono::seconds{10}) {
    std::unique_lock lock(mu_);
    return all_.wait_for(lock, limit, [this] { return left_ == 0; });
  }
  std::size_t left() {
    std::lock_guard lock(mu_);
    return left_;
  }
  const std::vector<Result<T>>& results() const { return results_; }
  const std::vector<std::thread::id>& threads() const { return threads_; }

 private:
  std::mutex mu_;
  std::condition_variable all_;
  std::size_t left_;
  std::vector<Result<T>> results_;
  std::vector<std::thread::id> threads_;
};

class PgLoopBatch : public PgStoreTest {
 protected:
  void SetUp() override {
    PgStoreTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (citus()) GTEST_SKIP() << "on Citus batches run per worker, on the store's threads";
  }

  /// `keys` claimed on the loop in one turn of it.
  Answers<ClaimResult>& claim_on(TestLoop& loop, PgStore& s, const std::vector<std::string>& keys) {
    auto& a = answers_.emplace_back(std::make_unique<Answers<ClaimResult>>(keys.size()));
    auto& requests = requests_.emplace_back();
    for (const auto& k : keys) requests.push_back(request(k));
    loop.run([&s, &requests, answers = a.get()] {
      for (std::size_t i = 0; i < requests.size(); ++i)
        s.claim_async(requests[i], answers->slot(i));
    });
    return *a;
  }

  /// `n` keys: `prefix` followed by 0, 1, ...
  static std::vector<std::string> numbered(const std::string& prefix, int n) {
    std::vector<std::string> keys;
    for (int i = 0; i < n; ++i) keys.push_back(prefix + std::to_string(i));
    return keys;
  }

  /// A DSN whose sessions carry `name` (pg_stat_activity.application_name).
  static std::string named_dsn(const std::string& name) {
    const std::string d = dsn();
    if (d.find("://") == std::string::npos) return d + " application_name=" + name;
    return d + (d.find('?') == std::string::npos ? "?" : "&") + "application_name=" + name;
  }

  // Kept until the test ends: the calls read their requests until answered.
  std::vector<std::unique_ptr<Answers<ClaimResult>>> answers_;
  std::deque<std::vector<ClaimRequest>> requests_;
};

TEST_F(PgLoopBatch, ClaimsAndCompletionsMadeOnALoopGoInOneBatchSentAndAnsweredThere) {
  TestLoop loop;
  PgStore s({dsn(), 4, 5s});
  ASSERT_TRUE(s.ping().ok());  // a connection in the pool, idle: the loop never opens one
  const auto before = s.batch_stats();
  const std::vector<std::string> keys = numbered("k", 20);
  auto& claims = claim_on(loop, s, keys);
  ASSERT_TRUE(claims.wait());
  const auto claimed = s.batch_stats();
  EXPECT_EQ(claimed.on_loop - before.on_loop, 1);
  EXPECT_EQ(claimed.batches - before.batches, 1);
  EXPECT_EQ(claimed.operations - before.operations, 20);
  EXPECT_EQ(claimed.fallbacks, 0);
  std::set<std::int64_t> tokens;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const auto& r = claims.results()[i];
    ASSERT_TRUE(r.ok()) << r.error().detail;
    ASSERT_TRUE(std::holds_alternative<Claimed>(r.value())) << keys[i];
    tokens.insert(std::get<Claimed>(r.value()).token);
    EXPECT_EQ(claims.threads()[i], loop.thread_id()) << "answered on another thread";
    // Committed before it was answered: another session sees it.
    const auto found = store->find(request(keys[i]).id);
    ASSERT_TRUE(found.ok() && found.value());
    EXPECT_EQ(found.value()->state, RecordState::in_flight);
  }
  EXPECT_EQ(tokens.size(), keys.size());

  // Their completions, in one turn too.
  Answers<TimePoint> done(keys.size());
  StoredResponse answer;
  answer.status = 201;
  answer.body = R"({"id":1})";
  answer.body_stored = true;
  const Retention keep{1h, 1h};
  std::vector<RecordId> ids;  // a call reads its id until answered
  for (const auto& k : keys) ids.push_back(request(k).id);
  loop.run([&] {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const auto& c = std::get<Claimed>(claims.results()[i].value());
      s.complete_async(ids[i], c.token, answer, keep, done.slot(i));
    }
  });
  ASSERT_TRUE(done.wait());
  const auto completed = s.batch_stats();
  EXPECT_EQ(completed.on_loop - claimed.on_loop, 1);
  EXPECT_EQ(completed.fallbacks, 0);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(done.results()[i].ok()) << done.results()[i].error().detail;
    EXPECT_EQ(done.threads()[i], loop.thread_id());
    const auto found = store->find(request(keys[i]).id);
    ASSERT_TRUE(found.ok() && found.value());
    EXPECT_EQ(found.value()->state, RecordState::completed);
    ASSERT_TRUE(found.value()->response.has_value());
    EXPECT_EQ(found.value()->response->status, 201);
    EXPECT_EQ(found.value()->response->body, answer.body);
  }
}

TEST_F(PgLoopBatch, OneKeyClaimedManyTimesInALoopsBatchHasOneWinner) {
  TestLoop loop;
  PgStore s({dsn(), 4, 5s});
  ASSERT_TRUE(s.ping().ok());
  const auto before = s.batch_stats();
  auto& claims = claim_on(loop, s, {"storm", "other", "storm", "storm", "storm", "storm"});
  ASSERT_TRUE(claims.wait());
  EXPECT_EQ(s.batch_stats().on_loop - before.on_loop, 1);
  int winners = 0;
  std::set<std::int64_t> tokens;
  for (std::size_t i = 0; i < claims.results().size(); ++i) {
    const auto& r = claims.results()[i];
    ASSERT_TRUE(r.ok()) << r.error().detail;
    if (i == 1) continue;  // "other"
    if (std::holds_alternative<Claimed>(r.value())) {
      ++winners;
      tokens.insert(std::get<Claimed>(r.value()).token);
    } else {
      // The later claims get the record as the first left it.
      tokens.insert(std::get<Record>(r.value()).token);
    }
  }
  EXPECT_EQ(winners, 1);
  EXPECT_EQ(tokens.size(), 1U);
}

TEST_F(PgLoopBatch, ABatchWhoseConnectionBrokeRunsAgainOnTheStoresThreadsAndClaimsOnce) {
  const std::string name = "idemproxy-loop-" + std::to_string(::getpid());
  TestLoop loop;
  PgStore s({named_dsn(name), 1, 5s});
  ASSERT_TRUE(s.ping().ok());  // its one connection, idle in the pool
  {
    pqxx::connection admin(dsn());
    pqxx::nontransaction tx(admin);
    const auto killed = tx.exec_params(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", name);
    ASSERT_EQ(killed.size(), 1U);
  }
  const auto before = s.batch_stats();
  const std::vector<std::string> keys = numbered("b", 8);
  auto& claims = claim_on(loop, s, keys);
  ASSERT_TRUE(claims.wait());
  const auto after = s.batch_stats();
  EXPECT_EQ(after.on_loop - before.on_loop, 1);  // sent there, on the dead connection
  EXPECT_GE(after.fallbacks - before.fallbacks, 1);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const auto& r = claims.results()[i];
    ASSERT_TRUE(r.ok()) << r.error().detail;
    ASSERT_TRUE(std::holds_alternative<Claimed>(r.value())) << keys[i];
    // Claimed once: a claim now finds it held.
    const auto again = store->claim(request(keys[i]));
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(std::holds_alternative<Record>(again.value()));
  }
}

TEST_F(PgLoopBatch, ALoopThatStopsHandsWhatItOwesToTheStoresThreads) {
  boost::asio::io_context io;  // never run: its loop stops with the calls queued
  http::IoReactor reactor(io);
  PgStore s({dsn(), 2, 5s});
  ASSERT_TRUE(s.ping().ok());
  Answers<ClaimResult> claims(3);
  std::vector<ClaimRequest> requests{request("s1"), request("s2"), request("s3")};
  {
    const common::Reactor::Current named(&reactor);
    for (std::size_t i = 0; i < requests.size(); ++i) s.claim_async(requests[i], claims.slot(i));
  }
  EXPECT_FALSE(claims.wait(200ms));  // queued on a loop that does not run
  EXPECT_EQ(claims.left(), 3U);
  reactor.stop();
  ASSERT_TRUE(claims.wait());
  for (const auto& r : claims.results()) {
    ASSERT_TRUE(r.ok()) << r.error().detail;
    EXPECT_TRUE(std::holds_alternative<Claimed>(r.value()));
  }
  EXPECT_EQ(s.batch_stats().on_loop, 0);
}

TEST_F(PgLoopBatch, ADrainWaitingForCompanyGoesOnOnceItCameNotWhenItsTimerEnds) {
  TestLoop loop;
  PgOptions options{dsn(), 4, 5s};
  options.batch_wait = 3s;  // the timer this test must not wait for
  PgStore s(options);
  ASSERT_TRUE(s.ping().ok());
  ASSERT_TRUE(claim_on(loop, s, {"w1", "w2", "w3", "w4"}).wait());  // a batch of four
  const auto first = s.batch_stats();
  const auto started = std::chrono::steady_clock::now();
  auto& two = claim_on(loop, s, {"w5", "w6"});  // waits for two more
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(two.left(), 2U);
  auto& more = claim_on(loop, s, {"w7", "w8"});
  ASSERT_TRUE(two.wait());
  ASSERT_TRUE(more.wait());
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);
  const auto second = s.batch_stats();
  EXPECT_EQ(second.on_loop - first.on_loop, 1);  // the four in one batch
  EXPECT_EQ(second.operations - first.operations, 4);
  for (const auto* a : {&two, &more}) {
    for (const auto& r : a->results()) {
      ASSERT_TRUE(r.ok()) << r.error().detail;
      EXPECT_TRUE(std::holds_alternative<Claimed>(r.value()));
    }
  }
}

}  // namespace
}  // namespace idemproxy::testing
