#pragma once
// An HTTP/2 client for the session fuzz targets, on nghttp2 (its HTTP messaging rules
// on, as curl's and every nghttp2-based client's are): the bytes that open a
// connection with some requests, and what it reads of the answers in the bytes the
// proxy wrote back. A field nghttp2 refuses, or a frame it finds invalid, is noted
// (`refused`): the proxy sent what a client must treat as malformed.
#include <nghttp2/nghttp2.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace idemproxy::fuzz {

struct H2Request {
  std::string method, path;
  std::vector<std::pair<std::string, std::string>> fields;
  std::string body;
};

struct H2Answer {
  unsigned status = 0;  // the final one
  std::vector<std::pair<std::string, std::string>> fields;
  std::string body;
  bool ended = false;       // closed with NO_ERROR
  std::uint32_t reset = 0;  // the error code it closed with
  std::string refused;      // what nghttp2 refused in it, if anything

  std::string field(std::string_view name) const {
    for (const auto& [n, v] : fields) {
      if (n == name) return v;
    }
    return {};
  }
};

class H2Client {
 public:
  /// Opens a session and sends `requests` on it, as bytes (preface and SETTINGS first).
  std::string open(const std::vector<H2Request>& requests) {
    nghttp2_session_callbacks* cbs = nullptr;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame);
    nghttp2_session_callbacks_set_on_invalid_header_callback(cbs, on_invalid_header);
    nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cbs, on_invalid_frame);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
    nghttp2_session_client_new(&session_, cbs, this);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, nullptr, 0);
    bodies_.reserve(requests.size());
    for (const auto& r : requests) {
      std::vector<nghttp2_nv> nv;
      // nghttp2_submit_request copies the fields: views of what lives until then.
      const auto add = [&nv](std::string_view n, std::string_view v) {
        nv.push_back({const_cast<std::uint8_t*>(reinterpret_cast<const std::uint8_t*>(n.data())),
                      const_cast<std::uint8_t*>(reinterpret_cast<const std::uint8_t*>(v.data())),
                      n.size(), v.size(), NGHTTP2_NV_FLAG_NONE});
      };
      add(kMethod, r.method);
      add(kScheme, kHttp);
      add(kAuthority, kHost);
      add(kPath, r.path);
      for (const auto& [n, v] : r.fields) add(n, v);
      bodies_.push_back({r.body, 0});
      nghttp2_data_provider provider{};
      provider.source.ptr = &bodies_.back();
      provider.read_callback = read_body;
      const std::int32_t id = nghttp2_submit_request(session_, nullptr, nv.data(), nv.size(),
                                                     r.body.empty() ? nullptr : &provider, nullptr);
      ids_.push_back(id);
      answers_[id];
    }
    std::string out;
    for (;;) {
      const std::uint8_t* data = nullptr;
      const auto n = nghttp2_session_mem_send(session_, &data);
      if (n <= 0) break;
      out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
    }
    return out;
  }

  /// Reads what the proxy wrote; the answers, in the order of the requests.
  std::vector<H2Answer> read(std::string_view in) {
    nghttp2_session_mem_recv(session_, reinterpret_cast<const std::uint8_t*>(in.data()), in.size());
    std::vector<H2Answer> out;
    for (const auto id : ids_) out.push_back(answers_[id]);
    return out;
  }

  H2Client() = default;
  H2Client(const H2Client&) = delete;
  H2Client& operator=(const H2Client&) = delete;
  ~H2Client() { nghttp2_session_del(session_); }

 private:
  static constexpr const char* kMethod = ":method";
  static constexpr const char* kScheme = ":scheme";
  static constexpr const char* kAuthority = ":authority";
  static constexpr const char* kPath = ":path";
  static constexpr const char* kHttp = "http";
  static constexpr const char* kHost = "x";

  struct Body {
    std::string bytes;
    std::size_t sent;
  };

  static H2Client& self(void* user) { return *static_cast<H2Client*>(user); }

  static ssize_t read_body(nghttp2_session*, std::int32_t, std::uint8_t* buf, std::size_t room,
                           std::uint32_t* flags, nghttp2_data_source* source, void*) {
    auto& body = *static_cast<Body*>(source->ptr);
    const std::size_t n = std::min(room, body.bytes.size() - body.sent);
    std::copy_n(body.bytes.data() + body.sent, n, buf);
    body.sent += n;
    if (body.sent == body.bytes.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }

  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                       std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                       std::uint8_t, void* user) {
    const auto it = self(user).answers_.find(frame->hd.stream_id);
    if (it == self(user).answers_.end()) return 0;
    const std::string n(reinterpret_cast<const char*>(name), namelen);
    const std::string v(reinterpret_cast<const char*>(value), valuelen);
    // A head starts with :status (a final one after a 1xx comes as NGHTTP2_HCAT_HEADERS,
    // as trailers do); the fields of a block without one are trailers.
    auto& state = self(user).in_head_[frame->hd.stream_id];
    if (n == ":status") {
      it->second.status = static_cast<unsigned>(std::stoul(v));
      it->second.fields.clear();  // an interim answer's fields are not the final one's
      state = true;
    } else if (state) {
      it->second.fields.emplace_back(n, v);
    }
    return 0;
  }

  static int on_frame(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type == NGHTTP2_HEADERS) self(user).in_head_[frame->hd.stream_id] = false;
    return 0;
  }

  static int on_invalid_header(nghttp2_session*, const nghttp2_frame* frame,
                               const std::uint8_t* name, std::size_t namelen,
                               const std::uint8_t* value, std::size_t valuelen, std::uint8_t,
                               void* user) {
    auto& a = self(user).answers_[frame->hd.stream_id];
    a.refused += "field " + std::string(reinterpret_cast<const char*>(name), namelen) + ": " +
                 std::string(reinterpret_cast<const char*>(value), valuelen) + "; ";
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // as nghttp2 would without the callback
  }

  static int on_invalid_frame(nghttp2_session*, const nghttp2_frame* frame, int error, void* user) {
    auto& a = self(user).answers_[frame->hd.stream_id];
    a.refused += std::string("frame: ") + nghttp2_strerror(error) + "; ";
    return 0;
  }

  static int on_data(nghttp2_session*, std::uint8_t, std::int32_t id, const std::uint8_t* data,
                     std::size_t len, void* user) {
    const auto it = self(user).answers_.find(id);
    if (it != self(user).answers_.end()) {
      it->second.body.append(reinterpret_cast<const char*>(data), len);
    }
    return 0;
  }

  static int on_close(nghttp2_session*, std::int32_t id, std::uint32_t error, void* user) {
    const auto it = self(user).answers_.find(id);
    if (it == self(user).answers_.end()) return 0;
    it->second.ended = error == NGHTTP2_NO_ERROR;
    it->second.reset = error;
    return 0;
  }

  nghttp2_session* session_ = nullptr;
  std::vector<Body> bodies_;  // reserved by open() before a request points into it
  std::vector<std::int32_t> ids_;
  std::map<std::int32_t, H2Answer> answers_;
  std::map<std::int32_t, bool> in_head_;  // within a block that began with :status
};

}  // namespace idemproxy::fuzz
