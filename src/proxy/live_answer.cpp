#include "proxy/live_answer.hpp"

#include <algorithm>

namespace idemproxy::proxy {

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
  if (waiters_.empty()) return;
  std::vector<std::weak_ptr<engine::Waiter>> woken;
  woken.swap(waiters_);
  lock.unlock();
  for (const auto& w : woken) {
    if (auto waiter = w.lock()) waiter->wake();
  }
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

std::shared_ptr<LiveAnswer> LiveAnswers::find(const store::RecordId& id, std::int64_t token) const {
  std::lock_guard lock(mu_);
  auto it = streams_.find(store::slot_key(id));
  if (it == streams_.end() || it->second->token() != token) return nullptr;
  return it->second;
}

}  // namespace idemproxy::proxy
