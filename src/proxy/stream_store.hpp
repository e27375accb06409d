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
// come (backoff 100 ms to 1 s). What the window holds past the chunks being appended
// and the one filling is counted against the instance's server.max_unstored; past
// that the body is given up. At the end, chunks the store still has not taken go to
// the background retry with the completion (CompletionRetrier), as a completion the
// store failed does.
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http/signal.hpp"
#include "idemproxy/common/sha256.hpp"
#include "idemproxy/store/record.hpp"
#include "proxy/live_answer.hpp"
#include "proxy/runtime.hpp"

namespace idemproxy::proxy {

/// Appends of one stream's chunks in flight at once: the stream is read on while they
/// commit, and those queued together share a commit. bench/streamed.sh, one round
/// each: 52.1 MiB/s with one in flight, 59.5 with two, 61.2 with four. Four, once the
/// window held the only copy: 2.04 chunks a commit against 1.02 with two, half the
/// commits (and fsyncs), at the same rate within the noise here (60.9 against 63.4).
inline constexpr std::size_t kAppendsInFlight = 4;

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

  /// The next piece of the body. A full chunk's append starts and the stream goes on
  /// while it commits, up to kAppendsInFlight appends; the next full chunk waits for
  /// the first of them. So the stream is read no faster than a working store takes it
  /// (backpressure), with kAppendsInFlight + 1 chunks in its window: those committing,
  /// one filling. The store copies a chunk as its append starts
  /// (store::Claims::append_async), so the window holds the only copy here.
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
  /// Starts the appends of the window's full chunks, in order, kAppendsInFlight at most.
  asio::awaitable<void> store_full_chunks();
  /// An append started and not yet awaited: chunk `seq`, the window's first chunks
  /// in order. Shared with the store's callback, which may come after the writer is
  /// gone (the stream cut).
  struct Pending {
    Pending(const asio::any_io_executor& ex, std::int32_t number)
        : seq(number), done(ex, http::Signal::Reset::never) {}
    std::int32_t seq;
    std::optional<store::StoreError> error;  // set on the writer's executor, then done
    http::Signal done;
  };
  asio::awaitable<void> start_first();
  /// Waits for the first append in flight (the window's first chunk); false when it
  /// failed (those after it are dropped, to be appended again after it).
  asio::awaitable<bool> settle();
  /// Appends the window's first chunk (full, or the last one) and waits; false when it
  /// failed.
  asio::awaitable<bool> append_first();
  /// After chunk `seq`'s append: the window moves past it, or the store is failing.
  bool appended(std::int32_t seq, std::string_view chunk,
                const std::optional<store::StoreError>& error);
  /// Counts what the window holds past the chunks in flight and one more against
  /// server.max_unstored.
  bool hold();
  void give_up(std::string why);

  Runtime& rt_;
  const store::RecordId& id_;
  std::int64_t token_;
  std::uint64_t max_stored_;
  // Its window: the body while it is small, then the bytes not yet in a stored chunk.
  std::shared_ptr<LiveAnswer> live_;
  std::deque<std::shared_ptr<Pending>> pending_;  // the appends in flight, in order
  std::int32_t seq_ = 0;                          // chunks stored (or, after finish, in the body)
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
