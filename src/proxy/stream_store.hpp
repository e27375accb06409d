#pragma once
// Stores a streamed answer's body as it flows (issue 44): a small one whole, in the
// record's own row, as before; past kChunkBytes in chunks of kChunkBytes appended
// under the claim (store::Claims::append) while it streams, so its size never sits
// in memory, and the record completes in chunks once every one is durable. The
// bytes not yet in a stored chunk are the stream's LiveAnswer window, which retries
// attached to it read.
//
// A store that fails an append does not stop the stream: the chunk stays in the
// window, later pieces go on to the client, and the append is tried again as they
// come (backoff 100 ms to 1 s). What the window holds past one chunk is counted
// against the instance's server.max_unstored; past that the body is given up. At
// the end, chunks the store still has not taken go to the background retry with
// the completion (CompletionRetrier), as a completion the store failed does.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "idemproxy/common/sha256.hpp"
#include "idemproxy/store/record.hpp"
#include "proxy/live_answer.hpp"
#include "proxy/runtime.hpp"

namespace idemproxy::proxy {

class ChunkWriter {
 public:
  /// `max_stored`: the route's max_stored_answer; past it nothing more is stored.
  /// `live`: the stream as its attachers see it; it holds the bytes not yet stored.
  ChunkWriter(Runtime& rt, const store::RecordId& id, std::int64_t token, std::uint64_t max_stored,
              std::shared_ptr<LiveAnswer> live)
      : rt_(rt), id_(id), token_(token), max_stored_(max_stored), live_(std::move(live)) {}
  ~ChunkWriter() { rt_.release_unstored(reserved_); }
  ChunkWriter(const ChunkWriter&) = delete;
  ChunkWriter& operator=(const ChunkWriter&) = delete;

  /// The next piece of the body. May wait for an append to commit: the stream is
  /// read no faster than a working store takes it (backpressure), with one chunk in
  /// memory.
  asio::awaitable<void> add(std::string_view data);

  enum class Kept {
    whole,     // every chunk durable (or the body whole in `answer`)
    unstored,  // the store failed: the chunks it has not taken are in handed_over()
    no,        // not kept: the record keeps the status only
  };
  /// At the end: stores what remains, and sets `answer`'s body, or its chunks, length
  /// and digest. Not kept: it outgrew max_stored_answer, or what the failing store
  /// had not taken outgrew server.max_unstored.
  asio::awaitable<Kept> finish(store::StoredResponse& answer);
  /// After finish() said unstored: the chunks the store has not taken, in order, and
  /// the bytes of server.max_unstored they hold, which pass to the caller.
  std::vector<store::Chunk> handed_over();
  std::size_t reserved() { return std::exchange(reserved_, std::size_t{0}); }

  /// Whether the body is still being kept (not over its cap or the budget).
  bool keeping() const { return why_not_.empty(); }
  /// The body's bytes so far (kept or not), and the chunks in it (stored or not).
  std::uint64_t streamed() const { return streamed_; }
  std::int32_t chunks() const { return seq_; }
  /// Why the body was not kept, for the log; empty when it was.
  const std::string& why_not() const { return why_not_; }

 private:
  using Clock = std::chrono::steady_clock;
  /// Appends the window's full chunks while the store takes them.
  asio::awaitable<void> store_full_chunks();
  /// Appends the window's first chunk (full, or the last one); false when it failed.
  asio::awaitable<bool> append_first();
  /// Counts what the window holds past one chunk against server.max_unstored.
  bool hold();
  void give_up(std::string why);

  Runtime& rt_;
  const store::RecordId& id_;
  std::int64_t token_;
  std::uint64_t max_stored_;
  std::shared_ptr<LiveAnswer> live_;  // its window: the body while it is small, then
                                      // the bytes not yet in a stored chunk
  std::int32_t seq_ = 0;              // chunks stored (or, after finish, in the body)
  std::uint64_t streamed_ = 0;
  Sha256Stream digest_;  // of the chunks stored: a body kept whole needs none
  std::string why_not_;  // empty while the body is kept
  // While the store fails appends: when to try again, and the budget held.
  bool failing_ = false;
  Clock::time_point retry_at_;
  std::chrono::milliseconds backoff_{100};
  std::string failure_;  // the store's last error
  std::size_t reserved_ = 0;
};

}  // namespace idemproxy::proxy
