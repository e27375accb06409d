// The replay cache: hits, expiry, the byte budget (LRU), purge, and what it refuses.
#include "idemproxy/engine/replay_cache.hpp"

#include <gtest/gtest.h>

#include <random>
#include <set>

using namespace idemproxy;
using namespace idemproxy::engine;
using namespace std::chrono_literals;

namespace {

const ReplayCache::Deadline t0{std::chrono::hours{1000}};

ReplayCache::Entry entry(const std::string& body, ReplayCache::Deadline valid_until = t0 + 1h) {
  return {"fp", store::StoredResponse{201, {{"Content-Type", "application/json"}}, body},
          TimePoint{std::chrono::hours{5}}, valid_until};
}

}  // namespace

TEST(ReplayCache, ServesWhatWasPutUntilItExpires) {
  ReplayCache cache(1 << 20);
  cache.put({"s", "k"}, entry("body"));
  auto hit = cache.get({"s", "k"}, t0);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->response.body, "body");
  EXPECT_EQ(hit->fingerprint, "fp");
  EXPECT_FALSE(cache.get({"s", "other"}, t0));
  EXPECT_FALSE(cache.get({"other", "k"}, t0));   // scopes never share entries
  EXPECT_FALSE(cache.get({"s", "k"}, t0 + 1h));  // expired: dropped
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
}

TEST(ReplayCache, StaysWithinItsByteBudgetDroppingTheLeastRecentlyUsed) {
  // Room for three entries of about 3,400 bytes each (the body, the key and the
  // replay's layout counted from the start), not four.
  ReplayCache cache(11 * 1024);
  cache.put({"s", "a"}, entry(std::string(3000, 'a')));
  cache.put({"s", "b"}, entry(std::string(3000, 'b')));
  cache.put({"s", "c"}, entry(std::string(3000, 'c')));
  ASSERT_TRUE(cache.get({"s", "a"}, t0));  // a is now the most recently used
  cache.put({"s", "d"}, entry(std::string(3000, 'd')));
  EXPECT_TRUE(cache.get({"s", "a"}, t0));
  EXPECT_FALSE(cache.get({"s", "b"}, t0));  // the least recently used went
  EXPECT_TRUE(cache.get({"s", "d"}, t0));
  EXPECT_LE(cache.bytes(), 11u * 1024);
}

TEST(ReplayCache, PurgeAndReplaceAndRefusals) {
  ReplayCache cache(4096);
  cache.put({"s", "k"}, entry("one"));
  cache.put({"s", "k"}, entry("two"));
  EXPECT_EQ(cache.get({"s", "k"}, t0)->response.body, "two");
  EXPECT_EQ(cache.size(), 1u);
  cache.erase({"s", "k"});
  EXPECT_FALSE(cache.get({"s", "k"}, t0));
  cache.put({"s", "big"}, entry(std::string(8192, 'x')));  // larger than the budget
  EXPECT_FALSE(cache.get({"s", "big"}, t0));
  auto unstored = entry("");
  unstored.response.body_stored = false;  // too large to replay: never cached
  cache.put({"s", "u"}, unstored);
  EXPECT_FALSE(cache.get({"s", "u"}, t0));
  ReplayCache off(0);
  off.put({"s", "k"}, entry("x"));
  EXPECT_FALSE(off.get({"s", "k"}, t0));
}

TEST(ReplayCache, AnEntryHandedOutSurvivesItsEviction) {
  ReplayCache cache(4096);
  cache.put({"s", "k"}, entry("kept"));
  auto hit = cache.get({"s", "k"}, t0);
  cache.erase({"s", "k"});
  EXPECT_EQ(hit->response.body, "kept");  // a replay in progress is not cut short
}

TEST(ReplayCache, AReplacedEntryBecomesTheMostRecentlyUsed) {
  ReplayCache cache(11 * 1024);  // three of these entries, as above
  cache.put({"s", "a"}, entry(std::string(3000, 'a')));
  cache.put({"s", "b"}, entry(std::string(3000, 'b')));
  cache.put({"s", "c"}, entry(std::string(3000, 'c')));
  cache.put({"s", "a"}, entry(std::string(3000, 'A')));  // a again: now the newest
  const std::size_t three = cache.bytes();
  cache.put({"s", "d"}, entry(std::string(3000, 'd')));
  EXPECT_FALSE(cache.get({"s", "b"}, t0));  // b was the oldest
  ASSERT_TRUE(cache.get({"s", "a"}, t0));
  EXPECT_EQ(cache.get({"s", "a"}, t0)->response.body, std::string(3000, 'A'));
  EXPECT_TRUE(cache.get({"s", "c"}, t0));
  EXPECT_TRUE(cache.get({"s", "d"}, t0));
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.bytes(), three);  // the replaced entry's bytes were given back
}

TEST(ReplayCache, ManyEntriesThroughASmallBudgetKeepTheNewestInOrder) {
  ReplayCache cache(11 * 1024);
  for (int i = 0; i < 2000; ++i) {
    cache.put({"s", std::to_string(i)}, entry(std::string(3000, 'x')));
    if (i % 7 == 0) cache.erase({"s", std::to_string(i - 1)});
    if (i % 5 == 0) {
      ASSERT_TRUE(cache.get({"s", std::to_string(i)}, t0));
    }
  }
  EXPECT_LE(cache.bytes(), 11u * 1024);
  EXPECT_EQ(cache.size(), 3u);
  for (const char* k : {"1997", "1998", "1999"}) {
    EXPECT_TRUE(cache.get({"s", k}, t0)) << k;
  }
  for (const char* k : {"1997", "1998", "1999"}) cache.erase({"s", k});
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
  cache.put({"s", "again"}, entry("after"));  // the order of use starts afresh
  EXPECT_EQ(cache.get({"s", "again"}, t0)->response.body, "after");
}

// The index (open addressing, entries moved back on erase) against a plain set: keys
// come and go in random order with no eviction, and every lookup agrees.
TEST(ReplayCache, KeysComingAndGoingAtRandomAreAllFoundAndOnlyThem) {
  ReplayCache cache(64 << 20);
  std::set<int> present;
  std::mt19937 random(7);
  for (int step = 0; step < 20000; ++step) {
    const int k = static_cast<int>(random() % 600);
    const store::RecordId id{"scope", "key-" + std::to_string(k)};
    switch (random() % 3) {
      case 0:
        cache.put(id, entry(std::to_string(k)));
        present.insert(k);
        break;
      case 1:
        cache.erase(id);
        present.erase(k);
        break;
      default: {
        const auto hit = cache.get(id, t0);
        ASSERT_EQ(hit != nullptr, present.count(k) == 1) << "step " << step << " key " << k;
        if (hit) {
          ASSERT_EQ(hit->response.body, std::to_string(k));
        }
      }
    }
    ASSERT_EQ(cache.size(), present.size());
  }
  for (int k = 0; k < 600; ++k) {
    const bool found = cache.get({"scope", "key-" + std::to_string(k)}, t0) != nullptr;
    EXPECT_EQ(found, present.count(k) == 1) << k;
  }
}
