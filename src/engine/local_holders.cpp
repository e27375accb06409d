#include "http/wait_list.hpp"

namespace idemproxy::http {

void WaitList::hold(const std::string& id) {
  std::lock_guard lock(mu_);
  ++held_[id];
}

bool WaitList::add(const std::string& id, const std::shared_ptr<asio::steady_timer>& timer) {
  std::lock_guard lock(mu_);
  // A key held elsewhere is re-checked on a backoff: nothing here would wake its
  // waiter, and an entry for it would never be erased.
  if (!held_.contains(id)) return false;
  auto& list = waiting_[id];
  // Drop timers whose requests already moved on, so the list stays short.
  std::erase_if(list, [](const auto& w) { return w.expired(); });
  list.push_back(timer);
  return true;
}

std::size_t WaitList::waiting_keys() const {
  std::lock_guard lock(mu_);
  return waiting_.size();
}

void WaitList::release(const std::string& id) {
  {
    std::lock_guard lock(mu_);
    if (auto h = held_.find(id); h != held_.end() && --h->second <= 0) held_.erase(h);
  }
  notify(id);
}

void WaitList::notify(const std::string& id) {
  std::vector<std::weak_ptr<asio::steady_timer>> woken;
  {
    std::lock_guard lock(mu_);
    auto it = waiting_.find(id);
    if (it == waiting_.end()) return;
    woken = std::move(it->second);
    waiting_.erase(it);
  }
  for (auto& w : woken) {
    if (auto timer = w.lock()) {
      // Timers are not thread-safe: cancel on the waiter's own executor.
      asio::post(timer->get_executor(), [timer] { timer->cancel(); });
    }
  }
}

}  // namespace idemproxy::http
