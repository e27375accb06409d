#pragma once
// The nghttp2 callbacks that both directions of HTTP/2 take, written once: each hands
// what nghttp2 read or sent to the object registered as the session's user data, the
// client-facing Connection or an upstream's link.
#include <nghttp2/nghttp2.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "codec/http_names.hpp"

namespace idemproxy::codec::http2 {

/// Sets on `cbs` the callbacks for a header field, a frame received, a frame sent, a
/// DATA payload and a stream's close. Each calls the member of Peer with the same
/// name: on_header(frame, name, value), on_frame_recv(frame), on_frame_send(frame),
/// on_data(stream id, data, size) and on_stream_close(stream id, error code).
template <class Peer>
void set_peer_callbacks(nghttp2_session_callbacks* cbs) {
  nghttp2_session_callbacks_set_on_header_callback(
      cbs, [](nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
              std::size_t namelen, const std::uint8_t* value, std::size_t valuelen, std::uint8_t,
              void* user) {
        return static_cast<Peer*>(user)->on_header(
            *frame, std::string_view(reinterpret_cast<const char*>(name), namelen),
            std::string_view(reinterpret_cast<const char*>(value), valuelen));
      });
  nghttp2_session_callbacks_set_on_frame_recv_callback(
      cbs, [](nghttp2_session*, const nghttp2_frame* frame, void* user) {
        return static_cast<Peer*>(user)->on_frame_recv(*frame);
      });
  nghttp2_session_callbacks_set_on_frame_send_callback(
      cbs, [](nghttp2_session*, const nghttp2_frame* frame, void* user) {
        return static_cast<Peer*>(user)->on_frame_send(*frame);
      });
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
      cbs, [](nghttp2_session*, std::uint8_t, std::int32_t id, const std::uint8_t* data,
              std::size_t size,
              void* user) { return static_cast<Peer*>(user)->on_data(id, data, size); });
  nghttp2_session_callbacks_set_on_stream_close_callback(
      cbs, [](nghttp2_session*, std::int32_t id, std::uint32_t code, void* user) {
        return static_cast<Peer*>(user)->on_stream_close(id, code);
      });
}

}  // namespace idemproxy::codec::http2
