// The operator helpers the CLI and the admin API share.
#include "idemproxy/ops/records.hpp"

#include <gtest/gtest.h>

#include "idemproxy/ops/gc.hpp"
#include "idemproxy/store/memory_store.hpp"

using namespace idemproxy;
using namespace std::chrono_literals;

TEST(Records, LimitsAreNumbersFromOneToAThousand) {
  EXPECT_EQ(ops::parse_limit("1"), 1);
  EXPECT_EQ(ops::parse_limit("1000"), 1000);
  for (const char* bad : {"", "0", "1001", "-1", "10x", "99999", " 5"}) {
    EXPECT_FALSE(ops::parse_limit(bad)) << bad;
  }
}

TEST(Records, CollectingExpiredRecordsStopsAtAShortBatchOrTheBatchBudget) {
  FakeClock clock;
  store::MemoryStore memory{clock};
  for (int i = 0; i < 25; ++i) {
    const store::ClaimRequest c{{"", "k" + std::to_string(i)}, "fp", 30s, 1s, "r", "POST", "/"};
    auto claimed = memory.claim(c);
    ASSERT_TRUE(claimed.ok());
    const auto token = std::get<store::Claimed>(claimed.value()).token;
    ASSERT_TRUE(memory.complete(c.id, token, {201, {}, "{}"}, 1s).ok());
  }
  clock.advance(2s);
  EXPECT_EQ(ops::collect_expired(memory, 10, 2).deleted, 20);  // two full batches: the budget
  const auto rest = ops::collect_expired(memory, 10, 5);
  EXPECT_EQ(rest.deleted, 5);  // one short batch ends the run
  EXPECT_FALSE(rest.error);
}
