#include "idemproxy/engine/local_holders.hpp"

namespace idemproxy::engine {
namespace {

// Wakes the waiters still alive; called after the lock is let go.
void wake_all(const std::vector<std::weak_ptr<Waiter>>& waiters) {
  for (const auto& w : waiters) {
    if (auto waiter = w.lock()) waiter->wake();
  }
}

}  // namespace

void LocalHolders::hold(const store::RecordId& id) {
  std::lock_guard lock(mu_);
  ++held_[store::slot_key(id)];
}

bool LocalHolders::held(const store::RecordId& id) const {
  std::lock_guard lock(mu_);
  return held_.contains(store::slot_key(id));
}

bool LocalHolders::add(const store::RecordId& id, const std::shared_ptr<Waiter>& waiter) {
  const std::string slot = store::slot_key(id);
  std::lock_guard lock(mu_);
  // A key held elsewhere is re-checked on a backoff: nothing here would wake its
  // waiter, and an entry for it would never be erased.
  if (!held_.contains(slot)) return false;
  auto& list = waiting_[slot];
  // Drop waiters whose requests already moved on, so the list stays short.
  std::erase_if(list, [](const auto& w) { return w.expired(); });
  list.push_back(waiter);
  return true;
}

std::size_t LocalHolders::waiting_keys() const {
  std::lock_guard lock(mu_);
  return waiting_.size();
}

void LocalHolders::release(const store::RecordId& id) {
  {
    std::lock_guard lock(mu_);
    if (auto h = held_.find(store::slot_key(id)); h != held_.end() && --h->second <= 0) {
      held_.erase(h);
    }
  }
  notify(id);
}

void LocalHolders::notify(const store::RecordId& id) {
  std::vector<std::weak_ptr<Waiter>> woken;
  {
    std::lock_guard lock(mu_);
    auto it = waiting_.find(store::slot_key(id));
    if (it == waiting_.end()) return;
    woken = std::move(it->second);
    waiting_.erase(it);
  }
  wake_all(woken);
}

void LocalHolders::add_remote(const store::RecordId& id, const std::shared_ptr<Waiter>& waiter) {
  std::lock_guard lock(mu_);
  remote_[store::slot_key(id)].push_back(waiter);
}

void LocalHolders::remove_remote(const store::RecordId& id, const Waiter* waiter) {
  std::lock_guard lock(mu_);
  auto it = remote_.find(store::slot_key(id));
  if (it == remote_.end()) return;
  std::erase_if(it->second, [waiter](const auto& w) {
    const auto held = w.lock();
    return !held || held.get() == waiter;
  });
  if (it->second.empty()) remote_.erase(it);
}

void LocalHolders::notify_remote(const store::RecordId& id) {
  std::vector<std::weak_ptr<Waiter>> woken;
  {
    std::lock_guard lock(mu_);
    auto it = remote_.find(store::slot_key(id));
    if (it == remote_.end()) return;
    woken = it->second;  // each waiter removes itself once it stops waiting
  }
  wake_all(woken);
}

void LocalHolders::notify_all_remote() {
  std::vector<std::weak_ptr<Waiter>> woken;
  {
    std::lock_guard lock(mu_);
    for (const auto& [slot, waiters] : remote_)
      woken.insert(woken.end(), waiters.begin(), waiters.end());
  }
  wake_all(woken);
}

}  // namespace idemproxy::engine
