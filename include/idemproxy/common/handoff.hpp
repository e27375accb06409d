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
#include <functional>
#include <utility>
#include <vector>

namespace idemproxy::common {

class Handoff {
 public:
  /// Delivers the answers deferred to one target, in the order they were deferred.
  using Deliver = void (*)(void* target, std::vector<std::function<void()>>& answers);

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
  void defer(void* target, Deliver deliver, std::function<void()> answer) {
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
    std::vector<std::function<void()>> answers;
  };
  inline static thread_local Handoff* current_ = nullptr;
  Handoff* outer_;
  std::vector<Group> groups_;
};

}  // namespace idemproxy::common
