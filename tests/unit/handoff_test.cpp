// common::Handoff: answers deferred while one is open are delivered per target, in
// the order they were deferred, once per close; handoffs nest.
#include "idemproxy/common/handoff.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using idemproxy::common::Handoff;

namespace {

struct Target {
  std::vector<std::vector<std::string>> deliveries;  // what each delivery ran
  std::vector<std::string>* ran = nullptr;
};

void deliver(void* target, std::vector<idemproxy::common::Deferred>& answers) {
  auto& t = *static_cast<Target*>(target);
  t.ran = &t.deliveries.emplace_back();
  for (auto& answer : answers) answer();
}

idemproxy::common::Deferred answer(Target& t, std::string name) {
  return idemproxy::common::Deferred::of([&t, name] { t.ran->push_back(name); });
}

}  // namespace

TEST(Handoff, DeliversEachTargetsAnswersTogetherInOrder) {
  Target a, b;
  EXPECT_EQ(Handoff::current(), nullptr);
  {
    Handoff handoff;
    EXPECT_EQ(Handoff::current(), &handoff);
    Handoff::current()->defer(&a, deliver, answer(a, "a1"));
    Handoff::current()->defer(&b, deliver, answer(b, "b1"));
    Handoff::current()->defer(&a, deliver, answer(a, "a2"));
    EXPECT_TRUE(a.deliveries.empty()) << "delivered before the handoff closed";
  }
  EXPECT_EQ(Handoff::current(), nullptr);
  ASSERT_EQ(a.deliveries.size(), 1U);
  EXPECT_EQ(a.deliveries[0], (std::vector<std::string>{"a1", "a2"}));
  ASSERT_EQ(b.deliveries.size(), 1U);
  EXPECT_EQ(b.deliveries[0], (std::vector<std::string>{"b1"}));
}

TEST(Handoff, CloseDeliversWhatWasDeferredAndStaysOpen) {
  Target a;
  {
    Handoff handoff;
    handoff.defer(&a, deliver, answer(a, "first"));
    handoff.close();
    ASSERT_EQ(a.deliveries.size(), 1U);
    handoff.close();  // nothing new: no empty delivery
    EXPECT_EQ(a.deliveries.size(), 1U);
    handoff.defer(&a, deliver, answer(a, "second"));
  }
  ASSERT_EQ(a.deliveries.size(), 2U);
  EXPECT_EQ(a.deliveries[1], (std::vector<std::string>{"second"}));
}

TEST(Handoff, AnInnerHandoffDeliversItsOwnAndRestoresTheOuter) {
  Target a;
  Handoff outer;
  outer.defer(&a, deliver, answer(a, "outer"));
  {
    Handoff inner;
    EXPECT_EQ(Handoff::current(), &inner);
    inner.defer(&a, deliver, answer(a, "inner"));
  }
  EXPECT_EQ(Handoff::current(), &outer);
  ASSERT_EQ(a.deliveries.size(), 1U);
  EXPECT_EQ(a.deliveries[0], (std::vector<std::string>{"inner"}));
  outer.close();
  ASSERT_EQ(a.deliveries.size(), 2U);
  EXPECT_EQ(a.deliveries[1], (std::vector<std::string>{"outer"}));
}

// An answer the delivery never runs is dropped: its block is freed all the same,
// once, and moving it hands the block on without freeing it.
TEST(Handoff, ADeferredAnswerNeverRunIsFreedOnceAndARunOneRunsOnce) {
  struct Counts {
    int runs = 0, frees = 0;
  } counts;
  const auto make = [&counts] {
    return idemproxy::common::Deferred(&counts, [](void* p, bool run) {
      auto& c = *static_cast<Counts*>(p);
      c.runs += run ? 1 : 0;
      ++c.frees;
    });
  };
  {
    auto dropped = make();
    auto moved = std::move(dropped);
    EXPECT_EQ(counts.frees, 0) << "freed when moved";
  }
  EXPECT_EQ(counts.runs, 0);
  EXPECT_EQ(counts.frees, 1);
  {
    auto ran = make();
    ran();
    ran();  // a second call does nothing
  }
  EXPECT_EQ(counts.runs, 1);
  EXPECT_EQ(counts.frees, 2);
}
