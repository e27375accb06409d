// Streamed answers kept in chunks (Claims::append, Views::read_chunks): stored while
// they stream, complete only when whole, read in order in pages, and never read once
// their record moved on.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "store_contract.hpp"

namespace idemproxy::testing {
namespace {

using store::Chunk;
using store::RecordState;
using store::StoredResponse;
using store::StoreErrc;

// The answer a stream of `n` chunks completes with (the digest is the writer's to
// compute; the store keeps it as given).
StoredResponse in_chunks(std::int32_t n, std::int64_t length) {
  StoredResponse answer{
      200, {{"Content-Type", "text/event-stream"}}, "", true, {{"X-Checksum", "abc"}}};
  answer.chunks = n;
  answer.body_length = length;
  answer.body_digest = std::string(32, '\x5a');
  return answer;
}

class StreamContract : public StoreContract {
 protected:
  void append(const std::string& key, std::int64_t token, std::int32_t seq,
              const std::string& bytes) {
    const auto r = store->append(id(key), token, seq, bytes);
    ASSERT_TRUE(r.ok()) << r.error().detail;
  }
  std::vector<Chunk> read(const std::string& key, std::int64_t token, std::int32_t from,
                          int limit = 100) {
    auto r = store->read_chunks(id(key), token, from, limit);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().detail);
    return r.ok() ? r.value() : std::vector<Chunk>{};
  }
  // Every chunk, read a page of `page` at a time as a replay reads them.
  std::string paged(const std::string& key, std::int64_t token, int page) {
    std::string out;
    std::int32_t next = 1;
    for (auto chunks = read(key, token, next, page); !chunks.empty();
         chunks = read(key, token, next, page)) {
      EXPECT_LE(chunks.size(), static_cast<std::size_t>(page));
      for (const auto& c : chunks) {
        EXPECT_EQ(c.seq, next);
        ++next;
        out += c.bytes;
      }
    }
    return out;
  }
  static std::string joined(const std::vector<Chunk>& chunks) {
    std::string out;
    for (const auto& c : chunks) out += c.bytes;
    return out;
  }
};

TEST_P(StreamContract, ChunksAreReadInOrderInPagesOnceTheRecordCompletes) {
  const auto token = claim_token(request("s"));
  // Appends may land out of order (retried ones, batches); seq decides.
  append("s", token, 3, "data: three\n\n");
  append("s", token, 1, "data: one\n\n");
  append("s", token, 2, std::string("data: \0two\n\n", 12));
  append("s", token, 1, "data: o");  // again, shorter: the longer stays
  const auto expires = store->complete(id("s"), token, in_chunks(3, 36), 1h);
  ASSERT_TRUE(expires.ok()) << expires.error().detail;

  const auto r = found("s");
  EXPECT_EQ(r.state, RecordState::completed);
  ASSERT_TRUE(r.response.has_value());
  EXPECT_TRUE(r.response->body_stored);
  EXPECT_EQ(r.response->chunks, 3);
  EXPECT_EQ(r.response->body_length, 36);
  EXPECT_EQ(r.response->body_digest, std::string(32, '\x5a'));
  EXPECT_TRUE(r.response->body.empty());
  EXPECT_EQ(r.response->trailers, (std::vector<store::Header>{{"X-Checksum", "abc"}}));

  const auto first = read("s", r.token, 1, 2);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].seq, 1);
  EXPECT_EQ(first[0].bytes, "data: one\n\n");
  EXPECT_EQ(first[1].bytes, std::string("data: \0two\n\n", 12));
  const auto rest = read("s", r.token, 3, 2);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].seq, 3);
  EXPECT_TRUE(read("s", r.token, 4).empty());
  EXPECT_EQ(joined(read("s", r.token, 1)).size(), 36u);

  // A listing says the answer is kept, and how.
  auto listed = store->list(RecordState::completed, 1000);
  ASSERT_TRUE(listed.ok());
  const auto it = std::find_if(listed.value().begin(), listed.value().end(),
                               [&](const auto& rec) { return rec.id.scope == scope; });
  ASSERT_NE(it, listed.value().end());
  ASSERT_TRUE(it->response.has_value());
  EXPECT_TRUE(it->response->body_stored);
  EXPECT_EQ(it->response->chunks, 3);
  EXPECT_EQ(it->response->body_length, 36);
}

