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

void LocalHolders::claiming(const store::RecordId& id) {
  std::lock_guard lock(mu_);
  ++slot(claiming_, id);
}

void LocalHolders::claimed(const store::RecordId& id, bool executes) {
  std::vector<std::weak_ptr<Waiter>> woken;
  {
    std::lock_guard lock(mu_);
    auto c = claiming_.find(id);
    if (executes) {
      if (c != claiming_.end() && c->second == 1 && !held_.contains(id)) {
        // The last claim of it on its way: its node, key and all, becomes the holder's.
        auto node = claiming_.extract(c);
        node.mapped() = 1;
        held_.insert(std::move(node));
        return;  // held here: the waiters stay asleep until release()
      }
      ++slot(held_, id);
    }
    if (c == claiming_.end() || --c->second > 0) return;
    claiming_.erase(c);
    // None of this process's claims executes: the key is held elsewhere, and the
    // waiters kept for these claims go and wait for that.
    if (!held_.contains(id)) woken = take_waiters(id);
  }
  wake_all(woken);
}

std::vector<std::weak_ptr<Waiter>> LocalHolders::take_waiters(const store::RecordId& id) {
  auto it = waiting_.find(id);
  if (it == waiting_.end()) return {};
  auto woken = std::move(it->second);
  waiting_.erase(it);
  return woken;
}

Holder LocalHolders::add(const store::RecordId& id, const std::shared_ptr<Waiter>& waiter) {
  std::lock_guard lock(mu_);
  // A key held elsewhere is waited for by the store's announcement or a backoff:
  // nothing here would wake its waiter, and an entry for it would never be erased.
  const Holder holder = held_.contains(id)       ? Holder::here
                        : claiming_.contains(id) ? Holder::claiming
                                                 : Holder::elsewhere;
  if (holder == Holder::elsewhere) return holder;
  auto& list = slot(waiting_, id);
  // Drop waiters whose requests already moved on, so the list stays short.
  std::erase_if(list, [](const auto& w) { return w.expired(); });
  list.push_back(waiter);
  return holder;
}

std::size_t LocalHolders::waiting_keys() const {
  std::lock_guard lock(mu_);
  return waiting_.size();
}

void LocalHolders::release(const store::RecordId& id) {
  std::vector<std::weak_ptr<Waiter>> woken;
  {
    std::lock_guard lock(mu_);
    if (auto h = held_.find(id); h != held_.end() && --h->second <= 0) held_.erase(h);
    woken = take_waiters(id);
  }
  wake_all(woken);
}

void LocalHolders::notify(const store::RecordId& id) {
  std::vector<std::weak_ptr<Waiter>> woken;
  {
    std::lock_guard lock(mu_);
    woken = take_waiters(id);
  }
  wake_all(woken);
}

void LocalHolders::add_remote(const store::RecordId& id, const std::shared_ptr<Waiter>& waiter) {
  std::lock_guard lock(mu_);
  slot(remote_, id).push_back(waiter);
}

void LocalHolders::remove_remote(const store::RecordId& id, const Waiter* waiter) {
  std::lock_guard lock(mu_);
  auto it = remote_.find(id);
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
    auto it = remote_.find(id);
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
