#pragma once
// The open-files limit, and how many client connections it can carry.
#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>

#include "idemproxy/config/config.hpp"
#include "server/http_names.hpp"

namespace idemproxy::server {

/// Raises the soft RLIMIT_NOFILE to the hard limit and returns how many client
/// connections fit in it: each may hold an upstream connection too (pass-through),
/// and a reserve stays free for the database pool, pooled upstream connections, the
/// admin listener and the process's own files, so a new client is still served
/// when every connection is busy (a process out of descriptors leaves new clients
/// in the kernel's queue until they time out).
std::size_t connection_capacity(const config::Config& config);

/// At most one line a second for an event that can repeat thousands of times a
/// second (a connection flood); the count of the lines held back goes in the next.
class LogLimiter {
 public:
  /// Returns how many events the line being written stands for (0: write nothing).
  std::size_t admit();

 private:
  std::mutex mu_;
  std::chrono::steady_clock::time_point last_{};
  std::size_t held_ = 0;
};

}  // namespace idemproxy::server
