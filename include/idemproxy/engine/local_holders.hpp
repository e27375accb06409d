#pragma once
// Which keys this process is executing, and who waits for them (on_concurrent: wait).
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "idemproxy/store/record.hpp"

namespace idemproxy::engine {

/// A request asleep until the key it waits for is released. The transport decides
/// how it sleeps (an Asio timer in http/); wake() may be called from any thread.
class Waiter {
 public:
  virtual ~Waiter() = default;
  virtual void wake() = 0;
};

/// Who holds a key a request found in flight, as this process knows it.
enum class Holder {
  elsewhere,  // not this process: another instance, or nothing this process knows of
  here,       // this process executes it
  claiming,   // this process has a claim of it on its way to the store
};

/// Requests waiting for a key held by this process sleep until it finishes, without
/// touching the database; keys held by other instances are re-checked on a backoff.
///
/// A claim of this process still on its way back from the store counts too: the
/// store may answer a loser before the winner, when their statements ran on two
/// connections (two batches of one lane, or claims run alone). The loser then sleeps
/// until every claim of the key here has its verdict: kept asleep until release() if
/// one of them executes, woken at once if none does (the key is held elsewhere).
class LocalHolders {
 public:
  /// A claim of `id` is sent to the store; claimed() follows with its verdict.
  void claiming(const store::RecordId& id);
  /// That claim's verdict is in: `executes`, this process now holds `id`. When no
  /// claim of `id` is left on its way and nothing here holds it, the waiters add()
  /// kept are woken.
  void claimed(const store::RecordId& id, bool executes);
  /// It finished (or gave up): wakes every request waiting for `id`.
  void release(const store::RecordId& id);
  /// Wakes every request waiting for `id` (a background completion landed).
  void notify(const store::RecordId& id);
  /// Registers a waiter when this process holds `id` (here), or has a claim of it on
  /// its way (claiming): the waiter sleeps until release(), or until claimed() finds
  /// no holder, instead of polling. (One lock: a release cannot slip between.) For a
  /// key held elsewhere, nothing is kept.
  Holder add(const store::RecordId& id, const std::shared_ptr<Waiter>& waiter);

  /// Requests here waiting for a key another instance executes: woken by
  /// notify_remote (the store announced its finish), removed by remove_remote.
  void add_remote(const store::RecordId& id, const std::shared_ptr<Waiter>& waiter);
  void remove_remote(const store::RecordId& id, const Waiter* waiter);
  void notify_remote(const store::RecordId& id);
  /// Wakes every request waiting for a key held elsewhere.
  void notify_all_remote();
  /// Keys with registered waiters (entries must not outlive their holder).
  std::size_t waiting_keys() const;

 private:
  /// What this process knows of one key it claims or holds: its claims on their way
  /// to the store, its holders here, and the requests asleep until it is released.
  struct Key {
    int claiming = 0;
    int held = 0;
    std::vector<std::weak_ptr<Waiter>> waiting;
  };
  /// Keyed by slot key (store::slot_key), searched by RecordId in place: a fresh key
  /// makes its slot key once, when its claim is sent, and the same node carries it to
  /// its release: 2 heap calls per fresh key, where making the key in each call took
  /// 12 (steady_state_test.cpp), and one lookup per call, where a map for each role
  /// took seven a key.
  template <class T>
  using Slots = std::unordered_map<std::string, T, store::SlotHash, store::SlotEqual>;
  /// The entry of `id` in `slots`, made (value-initialised) when there is none.
  template <class T>
  static T& slot(Slots<T>& slots, const store::RecordId& id) {
    auto at = slots.find(id);
    if (at == slots.end()) at = slots.try_emplace(store::slot_key(id)).first;
    return at->second;
  }
  /// Takes the waiters of `at` out (under mu_), to be woken once the lock goes, and
  /// drops the key once no claim of it is on its way and nothing here holds it.
  std::vector<std::weak_ptr<Waiter>> settle(Slots<Key>::iterator at);

  mutable std::mutex mu_;
  Slots<Key> keys_;               // claimed or held here
  std::size_t waiting_keys_ = 0;  // keys_ with waiters
  Slots<std::vector<std::weak_ptr<Waiter>>> remote_;
};

}  // namespace idemproxy::engine
