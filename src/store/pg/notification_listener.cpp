#include "store/pg/purge_listener.hpp"

#include <spdlog/spdlog.h>

#include <pqxx/pqxx>

namespace idemproxy::store::pg {

void PurgeListener::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

void PurgeListener::start(std::function<void(const RecordId&)> fn) {
  stop();
  stopping_ = false;
  thread_ = std::thread([this, fn = std::move(fn)] {
    struct Receiver final : pqxx::notification_receiver {
      Receiver(pqxx::connection_base& c, std::function<void(const RecordId&)> f)
          : pqxx::notification_receiver(c, "idemproxy_purge"), fn(std::move(f)) {}
      // The payload is store::slot_key(id): scope '\n' key (statements.hpp, kPurge).
      void operator()(const std::string& payload, int) override {
        const auto nl = payload.find('\n');
        if (nl != std::string::npos) fn({payload.substr(0, nl), payload.substr(nl + 1)});
      }
      std::function<void(const RecordId&)> fn;
    };
    while (!stopping_) {
      try {
        pqxx::connection conn(dsn_);
        Receiver receiver(conn, fn);
        while (!stopping_) conn.await_notification(0, 200'000);
      } catch (const std::exception& e) {
        spdlog::warn("purge listener: {}; reconnecting", e.what());
        for (int i = 0; i < 10 && !stopping_; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds{100});
        }
      }
    }
  });
}

}  // namespace idemproxy::store::pg
