#include "proxy/stream_store.hpp"

#include <algorithm>

namespace idemproxy::proxy {

asio::awaitable<void> ChunkWriter::add(std::string_view data) {
  streamed_ += data.size();
  if (!keeping()) co_return;
  if (streamed_ > max_stored_) {
    give_up("it outgrew the route's max_stored_answer (" + std::to_string(max_stored_) + " bytes)");
    co_return;
  }
  while (!data.empty() && keeping()) {
    const std::size_t filled = live_->window().size();
    const std::size_t take = std::min(kChunkBytes - std::min(filled, kChunkBytes), data.size());
    live_->add(data.substr(0, take));
    data.remove_prefix(take);
    // A full chunk goes once more follows: a body of exactly kChunkBytes stays whole.
    if (live_->window().size() == kChunkBytes && !data.empty()) co_await append_buffer();
  }
  if (live_->window().size() == kChunkBytes && seq_ > 0 && keeping()) co_await append_buffer();
}

asio::awaitable<void> ChunkWriter::append_buffer() {
  const std::int32_t seq = seq_ + 1;
  // The window changes only here and in add(), never while an append is awaited.
  const std::string& chunk = live_->window();
  for (int attempt = 1;; ++attempt) {
    const std::optional<store::StoreError> error = co_await rt_.append(id_, token_, seq, chunk);
    if (!error) break;
    if (attempt == kAppendAttempts) {
      give_up("the store failed to keep chunk " + std::to_string(seq) + ": " + error->detail);
      co_return;
    }
  }
  seq_ = seq;
  digest_.update(chunk);
  live_->stored_chunk();
}

void ChunkWriter::give_up(std::string why) {
  if (!keeping()) return;
  why_not_ = std::move(why);
  live_->cut();  // attachers cannot be given what is not kept
}

asio::awaitable<bool> ChunkWriter::finish(store::StoredResponse& answer) {
  if (!keeping()) co_return false;
  if (seq_ == 0) {  // small: the record's own row, as before (attachers still read it)
    answer.body = live_->window();
    co_return true;
  }
  if (!live_->window().empty()) co_await append_buffer();
  if (!keeping()) co_return false;
  answer.body.clear();
  answer.chunks = seq_;
  answer.body_length = static_cast<std::int64_t>(streamed_);
  answer.body_digest = digest_.final();
  co_return true;
}

}  // namespace idemproxy::proxy
