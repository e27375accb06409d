// The backends the store contract runs against, one delegate each:
//   memory    MemoryStore on a fake clock;
//   postgres  PgStore on IDEMPROXY_TEST_DSN (scripts/test.sh starts one; with
//             IDEMPROXY_REQUIRE_PG=1 a missing DSN fails instead of skipping);
//   citus     PgStore on a Citus coordinator: IDEMPROXY_TEST_CITUS=1 and its DSN
//             (the Citus stage of scripts/test.sh);
//   postgres_loop  PgStore as postgres, with the test's thread naming an event loop
//             (common::Reactor) that runs on a thread of its own, as the proxy's I/O
//             threads do: the claims and completions it makes go in batches sent and
//             read on that loop (src/store/pg/group_commit_reactor.cpp).
#include <cstdlib>
#include <thread>

#include "idemproxy/store/memory_store.hpp"
#include "idemproxy/store/migrations.hpp"
#include "idemproxy/store/pg_store.hpp"
#include "store_contract.hpp"
#include "test_loop.hpp"

namespace idemproxy::testing {
namespace {

class MemoryDelegate final : public StoreDelegate {
 public:
  std::optional<std::string> unavailable() const override { return std::nullopt; }
  std::unique_ptr<store::Store> make() override {
    return std::make_unique<store::MemoryStore>(clock_);
  }
  // The memory store keeps nothing at rest, and the configuration refuses
  // store.encryption with store.memory.
  std::unique_ptr<store::Store> make_sealed(std::shared_ptr<const store::Sealer>) override {
    return nullptr;
  }
  void age(Duration d) override { clock_.advance(d); }

 private:
  FakeClock clock_;
};

// A TestLoop named as the constructing thread's loop while it lives: the calls the
// contract makes from the test's thread are batched on it.
class NamedLoop {
 public:
  NamedLoop() : named_(&loop_.reactor()) {}

 private:
  TestLoop loop_;
  common::Reactor::Current named_;
};

class PgDelegate final : public StoreDelegate {
 public:
  PgDelegate(bool citus, bool loop) : citus_(citus) {
    if (loop) loop_.emplace();
  }

  std::optional<std::string> unavailable() const override {
    const bool on_citus = std::getenv("IDEMPROXY_TEST_CITUS") != nullptr;
    if (dsn().empty()) return "IDEMPROXY_TEST_DSN is not set";
    if (citus_ && !on_citus) return "IDEMPROXY_TEST_CITUS is not set";
    if (!citus_ && on_citus) return "the DSN is a Citus coordinator: the citus stores run";
    return std::nullopt;
  }
  // A missing PostgreSQL fails where the tests require one; Citus runs in its stage.
  bool required() const override {
    return !citus_ && dsn().empty() && std::getenv("IDEMPROXY_REQUIRE_PG") != nullptr;
  }
  std::unique_ptr<store::Store> make() override { return open({dsn(), 4, 5s}); }
  std::unique_ptr<store::Store> make_sealed(std::shared_ptr<const store::Sealer> sealer) override {
    return open({dsn(), 2, 5s, false, std::move(sealer)});
  }
  // The database's clock: only real time moves it.
  void age(Duration d) override { std::this_thread::sleep_for(d); }

 private:
  static std::string dsn() {
    const char* v = std::getenv("IDEMPROXY_TEST_DSN");
    return v ? v : "";
  }
  std::unique_ptr<store::Store> open(store::PgOptions options) {
    if (!migrated_) {
      store::apply_migrations(options.dsn);
      migrated_ = true;
    }
    return std::make_unique<store::PgStore>(std::move(options));
  }
  bool citus_;
  bool migrated_ = false;
  std::optional<NamedLoop> loop_;
};

}  // namespace

std::unique_ptr<StoreDelegate> make_delegate(const std::string& name) {
  if (name == "memory") return std::make_unique<MemoryDelegate>();
  return std::make_unique<PgDelegate>(name == "citus", name == "postgres_loop");
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreContract,
                         ::testing::Values("memory", "postgres", "postgres_loop", "citus"),
                         [](const auto& info) { return info.param; });

}  // namespace idemproxy::testing
