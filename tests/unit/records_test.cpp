// The operator helpers the CLI and the admin API share.
#include "idemproxy/ops/records.hpp"

#include <gtest/gtest.h>

#include <set>
#include <unordered_map>

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

// The chunk sweep reads one page per collection, whatever the batches of records:
// its cost does not grow with a backlog of expired records.
TEST(Records, ACollectionSweepsOnePageOfChunksHoweverManyBatchesRan) {
  struct Counting : store::Maintenance {
    int batches = 0, sweeps = 0, swept_rows = 0;
    store::Result<std::int64_t> delete_expired(int limit) override {
      return ++batches < 7 ? limit : 0;
    }
    store::Result<std::int64_t> drop_answers(const std::string&, Duration, int) override {
      return std::int64_t{0};
    }
    store::Result<std::int64_t> sweep_chunks(int rows) override {
      ++sweeps;
      swept_rows += rows;
      return std::int64_t{4};
    }
    store::Result<bool> purge(const store::RecordId&) override { return false; }
    store::Result<bool> resolve(const store::RecordId&) override { return false; }
  } store;
  const auto c = ops::collect_expired(store, 100, 1000);
  EXPECT_EQ(c.deleted, 600);
  EXPECT_EQ(store.batches, 7);
  EXPECT_EQ(store.sweeps, 1);
  EXPECT_EQ(store.swept_rows, ops::kSweepPages * 100);
  EXPECT_EQ(c.swept, 4);
}

// An operator sees when an answer completed and until when it replays (its own window,
// Idempotency-Policy: max-age), beside the record's expiry (its tombstone's).
TEST(Records, ACompletedRecordShowsItsReplayWindowBesideItsExpiry) {
  FakeClock clock;
  store::MemoryStore memory{clock};
  const store::ClaimRequest c{{"s", "k"}, "fp", 30s, 1h, "r", "POST", "/"};
  const auto token = std::get<store::Claimed>(memory.claim(c).value()).token;
  ASSERT_TRUE(memory.complete(c.id, token, {201, {}, "{}"}, {10min, 24h}).ok());
  const auto shown = ops::show_record(memory, c.id);
  ASSERT_EQ(shown.status, ops::RecordAction::Status::ok);
  EXPECT_EQ(shown.body.at("completed_at"), rfc3339(clock.now()));
  EXPECT_EQ(shown.body.at("replay_until"), rfc3339(clock.now() + 10min));
  EXPECT_EQ(shown.body.at("expires_at"), rfc3339(clock.now() + 24h));
}

// A streamed answer kept in chunks shows its chunk count and length, in the record
// and in a listing; its body is not shown (a replay reads it), and says so.
TEST(Records, AnAnswerInChunksShowsItsChunksAndLength) {
  FakeClock clock;
  store::MemoryStore memory{clock};
  const store::ClaimRequest c{{"s", "k"}, "fp", 30s, 1h, "r", "POST", "/"};
  const auto token = std::get<store::Claimed>(memory.claim(c).value()).token;
  ASSERT_TRUE(memory.append(c.id, token, 1, "abc").ok());
  ASSERT_TRUE(memory.append(c.id, token, 2, "de").ok());
  store::StoredResponse answer{200, {}, "", true};
  answer.chunks = 2;
  answer.body_length = 5;
  answer.body_digest = std::string(32, 'x');
  ASSERT_TRUE(memory.complete(c.id, token, answer, 1h).ok());
  const auto shown = ops::show_record(memory, c.id, true);
  ASSERT_EQ(shown.status, ops::RecordAction::Status::ok);
  EXPECT_EQ(shown.body.at("response").at("chunks"), 2);
  EXPECT_EQ(shown.body.at("response").at("body_bytes"), 5);
  EXPECT_NE(shown.body.at("body_withheld").get<std::string>().find("2 chunks"), std::string::npos);
  const auto listed = ops::record_to_json(memory.list(std::nullopt, 10).value().at(0), true);
  EXPECT_EQ(listed.at("response").at("chunks"), 2);
  EXPECT_EQ(listed.at("response").at("body_bytes"), 5);
}

