#pragma once
// One client connection, as the listener accepted it, before and while a codec
// serves it.
#include <atomic>
#include <memory>
#include <string>

#include "http/beast.hpp"
#include "http/exchange.hpp"
#include "http/stream.hpp"

namespace idemproxy::http {

struct ClientConnection {
  /// TLS when `tls` is given (tls.cert_file); the listener then starts with the handshake.
  ClientConnection(tcp::socket socket, ssl::context* tls)
      : stream(tls ? Stream(std::move(socket), *tls) : Stream(std::move(socket))) {
    peer.secure = tls != nullptr;
  }
  Stream stream;
  beast::flat_buffer buffer;
  Peer peer;
  std::atomic<bool> idle{true};        // waiting for its next request (drain may close it)
  std::atomic<bool> reclaimed{false};  // chosen to close for a new client at the limit
  /// The memory of the fields of this connection's requests and of the upstream's
  /// answers to them, kept from one request for the next (arena.hpp). Used on the
  /// connection's executor only.
  Arena arena;
  FieldsAllocator fields_allocator() { return FieldsAllocator{&arena}; }
  KeptStrings kept;
};

}  // namespace idemproxy::http
