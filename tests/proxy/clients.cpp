// The test world's clients: HTTP/1.1 through Beast, HTTP/2 through nghttp2's client
// session, each on a connection of its own.
#include <nghttp2/nghttp2.h>

#include <cstring>

#include "world.hpp"

namespace idemproxy::testing {
namespace {

bool has_field(const Request& r, std::string_view name) {
  for (const auto& [n, v] : r.fields) {
    if (beast::iequals(n, name)) return true;
  }
  return false;
}

}  // namespace

asio::awaitable<Reply> http1_request(tcp::endpoint to, const Request& request) {
  Reply reply;
  tcp::socket socket(co_await asio::this_coro::executor);
  auto [cec] = co_await socket.async_connect(to, use_nothrow);
  if (cec) {
    reply.closed = true;
    co_return reply;
  }
  std::string out = request.method + " " + request.path + " HTTP/1.1\r\n";
  if (!has_field(request, "host")) out += "Host: test.example\r\n";
  for (const auto& [name, value] : request.fields) out += name + ": " + value + "\r\n";
  if (!has_field(request, "content-length") && !has_field(request, "transfer-encoding") &&
      (!request.body.empty() || request.method == "POST")) {
    out += "Content-Length: " + std::to_string(request.body.size()) + "\r\n";
  }
  out += "\r\n" + request.body;
  auto [wec, w] = co_await asio::async_write(socket, asio::buffer(out), use_nothrow);
  if (wec) {
    reply.closed = true;
    co_return reply;
  }
  beast::flat_buffer buffer;
  for (;;) {
    bhttp::response_parser<bhttp::string_body> p;
    p.body_limit(boost::none);
    if (request.method == "HEAD") p.skip(true);
    auto [hec, hn] = co_await bhttp::async_read_header(socket, buffer, p, use_nothrow);
    if (hec) {
      reply.closed = true;
      co_return reply;
    }
    if (p.get().result_int() / 100 == 1) {
      reply.interim.push_back(p.get().result_int());
      continue;
    }
    const auto head_fields = std::distance(p.get().begin(), p.get().end());
    auto [bec, bn] = co_await bhttp::async_read(socket, buffer, p, use_nothrow);
    if (bec) {
      reply.closed = true;
      co_return reply;
    }
    const auto& res = p.get();
    reply.status = res.result_int();
    std::ptrdiff_t at = 0;
    for (const auto& f : res) {
      auto& into = at++ < head_fields ? reply.fields : reply.trailers;
      into.emplace_back(std::string(f.name_string()), std::string(f.value()));
    }
    reply.body = res.body();
    co_return reply;
  }
}

namespace {

// One HTTP/2 request on its own connection, driven by nghttp2's client session.
struct H2Call {
  Reply reply;
  const Request* request = nullptr;
  std::string_view body;
  std::size_t frame = 0;  // index into data_frames
  std::int32_t id = -1;
  bool done = false;
  bool in_trailers = false;
};

int on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
              std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
              std::uint8_t flags, void* user) {
  auto& call = *static_cast<H2Call*>(user);
  if (frame->hd.stream_id != call.id) return 0;
  const std::string n(reinterpret_cast<const char*>(name), namelen);
  const std::string v(reinterpret_cast<const char*>(value), valuelen);
  if ((flags & NGHTTP2_NV_FLAG_NO_INDEX) != 0) call.reply.never_indexed.push_back(n);
  if (n == ":status") {
    const unsigned status = static_cast<unsigned>(std::stoi(v));
    if (status / 100 == 1) {
      call.reply.interim.push_back(status);
    } else {
      call.reply.status = status;
    }
    return 0;
  }
  (call.in_trailers ? call.reply.trailers : call.reply.fields).emplace_back(n, v);
  return 0;
}

int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto& call = *static_cast<H2Call*>(user);
  // A HEADERS block after the final head is the trailers.
  call.in_trailers = call.reply.status != 0 && frame->hd.stream_id == call.id;
  return 0;
}

int on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto& call = *static_cast<H2Call*>(user);
  if (frame->hd.stream_id == call.id && frame->hd.type == NGHTTP2_HEADERS && !call.in_trailers &&
      call.reply.status / 100 != 1 && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
    call.reply.head_ended = true;
  }
  return 0;
}