// A chunk stored while it fills, for a retry that follows the stream from another
// instance, grows: the longer bytes stay, whatever order they land in.
TEST_P(StreamContract, AChunkStoredAgainKeepsTheLongerBytes) {
  const auto token = claim_token(request("grow"));
  append("grow", token, 1, "ab");
  append("grow", token, 1, "abcd");
  append("grow", token, 1, "abc");  // a late, shorter copy
  append("grow", token, 2, "ef");
  EXPECT_EQ(joined(read("grow", token, 1)), "abcdef");
  // Both in one batch (group commit): one row each, the longer.
  std::mutex mu;
  std::condition_variable cv;
  int pending = 2;
  int failed = 0;
  const std::string shorter = "efg", longer = "efgh";
  for (const std::string* bytes : {&longer, &shorter}) {
    store->append_async(id("grow"), token, 2, *bytes, false, [&](store::Result<store::Done> r) {
      std::lock_guard lock(mu);
      if (!r.ok()) ++failed;
      if (--pending == 0) cv.notify_one();
    });
  }
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return pending == 0; }));
  EXPECT_EQ(failed, 0);
  ASSERT_TRUE(store->complete(id("grow"), token, in_chunks(2, 8), 1h).ok());
  EXPECT_EQ(joined(read("grow", token, 1)), "abcdefgh");
}

// The head of a streaming answer (Claims::start_stream) reaches a concurrent claim,
// which attaches with it; the record's watchers hear of it, and of each announced
// chunk; its completion replaces it.
TEST_P(StreamContract, AStreamsHeadReachesAConcurrentClaimAndItsWatchersHearItGrow) {
  Heard heard(/*watches=*/true);
  store->watch(heard.watchers(scope));
  heard.until(":resumed");
  const auto req = request("live");
  const auto token = claim_token(req);
  EXPECT_FALSE(existing(req).streaming.has_value());
  ASSERT_TRUE(store->watch_record(id("live")).value());
  EXPECT_EQ(heard.until("watched:live").back(), "watched:live");
  const StoredResponse head{200, {{"Content-Type", "text/event-stream"}}, "", true};
  ASSERT_TRUE(store->start_stream(id("live"), token, head).ok());
  EXPECT_EQ(heard.until("live").back(), "live");
  const store::Record seen = existing(req);
  ASSERT_TRUE(seen.streaming.has_value());
  EXPECT_EQ(seen.state, RecordState::in_flight);
  EXPECT_EQ(seen.token, token);
  EXPECT_EQ(seen.streaming->status, 200);
  ASSERT_EQ(seen.streaming->headers.size(), 1u);
  EXPECT_EQ(seen.streaming->headers[0].value, "text/event-stream");
  // Watched again, it says to look again at once: the waiter attaches.
  EXPECT_FALSE(store->watch_record(id("live")).value());
  // Only the holder may; a chunk announced wakes the watchers again.
  EXPECT_EQ(store->start_stream(id("live"), token + 1000, head).error().code, StoreErrc::fenced);
  std::promise<bool> stored;
  store->append_async(id("live"), token, 1, "data: 1\n\n", true,
                      [&](store::Result<store::Done> r) { stored.set_value(r.ok()); });
  ASSERT_TRUE(stored.get_future().get());
  ASSERT_TRUE(store->complete(id("live"), token, in_chunks(1, 9), 1h).ok());
  const store::Record done = existing(req);
  EXPECT_EQ(done.state, RecordState::completed);
  EXPECT_FALSE(done.streaming.has_value());
  const auto marker = claim_token(request("marker"));
  ASSERT_TRUE(store->watch_record(id("marker")).value());
  ASSERT_TRUE(store->release(id("marker"), marker).ok());
  // Heard: the watch, the head, the chunk, the completion, in order.
  std::vector<std::string> of_live;
  for (const auto& e : heard.until("marker"))
    if (e == "live" || e == "watched:live") of_live.push_back(e);
  EXPECT_EQ(of_live,
            (std::vector<std::string>{"watched:live", "live", "watched:live", "live", "live"}));
}

