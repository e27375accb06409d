#pragma once
// Stores a streamed answer's body as it flows (issue 44): a small one whole, in the
// record's own row, as before; past kChunkBytes in chunks of kChunkBytes appended
// under the claim (store::Claims::append) while it streams, so its size never sits
// in memory, and the record completes in chunks once every one is durable. The chunk
// being filled is the stream's LiveAnswer window, which retries attached to it read.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "idemproxy/common/sha256.hpp"
#include "idemproxy/store/record.hpp"
#include "proxy/live_answer.hpp"
#include "proxy/runtime.hpp"

namespace idemproxy::proxy {

class ChunkWriter {
 public:
  /// Appends tried this many times each before the body is given up.
  static constexpr int kAppendAttempts = 3;

  /// `max_stored`: the route's max_stored_answer; past it nothing more is stored.
  /// `live`: the stream as its attachers see it; it holds the chunk being filled.
  ChunkWriter(Runtime& rt, const store::RecordId& id, std::int64_t token, std::uint64_t max_stored,
              std::shared_ptr<LiveAnswer> live)
      : rt_(rt), id_(id), token_(token), max_stored_(max_stored), live_(std::move(live)) {}

  /// The next piece of the body. May wait for an append to commit: the stream is
  /// read no faster than it is stored (backpressure), with one chunk in memory.
  asio::awaitable<void> add(std::string_view data);
  /// At the end: stores what remains, and sets `answer`'s body, or its chunks, length
  /// and digest. False when the body is not kept: it outgrew max_stored_answer, or
  /// the store failed an append (the record then keeps the status only).
  asio::awaitable<bool> finish(store::StoredResponse& answer);

  /// Whether the body is still being kept (not over its cap, no append failed).
  bool keeping() const { return why_not_.empty(); }
  /// The body's bytes so far (kept or not), and the chunks stored.
  std::uint64_t streamed() const { return streamed_; }
  std::int32_t chunks() const { return seq_; }
  /// Why the body was not kept, for the log; empty when it was.
  const std::string& why_not() const { return why_not_; }

 private:
  asio::awaitable<void> append_buffer();
  void give_up(std::string why);

  Runtime& rt_;
  const store::RecordId& id_;
  std::int64_t token_;
  std::uint64_t max_stored_;
  std::shared_ptr<LiveAnswer> live_;  // its window: the body while it is small, then
                                      // the chunk being filled
  std::int32_t seq_ = 0;
  std::uint64_t streamed_ = 0;
  Sha256Stream digest_;  // of the chunks appended: a body kept whole needs none
  std::string why_not_;  // empty while the body is kept
};

}  // namespace idemproxy::proxy
