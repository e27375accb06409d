#pragma once
// A text made once, at the first demand, by whichever thread asks first; the others
// wait for it and share it. A cached answer keeps one for the codec that sends it
// (http::PreparedAnswer::codec_form). Once made, a read is one atomic load (no
// std::call_once, which in libstdc++ sets thread-local state on every call).
#include <atomic>
#include <mutex>
#include <string>
#include <string_view>

namespace idemproxy {

class OnceString {
 public:
  /// The text `make()` returned at the first call; later calls do not call `make`.
  template <class Make>
  std::string_view get(Make&& make) const {
    if (!ready_.load(std::memory_order_acquire)) {
      std::lock_guard lock(mu_);
      if (!ready_.load(std::memory_order_relaxed)) {
        text_ = make();
        ready_.store(true, std::memory_order_release);
      }
    }
    return text_;
  }

 private:
  mutable std::mutex mu_;
  mutable std::atomic<bool> ready_{false};
  mutable std::string text_;
};

}  // namespace idemproxy
