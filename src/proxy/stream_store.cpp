#include "proxy/stream_store.hpp"

#include <algorithm>

namespace idemproxy::proxy {

asio::awaitable<void> ChunkWriter::add(std::string_view data) {
  if (!keeping()) co_return;
  if (length_ + data.size() > max_stored_) {
    over_ = true;
    why_not_ =
        "it outgrew the route's max_stored_answer (" + std::to_string(max_stored_) + " bytes)";
    buffer_.clear();
    buffer_.shrink_to_fit();
    co_return;
  }
  length_ += data.size();
  while (!data.empty() && keeping()) {
    const std::size_t room = kChunkBytes - std::min(buffer_.size(), kChunkBytes);
    const std::size_t take = std::min(room, data.size());
    buffer_.append(data.substr(0, take));
    data.remove_prefix(take);
    // A full chunk goes once more follows: a body of exactly kChunkBytes stays whole.
    if (buffer_.size() == kChunkBytes && !data.empty()) co_await append_buffer();
  }
  if (buffer_.size() == kChunkBytes && seq_ > 0 && keeping()) co_await append_buffer();
}

asio::awaitable<void> ChunkWriter::append_buffer() {
  const std::int32_t seq = seq_ + 1;
  for (int attempt = 1;; ++attempt) {
    const std::optional<store::StoreError> error = co_await rt_.append(id_, token_, seq, buffer_);
    if (!error) break;
    if (attempt == kAppendAttempts) {
      failed_ = true;
      why_not_ = "the store failed to keep chunk " + std::to_string(seq) + ": " + error->detail;
      buffer_.clear();
      buffer_.shrink_to_fit();
      co_return;
    }
  }
  seq_ = seq;
  digest_.update(buffer_);
  buffer_.clear();
}

asio::awaitable<bool> ChunkWriter::finish(store::StoredResponse& answer) {
  if (!keeping()) co_return false;
  if (seq_ == 0) {  // small: the record's own row, as before
    answer.body = std::move(buffer_);
    co_return true;
  }
  if (!buffer_.empty()) co_await append_buffer();
  if (!keeping()) co_return false;
  answer.body.clear();
  answer.chunks = seq_;
  answer.body_length = static_cast<std::int64_t>(length_);
  answer.body_digest = digest_.final();
  co_return true;
}

}  // namespace idemproxy::proxy
