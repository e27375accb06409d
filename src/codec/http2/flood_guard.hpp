#pragma once
// Limits on what a peer may make an HTTP/2 connection do, as Envoy sets them
// (source/common/http/http2/protocol_constraints.cc), on top of nghttp2's own
// (max_outbound_ack, max_settings, stream_reset_rate_limit, max_continuations).
#include <nghttp2/nghttp2.h>

#include <cstddef>
#include <cstdint>

#include "codec/http_names.hpp"

namespace idemproxy::codec::http2 {

class FloodGuard {
 public:
  /// Frames waiting to be written while the peer does not read: at most 10,000, and
  /// 1,000 of them not DATA (nghttp2's outbound queue holds control frames and
  /// HEADERS; DATA stays with its stream until it can go).
  static constexpr std::size_t kMaxOutboundFrames = 10000;
  static constexpr std::size_t kMaxOutboundControlFrames = 1000;
  /// Frames with an empty payload and no END_STREAM, back to back: at most 1.
  static constexpr std::size_t kMaxEmptyFrames = 1;
  /// PRIORITY frames: at most 100 per stream opened (and 100 before any).
  static constexpr std::uint64_t kMaxPriorityPerStream = 100;
  /// WINDOW_UPDATE frames: at most 1 + 2 * (streams + 10 * DATA frames sent).
  static constexpr std::uint64_t kMaxWindowUpdatesPerData = 10;

  /// An inbound frame, as nghttp2 received it; false once a limit is passed.
  bool on_inbound(const nghttp2_frame& frame);
  /// A frame was serialized for sending.
  void on_outbound(const nghttp2_frame& frame) {
    ++buffered_;
    if (frame.hd.type == NGHTTP2_DATA) ++data_frames_sent_;
  }
  /// The frames serialized so far reached the socket.
  void flushed() { buffered_ = 0; }
  /// Whether the frames waiting to go (`queued`: nghttp2's outbound queue) pass a limit.
  bool outbound_flood(std::size_t queued) const {
    return queued > kMaxOutboundControlFrames || queued + buffered_ > kMaxOutboundFrames;
  }
  /// What the first limit passed was, for the log.
  const char* why() const { return why_; }

 private:
  std::uint64_t streams_ = 0;
  std::size_t empty_in_a_row_ = 0;
  std::uint64_t priority_ = 0;
  std::uint64_t window_updates_ = 0;
  std::uint64_t data_frames_sent_ = 0;
  std::size_t buffered_ = 0;
  const char* why_ = "";
};

}  // namespace idemproxy::codec::http2
