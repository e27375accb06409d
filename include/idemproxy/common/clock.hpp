#pragma once
// Time source shared by every layer (engine, stores, config), so expiry is testable.
#include <atomic>
#include <chrono>

namespace idemproxy {

using TimePoint = std::chrono::system_clock::time_point;
using Duration = std::chrono::milliseconds;

/// Wall-clock time source.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
};

class SystemClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::system_clock::now(); }
};

/// A clock that moves only when told to; for unit tests.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimePoint start = TimePoint{std::chrono::seconds{1'700'000'000}})
      : now_(start.time_since_epoch().count()) {}
  TimePoint now() const override { return TimePoint{TimePoint::duration{now_.load()}}; }
  void advance(Duration d) { now_ += std::chrono::duration_cast<TimePoint::duration>(d).count(); }

 private:
  std::atomic<TimePoint::rep> now_;
};

}  // namespace idemproxy
