// Which held claims are due for a lease renewal, on a fake monotonic clock.
#include "idemproxy/engine/lease_schedule.hpp"

#include <gtest/gtest.h>

#include <optional>

using namespace idemproxy;
using namespace idemproxy::engine;
using namespace std::chrono_literals;

TEST(LeaseSchedule, AHeldClaimIsDueEveryThirdOfItsLeaseUntilItIsLetGo) {
  LeaseSchedule schedule;
  const auto t0 = LeaseSchedule::Clock::time_point{} + 1h;
  const store::RecordId id{"s", "k"};
  std::vector<LeaseSchedule::Due> due;
  {
    std::optional<LeaseSchedule::Hold> hold;
    hold.emplace(schedule, id, 7, 3s, t0);
    EXPECT_EQ(schedule.size(), 1u);
    schedule.take_due(t0 + 999ms, due);
    EXPECT_TRUE(due.empty());  // most requests finish here: no store call at all
    schedule.take_due(t0 + 1s, due);
    ASSERT_EQ(due.size(), 1u);
    EXPECT_EQ(due[0].id.key, "k");
    EXPECT_EQ(due[0].token, 7);
    EXPECT_EQ(due[0].lease, 3s);
    schedule.take_due(t0 + 1500ms, due);
    EXPECT_TRUE(due.empty());  // next due a third of the lease after the renewal
    schedule.take_due(t0 + 2s, due);
    EXPECT_EQ(due.size(), 1u);
    hold.reset();
  }
  EXPECT_EQ(schedule.size(), 0u);
  schedule.take_due(t0 + 1h, due);
  EXPECT_TRUE(due.empty());
}

TEST(LeaseSchedule, EachClaimKeepsItsOwnRhythm) {
  LeaseSchedule schedule;
  const auto t0 = LeaseSchedule::Clock::time_point{} + 1h;
  const store::RecordId a{"", "a"}, b{"", "b"};
  LeaseSchedule::Hold short_lease(schedule, a, 1, 1500ms, t0);
  LeaseSchedule::Hold long_lease(schedule, b, 2, 30s, t0);
  std::vector<LeaseSchedule::Due> due;
  schedule.take_due(t0 + 600ms, due);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].id.key, "a");
  schedule.take_due(t0 + 10s, due);
  EXPECT_EQ(due.size(), 2u);
}
