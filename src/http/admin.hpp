#pragma once
// The admin listener: /healthz, /readyz, /metrics.
#include "http/runtime.hpp"

namespace idemproxy::ops {

/// Serves one admin connection until it closes.
boost::asio::awaitable<void> serve_admin(boost::asio::ip::tcp::socket socket, http::Runtime& rt);

}  // namespace idemproxy::ops
