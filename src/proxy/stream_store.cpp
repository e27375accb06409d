#include "proxy/stream_store.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace idemproxy::proxy {

namespace {
constexpr std::chrono::milliseconds kFirstBackoff{100};
constexpr std::chrono::milliseconds kMaxBackoff{1000};
}  // namespace

asio::awaitable<void> ChunkWriter::add(std::string_view data) {
  streamed_ += data.size();
  if (!keeping()) co_return;
  if (streamed_ > max_stored_) {
    give_up("it outgrew the route's max_stored_answer (" + std::to_string(max_stored_) + " bytes)");
    co_return;
  }
  live_->add(data);
  co_await store_full_chunks();
  if (keeping() && !hold()) {
    give_up("the store failed to take its chunks (" + failure_ +
            "), and they outgrew server.max_unstored");
  }
}

asio::awaitable<void> ChunkWriter::store_full_chunks() {
  // A full chunk goes once more follows, past the one pending: a body of exactly
  // kChunkBytes stays whole.
  const auto full_chunk = [this] {
    const std::size_t held = live_->window().size() - pending_.size() * kChunkBytes;
    return held > kChunkBytes || (held == kChunkBytes && (seq_ > 0 || !pending_.empty()));
  };
  while (keeping() && full_chunk()) {
    if (pending_.size() >= kAppendsInFlight) {
      if (!co_await settle()) co_return;
      continue;
    }
    if (failing_ && Clock::now() < retry_at_) co_return;
    co_await start_first();
  }
}

asio::awaitable<void> ChunkWriter::start_first() {
  const std::size_t at = pending_.size() * kChunkBytes;
  auto p = std::make_shared<Pending>(co_await asio::this_coro::executor,
                                     seq_ + 1 + static_cast<std::int32_t>(pending_.size()));
  // Read before append_then returns: the window may move while it commits.
  rt_.append_then(id_, token_, p->seq, std::string_view(live_->window()).substr(at, kChunkBytes),
                  live_->followed(), [p](const store::Result<store::Done>& r) {
                    std::optional<store::StoreError> error;
                    if (!r.ok()) error = r.error();
                    asio::post(p->done.executor(), [p, error = std::move(error)]() mutable {
                      p->error = std::move(error);
                      p->done.notify();
                    });
                  });
  pending_.push_back(std::move(p));
}

asio::awaitable<bool> ChunkWriter::settle() {
  const std::shared_ptr<Pending> p = std::move(pending_.front());
  pending_.pop_front();
  co_await p->done.wait();
  // Its chunk is still the window's first: the window moves past it only in appended().
  const std::string_view chunk = std::string_view(live_->window()).substr(0, kChunkBytes);
  if (appended(p->seq, chunk, p->error)) co_return true;
  // The ones after it are appended again, after it: storing a chunk twice keeps one.
  pending_.clear();
  co_return false;
}

asio::awaitable<bool> ChunkWriter::append_first() {
  const std::int32_t seq = seq_ + 1;
  // The window changes only in add() and here, never while an append is awaited.
  const std::string_view chunk = std::string_view(live_->window()).substr(0, kChunkBytes);
  co_return appended(seq, chunk, co_await rt_.append(id_, token_, seq, chunk, live_->followed()));
}

bool ChunkWriter::appended(std::int32_t seq, std::string_view chunk,
                           const std::optional<store::StoreError>& error) {
  if (error) {
    if (!failing_) {
      spdlog::warn(
          "the store failed to keep chunk {} of a streamed answer ({}); the stream "
          "goes on, and its chunks are held until the store takes them",
          seq, error->detail);
    }
    failing_ = true;
    failure_ = error->detail;
    retry_at_ = Clock::now() + backoff_;
    backoff_ = std::min(backoff_ * 2, kMaxBackoff);
    return false;
  }
  failing_ = false;
  backoff_ = kFirstBackoff;
  seq_ = seq;
  digest_.update(chunk);
  live_->stored_chunk();
  return true;
}

bool ChunkWriter::hold() {
  const std::size_t held = live_->window().size();
  const std::size_t free = (pending_.size() + 1) * kChunkBytes;
  const std::size_t over = held > free ? held - free : 0;
  if (over == 0) {
    // The shared counter is touched only when something was held: not once per piece.
    if (reserved_ > 0) rt_.release_unstored(std::exchange(reserved_, std::size_t{0}));
    return true;
  }
  if (over <= reserved_) return true;
  // A chunk at a time, not a piece at a time.
  const std::size_t more = std::max(over - reserved_, kChunkBytes);
  if (!rt_.hold_unstored(more)) return false;
  reserved_ += more;
  return true;
}

void ChunkWriter::give_up(std::string why) {
  if (!keeping()) return;
  why_not_ = std::move(why);
  live_->cut();  // attachers cannot be given what is not kept
  rt_.release_unstored(std::exchange(reserved_, std::size_t{0}));
}

asio::awaitable<ChunkWriter::Kept> ChunkWriter::finish(store::StoredResponse& answer) {
  if (!keeping()) co_return Kept::no;
  // The appends in flight first; the rest goes after them, or after a retry.
  while (!pending_.empty()) {
    const bool stored = co_await settle();
    if (!stored) break;
  }
  const std::string& window = live_->window();
  if (seq_ == 0 && window.size() <= kChunkBytes) {  // small: the record's own row, as
    answer.body = window;                           // before (attachers still read it)
    co_return Kept::whole;
  }
  while (!window.empty() && (!failing_ || Clock::now() >= retry_at_)) {
    if (!co_await append_first()) break;
  }
  answer.body.clear();
  answer.body_length = static_cast<std::int64_t>(streamed_);
  // The chunks the store has not taken count in the body's digest, in order.
  for (std::size_t at = 0; at < window.size(); at += kChunkBytes) {
    digest_.update(std::string_view(window).substr(at, kChunkBytes));
    ++seq_;
  }
  answer.chunks = seq_;
  answer.body_digest = digest_.final();
  co_return window.empty() ? Kept::whole : Kept::unstored;
}

std::vector<store::Chunk> ChunkWriter::handed_over() {
  // Copied: attachers read them from the window until the stream is gone.
  const std::string& window = live_->window();
  std::vector<store::Chunk> chunks;
  const auto count = static_cast<std::int32_t>((window.size() + kChunkBytes - 1) / kChunkBytes);
  chunks.reserve(static_cast<std::size_t>(count));
  for (std::int32_t i = 0; i < count; ++i) {
    chunks.push_back({seq_ - count + 1 + i,
                      window.substr(static_cast<std::size_t>(i) * kChunkBytes, kChunkBytes)});
  }
  return chunks;
}

}  // namespace idemproxy::proxy
