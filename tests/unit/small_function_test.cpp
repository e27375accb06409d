// SmallFunction: a move-only callable in place when it fits, on the heap otherwise,
// called and destroyed once whichever way it is held and however often it moves.
#include "idemproxy/common/small_function.hpp"

#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <memory>
#include <string>

#include "idemproxy/store/claims.hpp"

namespace idemproxy {
namespace {

// Counts the live copies of itself: each is destroyed once.
struct HeldTally {
  explicit HeldTally(int* live) : live(live) { ++*live; }
  HeldTally(HeldTally&& other) noexcept : live(other.live) { ++*live; }
  HeldTally(const HeldTally&) = delete;
  ~HeldTally() { --*live; }
  int* live;
};

TEST(SmallFunction, ACallableThatFitsIsHeldInPlaceAndMovesWithItsOwner) {
  int live = 0;
  {
    SmallFunction<int(int), 32> f = [t = HeldTally(&live), add = 2](int x) { return x + add; };
    EXPECT_EQ(live, 1);
    SmallFunction<int(int), 32> g = std::move(f);
    EXPECT_FALSE(f);  // NOLINT(bugprone-use-after-move): a moved-from function is empty
    EXPECT_EQ(live, 1) << "a move leaves no copy behind";
    EXPECT_EQ(g(40), 42);
    f = std::move(g);
    EXPECT_EQ(f(1), 3);
  }
  EXPECT_EQ(live, 0);
}

TEST(SmallFunction, ACallableTooBigForItsRoomGoesOnTheHeap) {
  int live = 0;
  std::array<char, 100> big{};
  big[99] = 7;
  using F = SmallFunction<int(), 32>;
  {
    F f = [t = HeldTally(&live), big] { return int{big[99]}; };
    F g = std::move(f);
    EXPECT_EQ(g(), 7);
    EXPECT_EQ(live, 1);
  }
  EXPECT_EQ(live, 0);
  EXPECT_FALSE((F::fits<std::array<char, 100>>));
  EXPECT_TRUE((F::fits<std::array<char, 32>>));
}

TEST(SmallFunction, ItTakesMoveOnlyArgumentsAndCallables) {
  SmallFunction<std::string(std::unique_ptr<std::string>), 16> f =
      [owned = std::make_unique<std::string>("kept ")](std::unique_ptr<std::string> s) {
        return *owned + *s;
      };
  EXPECT_EQ(f(std::make_unique<std::string>("and given")), "kept and given");
}

TEST(SmallFunction, AnEmptyOneThrowsAsStdFunctionDoes) {
  const SmallFunction<void(), 16> empty;
  EXPECT_FALSE(empty);
  EXPECT_THROW(empty(), std::bad_function_call);
}

// The coordinator's callback to the store: itself, the request and its caller's
// std::function (the proxy's, which holds one pointer in place).
TEST(SmallFunction, TheStoresClaimCallbackHoldsTheCoordinatorsInPlace) {
  struct CoordinatorsCallback {
    void* coordinator;
    const void* claim;
    std::function<void(int)> done;
    void operator()(store::Result<store::ClaimResult>) {}
  };
  EXPECT_TRUE(store::Claims::ClaimDone::fits<CoordinatorsCallback>);
}

}  // namespace
}  // namespace idemproxy
