#pragma once
// The runtime as the server sees it: the phases' Runtime, and what only the server,
// its admin listener and the store's upkeep touch: the store in all its roles, the
// replay cache's and the completion retries' figures, readiness, reload, and the
// waits of the exit sequence.
#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "proxy/runtime.hpp"
#include "server/http_names.hpp"

namespace idemproxy::server {

class ServerRuntime : public proxy::Runtime {
 public:
  using Runtime::Runtime;

  using Runtime::cache;
  using Runtime::completions;
  using Runtime::leave_claims_to_leases;
  using Runtime::queued;
  using Runtime::queued_calls;
  using Runtime::record_store;
  using Runtime::replace_settings;
  using Runtime::wait_for_queued_calls;

  /// False until the store is prepared (migrations applied): the proxy starts, and
  /// keeps retrying, while PostgreSQL is still unreachable. /readyz reads it.
  std::atomic<bool> store_prepared{false};
  void set_store_problem(std::string detail) {
    std::lock_guard lock(problem_mu_);
    store_problem_ = std::move(detail);
  }
  std::string store_problem() const {
    std::lock_guard lock(problem_mu_);
    return store_problem_;
  }
  /// Reloads the config file (SIGHUP and POST /admin/reload); returns the error, if any.
  std::function<std::optional<std::string>()> reload;

 private:
  mutable std::mutex problem_mu_;
  std::string store_problem_ = "not prepared yet";
};

}  // namespace idemproxy::server
