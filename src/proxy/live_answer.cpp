#include "proxy/live_answer.hpp"

#include <algorithm>
#include <charconv>
#include <system_error>

namespace idemproxy::proxy {

std::string framing_entry(const http::Framing& framing) {
  std::string entry =
      framing.kind == http::Framing::Kind::length
          ? "length " + std::to_string(framing.length)
          : std::string(framing.kind == http::Framing::Kind::none ? "none" : "unknown");
  if (framing.trailers) entry += " trailers";
  return entry;
}

http::Framing parse_framing_entry(std::string_view entry) {
  http::Framing framing = http::Framing::unknown();
  constexpr std::string_view kTrailers = " trailers";
  if (entry.ends_with(kTrailers)) {
    framing.trailers = true;
    entry.remove_suffix(kTrailers.size());
  }
  if (entry == "none") {
    framing.kind = http::Framing::Kind::none;
  } else if (entry.starts_with("length ")) {
    std::uint64_t n = 0;
    const std::string_view digits = entry.substr(7);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (ec == std::errc{} && end == digits.data() + digits.size()) {
      framing.kind = http::Framing::Kind::length;
      framing.length = n;
    }
  }
  return framing;
}

void LiveAnswer::add(std::string_view data) {
  std::unique_lock lock(mu_);
  window_.append(data);
  wake(lock);
}

void LiveAnswer::stored_chunk() {
  std::unique_lock lock(mu_);
  const std::size_t chunk = std::min(window_.size(), kChunkBytes);
  in_store_ += chunk;
  window_.erase(0, chunk);
  wake(lock);
}

void LiveAnswer::follow_remotely(std::function<void()> changed) {
  {
    std::lock_guard lock(mu_);
    if (changed_ || state_ != State::streaming) return;
    changed_ = std::move(changed);
    followed_.store(true, std::memory_order_release);
  }
  changed_();  // set once, never reset: safe to call unlocked
}

std::vector<store::Chunk> LiveAnswer::unstored_since(std::int32_t seq, std::size_t len,
                                                     std::size_t most) const {
  std::vector<store::Chunk> out;
  std::lock_guard lock(mu_);
  if (state_ != State::streaming) return out;
  auto first = static_cast<std::int32_t>(in_store_ / kChunkBytes) + 1;
  for (std::size_t at = 0; at < window_.size() && out.size() < most; at += kChunkBytes, ++first) {
    const std::size_t size = std::min(kChunkBytes, window_.size() - at);
    if (first < seq || (first == seq && size <= len)) continue;
    out.push_back({first, window_.substr(at, size)});
  }
  return out;
}

void LiveAnswer::end(std::vector<store::Header> trailers) {
  std::unique_lock lock(mu_);
  if (state_ != State::streaming) return;
  state_ = State::ended;
  trailers_ = std::move(trailers);
  wake(lock);
}

void LiveAnswer::cut() {
  std::unique_lock lock(mu_);
  if (state_ != State::streaming) return;
  state_ = State::cut;
  window_.clear();
  window_.shrink_to_fit();
  wake(lock);
}

LiveAnswer::Read LiveAnswer::read(std::uint64_t at, const std::shared_ptr<engine::Waiter>& waiter) {
  Read r;
  std::unique_lock lock(mu_);
  if (state_ == State::cut) {
    r.kind = Read::Kind::cut;
    return r;
  }
  if (at < in_store_) {
    r.kind = Read::Kind::in_store;
    r.chunk = static_cast<std::int32_t>(at / kChunkBytes) + 1;
    return r;
  }
  const std::uint64_t end = in_store_ + window_.size();
  if (state_ == State::ended) {
    r.kind = Read::Kind::ended;
    if (at < end) r.bytes.assign(window_, at - in_store_);
    r.trailers = trailers_;
    return r;
  }
  // Short of the whole length while the holder's answer is not recorded.
  std::uint64_t upto = std::min(end, at + kChunkBytes);  // a chunk at a time
  if (framing_.kind == http::Framing::Kind::length && framing_.length > 0)
    upto = std::min(upto, framing_.length - 1);
  if (at < upto) {
    r.kind = Read::Kind::bytes;
    r.bytes.assign(window_, at - in_store_, upto - at);
    return r;
  }
  std::erase_if(waiters_, [](const auto& w) { return w.expired(); });
  waiters_.push_back(waiter);
  return r;
}

void LiveAnswer::wake(std::unique_lock<std::mutex>& lock) {
  std::vector<std::weak_ptr<engine::Waiter>> woken;
  woken.swap(waiters_);
  const bool follower = static_cast<bool>(changed_);
  lock.unlock();
  for (const auto& w : woken) {
    if (auto waiter = w.lock()) waiter->wake();
  }
  if (follower) changed_();
}

void LiveAnswers::publish(const store::RecordId& id, std::shared_ptr<LiveAnswer> answer) {
  std::lock_guard lock(mu_);
  streams_[store::slot_key(id)] = std::move(answer);
}

void LiveAnswers::withdraw(const store::RecordId& id, const LiveAnswer* answer) {
  std::lock_guard lock(mu_);
  auto it = streams_.find(store::slot_key(id));
  if (it != streams_.end() && it->second.get() == answer) streams_.erase(it);
}

std::shared_ptr<LiveAnswer> LiveAnswers::find(const store::RecordId& id) const {
  std::lock_guard lock(mu_);
  auto it = streams_.find(store::slot_key(id));
  return it == streams_.end() ? nullptr : it->second;
}

std::shared_ptr<LiveAnswer> LiveAnswers::find(const store::RecordId& id, std::int64_t token) const {
  std::lock_guard lock(mu_);
  auto it = streams_.find(store::slot_key(id));
  if (it == streams_.end() || it->second->token() != token) return nullptr;
  return it->second;
}

}  // namespace idemproxy::proxy
