#include "store/pg/notification_listener.hpp"

#include <spdlog/spdlog.h>

#include <pqxx/pqxx>

#include "store/pg/statements.hpp"

namespace idemproxy::store::pg {

void NotificationListener::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

void NotificationListener::start(Watches::Watchers watchers) {
  stop();
  stopping_ = false;
  thread_ = std::thread([this, watchers = std::move(watchers)] {
    struct Receiver final : pqxx::notification_receiver {
      Receiver(pqxx::connection_base& c, const std::string& channel,
               std::function<void(const RecordId&)> f)
          : pqxx::notification_receiver(c, channel), fn(std::move(f)) {}
      // The payload is store::slot_key(id): scope '\n' key (statements.hpp).
      void operator()(const std::string& payload, int) override {
        const auto nl = payload.find('\n');
        if (fn && nl != std::string::npos) fn({payload.substr(0, nl), payload.substr(nl + 1)});
      }
      std::function<void(const RecordId&)> fn;
    };
    bool lost = false;
    while (!stopping_) {
      try {
        pqxx::connection conn(dsn_);
        conn.set_variable("application_name", "'idemproxy listener'");
        Receiver purged(conn, kPurgeChannel, watchers.purged);
        Receiver finished(conn, kDoneChannel, watchers.finished);
        Receiver watched(conn, kWatchChannel, watchers.watched);
        if (lost) spdlog::info("notification listener: reconnected");
        lost = false;
        // Listening now; whatever finished before (or while the connection was
        // down) was not heard: waiters look again.
        if (watchers.resumed) watchers.resumed();
        while (!stopping_) conn.await_notification(0, 200'000);
      } catch (const std::exception& e) {
        // Meanwhile waiters fall back to re-checking on a backoff (idempotent_flow.cpp).
        if (!lost) spdlog::warn("notification listener: {}; reconnecting", e.what());
        lost = true;
        for (int i = 0; i < 10 && !stopping_; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds{100});
        }
      }
    }
  });
}

}  // namespace idemproxy::store::pg
