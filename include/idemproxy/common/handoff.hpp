#pragma once
// Answers handed over in bulk. A thread that finishes many callers' calls at once (a
// group-commit batch, src/store/pg/group_commit.cpp) opens a Handoff around handing
// out their answers. A caller whose answer would wake another thread's event loop
// (the proxy's Runtime::queued) defers it to the open handoff instead, and the
// handoff delivers each target's answers together when it closes: one post, one
// wake-up and one lock of the loop's queue per batch, where each member took its own
// (bench/results/HISTORY.md, "One hand-off per batch").
//
// Neither side knows the other: the store knows no event loop, and the proxy no
// batch. Without an open handoff, a caller delivers its answer at once, as before.
#include <memory>
#include <utility>
#include <vector>

namespace idemproxy::common {

/// An answer kept for a later delivery: run once, or dropped if the delivery never
/// runs it (the block it names is then freed all the same). Two words and no block
/// of its own: the caller's block is the answer (Runtime::queued keeps its waiting
/// coroutine in one).
class Deferred {
 public:
  /// Runs (`run`) or drops the answer at `p`, and frees it either way.
  using Fn = void (*)(void* p, bool run);
  Deferred(void* p, Fn fn) : p_(p), fn_(fn) {}
  /// An answer of any callable, kept in a block of its own.
  template <class F>
  static Deferred of(F f) {
    return Deferred(new F(std::move(f)), [](void* p, bool run) {
      const std::unique_ptr<F> own(static_cast<F*>(p));
      if (run) (*own)();
    });
  }
  Deferred(Deferred&& o) noexcept : p_(std::exchange(o.p_, nullptr)), fn_(o.fn_) {}
  Deferred& operator=(Deferred&& o) noexcept {
    if (this != &o) {
      drop();
      p_ = std::exchange(o.p_, nullptr);
      fn_ = o.fn_;
    }
    return *this;
  }
  Deferred(const Deferred&) = delete;
  Deferred& operator=(const Deferred&) = delete;
  ~Deferred() { drop(); }
  /// Runs the answer; a second call does nothing.
  void operator()() {
    if (void* p = std::exchange(p_, nullptr)) fn_(p, true);
  }

 private:
  void drop() {
    if (void* p = std::exchange(p_, nullptr)) fn_(p, false);
  }
  void* p_;
  Fn fn_;
};

class Handoff {
 public:
  /// Delivers the answers deferred to one target, in the order they were deferred.
  using Deliver = void (*)(void* target, std::vector<Deferred>& answers);

  Handoff() : outer_(std::exchange(current_, this)) {}
  /// Delivers what close() has not; an exception from a delivery goes nowhere here.
  ~Handoff() {
    try {
      close();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
    }
    current_ = outer_;
  }
  Handoff(const Handoff&) = delete;
  Handoff& operator=(const Handoff&) = delete;
  Handoff(Handoff&&) = delete;
  Handoff& operator=(Handoff&&) = delete;

  /// The handoff open on this thread, or null.
  static Handoff* current() { return current_; }

  /// Keeps `answer` for `target`'s delivery; the first answer for a target names
  /// how it is delivered.
  void defer(void* target, Deliver deliver, Deferred answer) {
    for (Group& g : groups_) {
      if (g.target == target) {
        g.answers.push_back(std::move(answer));
        return;
      }
    }
    groups_.push_back(Group{target, deliver, {}});
    groups_.back().answers.push_back(std::move(answer));
  }

  /// Delivers every target's answers now, each target once. The handoff stays open
  /// for more.
  void close() {
    auto groups = std::exchange(groups_, {});
    for (Group& g : groups) g.deliver(g.target, g.answers);
  }

 private:
  struct Group {
    void* target;
    Deliver deliver;
    std::vector<Deferred> answers;
  };
  inline static thread_local Handoff* current_ = nullptr;
  Handoff* outer_;
  std::vector<Group> groups_;
};

}  // namespace idemproxy::common
