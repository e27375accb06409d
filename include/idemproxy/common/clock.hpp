#pragma once
// Time source shared by every layer (engine, stores, config), so expiry is testable.
#include <atomic>
#include <chrono>
#include <ctime>
#include <string>

namespace idemproxy {

using TimePoint = std::chrono::system_clock::time_point;
using Duration = std::chrono::milliseconds;

/// RFC 3339 in UTC to the second ("2026-11-25T16:15:02Z"), for messages.
inline std::string rfc3339(TimePoint t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  const auto n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return {text, n};
}

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