TEST_P(StreamContract, ACompletionWithAChunkMissingIsRefusedAndTheRecordStaysInFlight) {
  const auto token = claim_token(request("gap"));
  append("gap", token, 1, "a");
  append("gap", token, 3, "c");
  const auto refused = store->complete(id("gap"), token, in_chunks(3, 3), 1h);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, StoreErrc::fenced);
  EXPECT_EQ(found("gap").state, RecordState::in_flight);
  // Nor does it complete with fewer than it stored.
  append("gap", token, 2, "b");
  EXPECT_FALSE(store->complete(id("gap"), token, in_chunks(2, 2), 1h).ok());
  EXPECT_EQ(found("gap").state, RecordState::in_flight);
  ASSERT_TRUE(store->complete(id("gap"), token, in_chunks(3, 3), 1h).ok());
  EXPECT_EQ(joined(read("gap", token, 1)), "abc");
}

TEST_P(StreamContract, ATakenOverClaimNeverReadsItsPredecessorsChunks) {
  const auto old = claim_token(request("k", kShort));
  append("k", old, 1, "the vanished holder's");
  age(kPastShort);
  const auto taken = claimed(request("k", 30s, 1h, "fp-1", true));
  ASSERT_TRUE(taken.took_over);
  EXPECT_TRUE(read("k", taken.token, 1).empty());
  // Its completion counts only its own chunks.
  EXPECT_FALSE(store->complete(id("k"), taken.token, in_chunks(1, 5), 1h).ok());
  append("k", taken.token, 1, "fresh");
  ASSERT_TRUE(store->complete(id("k"), taken.token, in_chunks(1, 5), 1h).ok());
  EXPECT_EQ(joined(read("k", taken.token, 1)), "fresh");
  // And the old holder's chunks go with the next collection.
  for (int i = 0; i < 200 && !read("k", old, 1).empty(); ++i) {
    ASSERT_TRUE(store->sweep_chunks(100000).ok());
    age(10ms);
  }
  EXPECT_TRUE(read("k", old, 1).empty());
  EXPECT_EQ(joined(read("k", taken.token, 1)), "fresh");
}

TEST_P(StreamContract, APurgeTakesTheChunksWithTheRecord) {
  const auto token = claim_token(request("p"));
  append("p", token, 1, "x");
  ASSERT_TRUE(store->complete(id("p"), token, in_chunks(1, 1), 1h).ok());
  ASSERT_TRUE(store->purge(id("p")).value());
  EXPECT_TRUE(read("p", token, 1).empty());
}

TEST_P(StreamContract, ATombstonedAnswersChunksGoWithItsAnswerNotAtALaterSweep) {
  auto tomb = request("tomb");
  tomb.route = "tomb-now-" + scope;
  const auto token = claim_token(tomb);
  append("tomb", token, 1, "t1");
  append("tomb", token, 2, "t2");
  ASSERT_TRUE(store->complete(id("tomb"), token, in_chunks(2, 4), {kShort, 1h}).ok());
  age(kPastShort);
  // Another test's collection may hold the lock for a moment.
  std::int64_t dropped = 0;
  for (int i = 0; i < 200 && dropped == 0; ++i) {
    const auto d = store->drop_answers(tomb.route, kShort, 100);
    ASSERT_TRUE(d.ok());
    dropped = d.value();
    if (dropped == 0) age(10ms);
  }
  ASSERT_EQ(dropped, 1);
  // No delete_expired ran: the drop itself took the chunks.
  EXPECT_TRUE(read("tomb", token, 1).empty());
  EXPECT_EQ(found("tomb").state, RecordState::completed);
}

