#pragma once
// One contract for every store: each behaviour of store::Store is stated once
// (store_contract_*_test.cpp) and runs against MemoryStore, PgStore on PostgreSQL
// and PgStore on Citus, each through a small delegate (store_delegates.cpp), as
// Envoy's cache backends share http_cache_implementation_test_common.h.
//
// Time: the memory store runs on a fake clock, which age() moves; PostgreSQL's clock
// is the database's, so there age() sleeps. Durations that must run out are short
// (kShort), and a test never relies on a short one still running.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "idemproxy/store/sealer.hpp"
#include "idemproxy/store/store.hpp"

namespace idemproxy::testing {

using namespace std::chrono_literals;

/// What the contract needs from one backend.
class StoreDelegate {
 public:
  virtual ~StoreDelegate() = default;
  /// Why this backend cannot run here (no database configured), or nothing.
  virtual std::optional<std::string> unavailable() const = 0;
  /// Whether being unavailable fails the test instead of skipping it.
  virtual bool required() const { return false; }
  /// A new store over the backend's records.
  virtual std::unique_ptr<store::Store> make() = 0;
  /// A new store that seals under `sealer` (store.encryption), or nullptr when the
  /// backend keeps nothing at rest to seal.
  virtual std::unique_ptr<store::Store> make_sealed(
      std::shared_ptr<const store::Sealer> sealer) = 0;
  /// Lets `d` pass on the store's clock.
  virtual void age(Duration d) = 0;
};

/// The delegate of "memory", "postgres", "postgres_loop" or "citus".
std::unique_ptr<StoreDelegate> make_delegate(const std::string& name);

/// A duration that runs out within a test, and what age() must add to be past it.
inline constexpr Duration kShort = 100ms;
inline constexpr Duration kPastShort = 250ms;

class StoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    delegate = make_delegate(GetParam());
    if (const auto why = delegate->unavailable()) {
      if (delegate->required()) FAIL() << *why;
      GTEST_SKIP() << *why;
    }
    store = delegate->make();
    // A scope of its own: the database is shared with the other tests.
    scope = "contract-" + std::to_string(std::random_device{}()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  void TearDown() override {
    if (store) store->watch({});
  }

  store::ClaimRequest request(const std::string& key, Duration lease = 30s, Duration ttl = 1h,
                              const std::string& fingerprint = "fp-1", bool retake = false) {
    return {{scope, key}, fingerprint, lease, ttl, "orders", "POST", "/v1/orders?x=1", retake};
  }
  store::RecordId id(const std::string& key) const { return {scope, key}; }

  /// Claims `r`, which must be won; its token.
  std::int64_t claim_token(const store::ClaimRequest& r) { return claimed(r).token; }
  store::Claimed claimed(const store::ClaimRequest& r) {
    auto result = store->claim(r);
    EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().detail);
    if (!result.ok() || !std::holds_alternative<store::Claimed>(result.value())) {
      ADD_FAILURE() << "the claim of " << r.id.key << " was not won";
      return {};
    }
    return std::get<store::Claimed>(result.value());
  }
  /// Claims `r`, which must find a live record; that record.
  store::Record existing(const store::ClaimRequest& r) {
    auto result = store->claim(r);
    EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().detail);
    if (!result.ok() || !std::holds_alternative<store::Record>(result.value())) {
      ADD_FAILURE() << "the claim of " << r.id.key << " found no live record";
      return {};
    }
    return std::get<store::Record>(result.value());
  }
  /// The record of `key`, which must exist.
  store::Record found(const std::string& key) {
    auto result = store->find(id(key));
    EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().detail);
    if (!result.ok() || !result.value()) {
      ADD_FAILURE() << "no record of " << key;
      return {};
    }
    return *result.value();
  }
  bool gone(const std::string& key) {
    auto result = store->find(id(key));
    EXPECT_TRUE(result.ok());
    return result.ok() && !result.value();
  }
  void age(Duration d) { delegate->age(d); }

  std::unique_ptr<StoreDelegate> delegate;
  std::unique_ptr<store::Store> store;
  std::string scope;
};

/// What a store announced about one test's scope, in arrival order (other tests
/// announce on the same database with scopes of their own: those are left out).
class Heard {
 public:
  /// `watches`: also what watch_record tells every instance, as "watched:KEY".
  explicit Heard(bool watches = false) : watches_(watches) {}
  store::Watches::Watchers watchers(const std::string& scope) {
    store::Watches::Watchers w;
    w.purged = [this, scope](const store::RecordId& id) {
      if (id.scope == scope) add("purged:" + id.key);
    };
    w.finished = [this, scope](const store::RecordId& id) {
      if (id.scope == scope) add(id.key);
    };
    if (watches_) {
      w.watched = [this, scope](const store::RecordId& id) {
        if (id.scope == scope) add("watched:" + id.key);
      };
    }
    w.resumed = [this] { add(":resumed"); };
    return w;
  }
  /// Waits up to 10 s until `entry` arrives; everything heard until then.
  std::vector<std::string> until(const std::string& entry) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, 10s,
                 [&] { return std::find(log_.begin(), log_.end(), entry) != log_.end(); });
    return log_;
  }

 private:
  void add(std::string entry) {
    std::lock_guard lock(mu_);
    log_.push_back(std::move(entry));
    cv_.notify_all();
  }
  const bool watches_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> log_;
};

}  // namespace idemproxy::testing
