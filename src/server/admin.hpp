#pragma once
// The admin listener: /healthz, /readyz, /metrics.
#include "server/http_names.hpp"
#include "server/server_runtime.hpp"

namespace idemproxy::server {

/// Serves one admin connection until it closes.
boost::asio::awaitable<void> serve_admin(boost::asio::ip::tcp::socket socket, ServerRuntime& rt);

/// Accepts admin connections, each on a strand of `io`, until `acceptor` closes.
boost::asio::awaitable<void> accept_admin(boost::asio::io_context& io,
                                          boost::asio::ip::tcp::acceptor& acceptor,
                                          ServerRuntime& rt);

}  // namespace idemproxy::server