TEST_P(StreamContract, CollectionDeletesTheChunksOfExpiredReleasedAndTombstonedRecords) {
  // Expired: deleted with its record. Released and indeterminate: never replayed.
  // Tombstoned (drop_answers): its answer is gone. Live ones stay.
  const auto expired = claim_token(request("expired", 30s, kShort));
  append("expired", expired, 1, "e");
  ASSERT_TRUE(store->complete(id("expired"), expired, in_chunks(1, 1), kShort).ok());
  const auto released = claim_token(request("released"));
  append("released", released, 1, "r");
  ASSERT_TRUE(store->release(id("released"), released).ok());
  const auto unknown = claim_token(request("unknown"));
  append("unknown", unknown, 1, "u");
  ASSERT_TRUE(store->mark_indeterminate(id("unknown"), unknown).ok());
  auto tomb = request("tomb");
  tomb.route = "tomb-route-" + scope;
  const auto tombed = claim_token(tomb);
  append("tomb", tombed, 1, "t");
  ASSERT_TRUE(store->complete(id("tomb"), tombed, in_chunks(1, 1), {kShort, 1h}).ok());
  const auto live = claim_token(request("live"));
  append("live", live, 1, "l");
  const auto kept = claim_token(request("kept"));
  append("kept", kept, 1, "k");
  ASSERT_TRUE(store->complete(id("kept"), kept, in_chunks(1, 1), 1h).ok());
  age(kPastShort);
  // Collection takes one lock for every instance: another test's may hold it a moment
  // (the contract runs on the shared database for two stores at once).
  for (int i = 0; i < 500; ++i) {
    const auto dropped = store->drop_answers(tomb.route, kShort, 100);
    ASSERT_TRUE(dropped.ok());
    if (dropped.value() > 0) break;
    age(10ms);
  }
  const auto tomb_record = found("tomb");
  ASSERT_TRUE(tomb_record.response.has_value());
  EXPECT_FALSE(tomb_record.response->body_stored);
  EXPECT_EQ(tomb_record.response->chunks, 0);

  const auto swept = [&] {
    return read("expired", expired, 1).empty() && read("released", released, 1).empty() &&
           read("unknown", unknown, 1).empty() && read("tomb", tombed, 1).empty();
  };
  // Another test may hold the collection's lock for a moment.
  for (int i = 0; i < 500 && !swept(); ++i) {
    ASSERT_TRUE(store->delete_expired(1000).ok());
    ASSERT_TRUE(store->sweep_chunks(100000).ok());
    age(10ms);
  }
  EXPECT_TRUE(swept());
  EXPECT_EQ(joined(read("live", live, 1)), "l");
  EXPECT_EQ(joined(read("kept", kept, 1)), "k");
}

TEST_P(StreamContract, ChunksAppendedAtOnceFromManyThreadsAreAllStored) {
  constexpr int kStreams = 8;
  constexpr int kChunks = 25;
  std::vector<std::int64_t> tokens;
  for (int s = 0; s < kStreams; ++s)
    tokens.push_back(claim_token(request("m" + std::to_string(s))));
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (int s = 0; s < kStreams; ++s) {
    threads.emplace_back([&, s] {
      std::mutex mu;
      std::condition_variable cv;
      int pending = kChunks;
      std::vector<std::string> bytes;
      for (int i = 1; i <= kChunks; ++i)
        bytes.push_back(std::to_string(s) + ":" + std::to_string(i) + ";");
      for (int i = 1; i <= kChunks; ++i) {
        store->append_async(id("m" + std::to_string(s)), tokens[s], i, bytes[i - 1], false,
                            [&](store::Result<store::Done> r) {
                              if (!r.ok()) ++failed;
                              std::lock_guard lock(mu);
                              if (--pending == 0) cv.notify_one();
                            });
      }
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return pending == 0; });
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  for (int s = 0; s < kStreams; ++s) {
    const std::string key = "m" + std::to_string(s);
    ASSERT_TRUE(store->complete(id(key), tokens[s], in_chunks(kChunks, 1), 1h).ok()) << key;
    std::string expect;
    for (int i = 1; i <= kChunks; ++i) expect += std::to_string(s) + ":" + std::to_string(i) + ";";
    EXPECT_EQ(paged(key, tokens[s], 7), expect);
  }
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Stores, StreamContract,
                         ::testing::Values("memory", "postgres", "postgres_loop", "citus"),
                         [](const auto& info) { return info.param; });

}  // namespace idemproxy::testing