// A stored answer's fields are one block: the head's lines, then an empty line and the
// trailers'. Blocks written before trailers were kept apart named a gRPC answer's
// trailers in an Idemproxy-Trailers field among the head's: they read as trailers.
TEST(StoredFields, HeadAndTrailersRoundTripAndTheOldSpellingStillReads) {
  using idemproxy::store::Header;
  const std::vector<Header> head = {{"Content-Type", "application/grpc"}, {"X-A", "1"}};
  const std::vector<Header> trailers = {{"grpc-status", "5"}, {"grpc-message", "no"}};
  std::vector<Header> read_trailers;
  const auto block = idemproxy::store::encode_headers(head, trailers);
  EXPECT_EQ(idemproxy::store::decode_headers(block, &read_trailers), head);
  EXPECT_EQ(read_trailers, trailers);
  const std::string legacy =
      "Content-Type: application/grpc\r\nIdemproxy-Trailers: grpc-status, grpc-message\r\n"
      "grpc-status: 5\r\ngrpc-message: no\r\nX-A: 1\r\n";
  EXPECT_EQ(idemproxy::store::decode_headers(legacy, &read_trailers), head);
  EXPECT_EQ(read_trailers, trailers);
  EXPECT_EQ(
      idemproxy::store::decode_headers(idemproxy::store::encode_headers(head), &read_trailers),
      head);
  EXPECT_TRUE(read_trailers.empty());
}

// A record's id and its slot key hash alike whatever the lengths of scope and key
// (SlotHash takes bytes eight at a time, so a word straddles scope, '\n' and key in
// every way), and a slot key is found by id in a map of them. Ids that differ by a
// byte, a split or a trailing NUL hash apart.
TEST(SlotHash, AnIdAndItsSlotKeyHashAlikeAndDistinctIdsApart) {
  const store::SlotHash hash;
  const store::SlotEqual equal;
  std::set<std::size_t> seen;
  int ids = 0;
  for (std::size_t scope_len = 0; scope_len <= 19; ++scope_len) {
    for (std::size_t key_len = 1; key_len <= 40; ++key_len) {
      std::string scope, key;
      for (std::size_t i = 0; i < scope_len; ++i) scope += static_cast<char>('a' + (i * 7) % 26);
      for (std::size_t i = 0; i < key_len; ++i) key += static_cast<char>('0' + (i * 5) % 75);
      const store::RecordId id{scope, key};
      const std::string slot = store::slot_key(id);
      ASSERT_EQ(hash(id), hash(std::string_view(slot))) << scope << " / " << key;
      EXPECT_TRUE(equal(slot, id));
      seen.insert(hash(id));
      ++ids;
    }
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(ids));
  // One byte moved across the split, a byte changed, a NUL added: all apart.
  EXPECT_NE(hash(store::RecordId{"ab", "c"}), hash(store::RecordId{"a", "bc"}));
  EXPECT_NE(hash(store::RecordId{"", "abcdefgh"}), hash(store::RecordId{"", "abcdefgi"}));
  EXPECT_NE(hash(std::string_view("a")), hash(std::string_view("a\0", 2)));
  std::unordered_map<std::string, int, store::SlotHash, store::SlotEqual> slots;
  slots.emplace(store::slot_key({"tenant-7", "8e03978e-40d5-43e8-bc93-6894a57f9324"}), 7);
  const auto found =
      slots.find(store::RecordId{"tenant-7", "8e03978e-40d5-43e8-bc93-6894a57f9324"});
  ASSERT_NE(found, slots.end());
  EXPECT_EQ(found->second, 7);
  EXPECT_EQ(slots.find(store::RecordId{"tenant-7", "8e03978e-40d5-43e8-bc93-6894a57f9325"}),
            slots.end());
}
