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
  ++slot(keys_, id).claiming;
}

std::vector<std::weak_ptr<Waiter>> LocalHolders::settle(Slots<Key>::iterator at) {
  std::vector<std::weak_ptr<Waiter>> woken;
  Key& k = at->second;
  if (!k.waiting.empty()) {
    woken = std::move(k.waiting);
    k.waiting.clear();
    --waiting_keys_;
  }
  // Waiters are kept only while a claim is on its way or a holder is here.
  if (k.claiming <= 0 && k.held <= 0) keys_.erase(at);
  return woken;
}

void LocalHolders::claimed(const store::RecordId& id, bool executes) {
  std::vector<std::weak_ptr<Waiter>> woken;
  {
    std::lock_guard lock(mu_);
    auto at = keys_.find(id);
    if (at == keys_.end()) {
      if (!executes) return;
      at = keys_.try_emplace(store::slot_key(id)).first;
    }
    Key& k = at->second;
    if (executes) ++k.held;  // held here: the waiters stay asleep until release()
    if (k.claiming > 0) --k.claiming;
    // None of this process's claims executes: the key is held elsewhere, and the
    // waiters kept for these claims go and wait for that.
    if (k.claiming == 0 && k.held == 0) woken = settle(at);
  }
  wake_all(woken);
}

Holder LocalHolders::add(const store::RecordId& id, const std::shared_ptr<Waiter>& waiter) {
  std::lock_guard lock(mu_);
  // A key held elsewhere is waited for by the store's announcement or a backoff:
  // nothing here would wake its waiter, and an entry for it would never be erased.
  const auto at = keys_.find(id);
  if (at == keys_.end()) return Holder::elsewhere;
  Key& k = at->second;
  const Holder holder = k.held > 0 ? Holder::here : Holder::claiming;
  // Drop waiters whose requests already moved on, so the list stays short. The key
  // is counted once, when its list starts (even if every waiter on it went since).
  if (k.waiting.empty()) ++waiting_keys_;
  std::erase_if(k.waiting, [](const auto& w) { return w.expired(); });
  k.waiting.push_back(waiter);
  return holder;
}

std::size_t LocalHolders::waiting_keys() const {
  std::lock_guard lock(mu_);
  return waiting_keys_;
}

void LocalHolders::release(const store::RecordId& id) {
  std::vector<std::weak_ptr<Waiter>> woken;
  {
    std::lock_guard lock(mu_);
    const auto at = keys_.find(id);
    if (at == keys_.end()) return;
    if (at->second.held > 0) --at->second.held;
    woken = settle(at);
  }
  wake_all(woken);
}

void LocalHolders::notify(const store::RecordId& id) {
  std::vector<std::weak_ptr<Waiter>> woken;
  {
    std::lock_guard lock(mu_);
    const auto at = keys_.find(id);
    if (at == keys_.end()) return;
    woken = settle(at);
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
