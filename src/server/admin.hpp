#pragma once
// The admin listener: /healthz, /readyz, /metrics.
#include "proxy/runtime.hpp"

namespace idemproxy::http {

/// Serves one admin connection until it closes.
boost::asio::awaitable<void> serve_admin(boost::asio::ip::tcp::socket socket, Runtime& rt);

}  // namespace idemproxy::http
