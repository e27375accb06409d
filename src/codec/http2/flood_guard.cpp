#include "codec/http2/flood_guard.hpp"

namespace idemproxy::codec::http2 {

bool FloodGuard::on_inbound(const nghttp2_frame& frame) {
  const auto& hd = frame.hd;
  std::size_t padding = 0;
  switch (hd.type) {
    case NGHTTP2_HEADERS:
      padding = frame.headers.padlen;
      if ((hd.flags & NGHTTP2_FLAG_END_HEADERS) != 0) ++streams_;
      [[fallthrough]];
    case NGHTTP2_DATA:
      if (hd.type == NGHTTP2_DATA) padding = frame.data.padlen;
      // nghttp2's padlen counts the Pad Length field too.
      if (hd.length <= padding && (hd.flags & NGHTTP2_FLAG_END_STREAM) == 0) {
        ++empty_in_a_row_;
      } else {
        empty_in_a_row_ = 0;
      }
      break;
    case NGHTTP2_PRIORITY:
      ++priority_;
      break;
    case NGHTTP2_WINDOW_UPDATE:
      ++window_updates_;
      break;
    default:
      break;
  }
  if (empty_in_a_row_ > kMaxEmptyFrames) {
    why_ = "frames with an empty payload, back to back";
    return false;
  }
  if (priority_ > kMaxPriorityPerStream * (1 + streams_)) {
    why_ = "too many PRIORITY frames";
    return false;
  }
  if (window_updates_ > 1 + 2 * (streams_ + kMaxWindowUpdatesPerData * data_frames_sent_)) {
    why_ = "too many WINDOW_UPDATE frames";
    return false;
  }
  return true;
}

}  // namespace idemproxy::codec::http2