int on_data(nghttp2_session*, std::uint8_t, std::int32_t id, const std::uint8_t* data,
            std::size_t size, void* user) {
  auto& call = *static_cast<H2Call*>(user);
  if (id == call.id) call.reply.body.append(reinterpret_cast<const char*>(data), size);
  return 0;
}

int on_close(nghttp2_session*, std::int32_t id, std::uint32_t code, void* user) {
  auto& call = *static_cast<H2Call*>(user);
  if (id != call.id) return 0;
  if (code != NGHTTP2_NO_ERROR || call.reply.status == 0) {
    call.reply.reset = true;
    call.reply.reset_code = code;
  }
  call.done = true;
  return 0;
}

ssize_t read_body(nghttp2_session*, std::int32_t, std::uint8_t* buf, std::size_t length,
                  std::uint32_t* flags, nghttp2_data_source*, void* user) {
  auto& call = *static_cast<H2Call*>(user);
  const auto& frames = call.request->data_frames;
  std::size_t n = std::min(length, call.body.size());
  if (!frames.empty()) n = std::min(n, call.frame < frames.size() ? frames[call.frame] : 0);
  std::memcpy(buf, call.body.data(), n);
  call.body.remove_prefix(n);
  ++call.frame;
  const bool last = frames.empty() ? call.body.empty() : call.frame >= frames.size();
  if (last) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return static_cast<ssize_t>(n);
}

}  // namespace

asio::awaitable<Reply> http2_request(tcp::endpoint to, const Request& request) {
  H2Call call;
  call.request = &request;
  call.body = request.body;
  tcp::socket socket(co_await asio::this_coro::executor);
  auto [cec] = co_await socket.async_connect(to, use_nothrow);
  if (cec) {
    call.reply.closed = true;
    co_return call.reply;
  }
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
  nghttp2_session* session = nullptr;
  nghttp2_session_client_new(&session, cbs, &call);
  nghttp2_session_callbacks_del(cbs);
  nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, nullptr, 0);
  std::vector<Field> fields;
  const auto given = [&](std::string_view name) { return has_field(request, name); };
  if (!given(":method")) fields.emplace_back(":method", request.method);
  if (!given(":scheme")) fields.emplace_back(":scheme", "http");
  if (!given(":authority")) fields.emplace_back(":authority", "test.example");
  if (!given(":path")) fields.emplace_back(":path", request.path);
  for (const auto& f : request.fields) {
    if (f.first.starts_with(':')) fields.insert(fields.begin(), f);
  }
  for (const auto& f : request.fields) {
    if (!f.first.starts_with(':')) fields.push_back(f);
  }
  if (!given("content-length") && !request.body.empty() && request.data_frames.empty()) {
    fields.emplace_back("content-length", std::to_string(request.body.size()));
  }
  std::vector<nghttp2_nv> nva;
  for (auto& [n, v] : fields) {
    nva.push_back({reinterpret_cast<std::uint8_t*>(n.data()),
                   reinterpret_cast<std::uint8_t*>(v.data()), n.size(), v.size(),
                   NGHTTP2_NV_FLAG_NONE});
  }
  nghttp2_data_provider provider{};
  provider.read_callback = read_body;
  const bool with_body = !request.body.empty() || !request.data_frames.empty();
  call.id = nghttp2_submit_request(session, nullptr, nva.data(), nva.size(),
                                   with_body ? &provider : nullptr, nullptr);
  std::array<char, 16384> in;
  while (!call.done) {
    std::string out;
    for (;;) {
      const std::uint8_t* data = nullptr;
      const auto n = nghttp2_session_mem_send(session, &data);
      if (n <= 0) break;
      out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
    }
    if (!out.empty()) {
      auto [wec, w] = co_await asio::async_write(socket, asio::buffer(out), use_nothrow);
      if (wec) break;
    }
    if (call.done) break;  // sending END_STREAM after the answer's closed the stream
    auto [rec, n] = co_await socket.async_read_some(asio::buffer(in), use_nothrow);
    if (rec) break;
    if (nghttp2_session_mem_recv(session, reinterpret_cast<const std::uint8_t*>(in.data()), n) <
        0) {
      break;
    }
  }
  if (!call.done) call.reply.closed = true;
  nghttp2_session_del(session);
  co_return call.reply;
}

}  // namespace idemproxy::testing
