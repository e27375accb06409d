#pragma once
// A streamed answer while it flows, for the concurrent retries of its key on this
// instance (on_concurrent: wait): they attach to it and get its bytes so far, then
// each new piece as it lands, and end as the original ends (issue 44). The holder's
// ChunkWriter fills its window, the bytes not yet in a stored chunk; the bytes
// before the window are in the store's chunks, under the holder's token, so a late
// attacher reads those from the store. One window per stream, shared by all its
// attachers: memory is bounded by the chunk size, whatever the answer's size (more
// only while the store fails appends, within server.max_unstored).
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "http/exchange.hpp"
#include "idemproxy/engine/local_holders.hpp"
#include "idemproxy/store/record.hpp"

namespace idemproxy::proxy {

/// The size of a stored chunk, and the largest body kept whole in a record's row.
inline constexpr std::size_t kChunkBytes = std::size_t{256} << 10;

/// The pseudo-field (no HTTP field is named so) in which a streamed answer's head,
/// recorded for retries on other instances (store::Claims::start_stream), says how
/// its body is framed: "length N" or "unknown", then " trailers" when it has them.
inline constexpr std::string_view kFramingEntry = ":framing";
std::string framing_entry(const http::Framing& framing);
/// The framing a kFramingEntry says; unknown for one it cannot read.
http::Framing parse_framing_entry(std::string_view entry);

class LiveAnswer {
 public:
  /// The head every attacher gets (the holder's client's, without its per-request
  /// fields), and how its body is framed.
  LiveAnswer(std::int64_t token, unsigned status, std::vector<store::Header> fields,
             http::Framing framing)
      : token_(token), status_(status), fields_(std::move(fields)), framing_(framing) {}

  std::int64_t token() const { return token_; }
  unsigned status() const { return status_; }
  const std::vector<store::Header>& fields() const { return fields_; }
  const http::Framing& framing() const { return framing_; }

  // The holder's side (one coroutine).
  /// The next piece of the body.
  void add(std::string_view data);
  /// The window's first chunk (kChunkBytes, or all it holds) went to the store: it
  /// is read from there now.
  void stored_chunk();
  /// The window, for the holder alone (it is the only one to change it).
  const std::string& window() const { return window_; }
  /// The answer ended, as the holder's client is told: attachers end too.
  void end(std::vector<store::Header> trailers);
  /// The answer broke off, or is no longer kept: attachers' streams are cut.
  void cut();

  // A retry on another instance follows it from the store (RemoteFeed).
  /// From now on `changed` is called after each change, without the lock; the
  /// holder's appends are announced (followed()). Once only: later calls are ignored.
  void follow_remotely(std::function<void()> changed);
  bool followed() const { return followed_.load(std::memory_order_acquire); }
  /// What the store lacks for a follower: the window's chunks past `len` bytes of
  /// chunk `seq` (whole chunks after it), at most `most` of them; none once the
  /// answer is no longer streaming (its completion, or its end, tells the rest).
  std::vector<store::Chunk> unstored_since(std::int32_t seq, std::size_t len,
                                           std::size_t most) const;

  // An attacher's side.
  struct Read {
    enum class Kind {
      bytes,     // `bytes` from the offset asked for
      in_store,  // the offset is in chunk `chunk`: read it from the store
      pending,   // nothing new yet: the waiter is woken when there is
      ended,     // `bytes` is the rest, then `trailers` and the end
      cut,       // the stream broke off
    };
    Kind kind = Kind::pending;
    std::string bytes;
    std::int32_t chunk = 0;
    std::vector<store::Header> trailers;
  };
  /// What there is from byte `at` of the body. A body framed by its length is not
  /// given whole before the holder's end: a client with every byte of it would take
  /// it as complete. `waiter` is woken once there is more (Kind::pending only).
  Read read(std::uint64_t at, const std::shared_ptr<engine::Waiter>& waiter);

 private:
  enum class State { streaming, ended, cut };
  void wake(std::unique_lock<std::mutex>& lock);

  const std::int64_t token_;
  const unsigned status_;
  const std::vector<store::Header> fields_;
  const http::Framing framing_;
  mutable std::mutex mu_;
  std::string window_;          // written under mu_ by the holder alone
  std::uint64_t in_store_ = 0;  // bytes before the window, in chunks
  State state_ = State::streaming;
  std::vector<store::Header> trailers_;
  std::vector<std::weak_ptr<engine::Waiter>> waiters_;
  std::atomic<bool> followed_{false};
  std::function<void()> changed_;  // set once, under mu_, with followed_
};

/// This instance's streams in flight, by key.
class LiveAnswers {
 public:
  void publish(const store::RecordId& id, std::shared_ptr<LiveAnswer> answer);
  void withdraw(const store::RecordId& id, const LiveAnswer* answer);
  /// The stream of `id` under `token`, or null.
  std::shared_ptr<LiveAnswer> find(const store::RecordId& id, std::int64_t token) const;
  /// The stream of `id`, whatever its token, or null.
  std::shared_ptr<LiveAnswer> find(const store::RecordId& id) const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<LiveAnswer>> streams_;
};

}  // namespace idemproxy::proxy
