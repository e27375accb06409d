#pragma once
// The fixture of the PgStore tests: a real PostgreSQL from IDEMPROXY_TEST_DSN
// (scripts/test.sh sets it); with IDEMPROXY_REQUIRE_PG=1 a missing DSN fails instead
// of skipping. Each test gets a scope of its own on the shared database.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <optional>
#include <pqxx/pqxx>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "idemproxy/store/migrations.hpp"
#include "idemproxy/store/pg_store.hpp"
#include "idemproxy/store/sealer.hpp"

using namespace idemproxy;
using namespace idemproxy::store;
using namespace std::chrono_literals;

// Outside an anonymous namespace: gtest needs one fixture class for the suite
// across the test files.
namespace idemproxy::testing {

/// A key ring of keys filled with one byte each, newest first.
inline std::shared_ptr<const Sealer> ring(
    std::initializer_list<std::pair<const char*, unsigned char>> ks) {
  std::vector<SealingKey> keys;
  for (const auto& [id, fill] : ks) {
    SealingKey k;
    k.id = id;
    k.bytes.fill(fill);
    keys.push_back(k);
  }
  return std::make_shared<const Sealer>(std::move(keys));
}

inline std::string dsn() {
  const char* v = std::getenv("IDEMPROXY_TEST_DSN");
  return v ? v : "";
}

class PgStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (dsn().empty()) {
      if (std::getenv("IDEMPROXY_REQUIRE_PG")) FAIL() << "IDEMPROXY_TEST_DSN is not set";
      GTEST_SKIP() << "IDEMPROXY_TEST_DSN is not set";
    }
    apply_migrations(dsn());
    store = std::make_unique<PgStore>(PgOptions{dsn(), 4, 5s});
    // A fresh scope per test keeps tests independent on a shared database.
    scope = "test-" + std::to_string(std::random_device{}()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  ClaimRequest request(const std::string& key, Duration lease = 30s, Duration ttl = 1h,
                       const std::string& fp = "fp-1", bool retake = false) {
    return {{scope, key}, fp, lease, ttl, "orders", "POST", "/v1/orders?x=1", retake};
  }

  std::int64_t claim_token(const ClaimRequest& r) {
    auto result = store->claim(r);
    EXPECT_TRUE(result.ok());
    EXPECT_TRUE(std::holds_alternative<Claimed>(result.value()));
    return std::get<Claimed>(result.value()).token;
  }

  std::unique_ptr<PgStore> store;
  std::string scope;
};

}  // namespace idemproxy::testing

using idemproxy::testing::dsn;
using idemproxy::testing::PgStoreTest;
using idemproxy::testing::ring;
