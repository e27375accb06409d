// The bridge between an HTTP/2 stream and the session that serves it. The session
// reads one HTTP/1.1 request from a local socket pair and writes its answer back,
// through the very phases an HTTP/1.1 client meets; here the stream's head and body
// become that request, and the answer becomes the stream's HEADERS and DATA.
// (Its cost, a socket pair and a second parse per stream, is issue 26's to remove.)
#include <spdlog/spdlog.h>

#include <array>

#include "http/h2_detail.hpp"
#include "http/headers.hpp"
#include "idemproxy/engine/grpc_status.hpp"

namespace idemproxy::http::h2 {
namespace {

// The fields a stored gRPC answer names in kTrailersField (upstream_pool.cpp),
// taken out of its head to go out as trailers.
std::vector<std::pair<std::string, std::string>> take_named_trailers(Fields& fields) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string names(fields[kTrailersField]);
  fields.erase(kTrailersField);
  std::string_view rest = names;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    auto name = rest.substr(0, comma);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (name.empty()) continue;
    for (auto it = fields.find(name); it != fields.end() && beast::iequals(it->name_string(), name);
         it = fields.find(name)) {
      out.emplace_back(std::string(name), std::string(it->value()));
      fields.erase(it);
    }
  }
  return out;
}

}  // namespace

std::string request_head(const Stream& s) {
  std::string head;
  head.reserve(256);
  head.append(s.method).append(" ").append(s.path).append(" HTTP/1.1\r\nhost: ");
  head.append(s.authority).append("\r\n");
  std::string cookie;
  for (const auto& [name, value] : s.fields) {
    // RFC 9113 §8.2.3: cookie crumbs are joined with "; " for HTTP/1.1. Host was
    // checked against :authority; te (only "trailers" in HTTP/2) is hop-by-hop.
    if (name == "host" || name == "te") continue;
    if (name == "cookie") {
      if (!cookie.empty()) cookie.append("; ");
      cookie.append(value);
      continue;
    }
    head.append(name).append(": ").append(value).append("\r\n");
  }
  if (!cookie.empty()) head.append("cookie: ").append(cookie).append("\r\n");
  // A body of unknown length (no content-length; RFC 9113 §8.1.1) travels chunked.
  if (s.has_body && !s.has_content_length) head.append("transfer-encoding: chunked\r\n");
  // One request per session: it closes after the answer, which ends the bridge.
  head.append("connection: close\r\n\r\n");
  return head;
}

asio::awaitable<void> feed(std::shared_ptr<Connection> c, std::shared_ptr<Stream> s) {
  const bool chunked = s->has_body && !s->has_content_length;
  std::string pending = request_head(*s);
  for (;;) {
    while (!s->closed && s->body.empty() && !s->body_end && pending.empty()) {
      co_await s->body_ready.wait();
    }
    if (s->closed) co_return;
    std::size_t taken = 0;
    if (!s->body.empty()) {
      taken = s->body.size();
      if (chunked) {
        append_chunk(pending, s->body);
      } else {
        pending.append(s->body);
      }
      s->body.clear();
    }
    const bool last = s->body_end && s->body.empty();
    if (last && chunked) pending.append("0\r\n\r\n");
    if (!pending.empty()) {
      auto [ec, n] = co_await asio::async_write(*s->pipe, asio::buffer(pending), use_nothrow);
      if (ec) {
        // The session stopped reading (it answered early, or the stream closed):
        // what the client still sends is discarded, its window given back.
        if (!s->closed) {
          s->sink_gone = true;
          c->consumed(*s, taken + s->body.size());
          s->body.clear();
        }
        co_return;
      }
      pending.clear();
      c->consumed(*s, taken);
    }
    if (last) co_return;
  }
}

asio::awaitable<void> answer(std::shared_ptr<Connection> c, std::shared_ptr<Stream> s) {
  beast::flat_buffer buffer;
  std::array<char, std::size_t{16} * 1024> scratch;
  for (;;) {
    ResponseParser<bhttp::buffer_body> parser;
    parser.header_limit(1 << 20);
    parser.body_limit(boost::none);
    if (s->method == "HEAD") parser.skip(true);
    auto [ec, n] = co_await bhttp::async_read_header(*s->pipe, buffer, parser, use_nothrow);
    if (ec) {
      // The session ended without an answer: it saw the stream go, or failed.
      if (!s->closed) c->reset(*s, NGHTTP2_INTERNAL_ERROR);
      co_return;
    }
    const auto& head = parser.get();
    const unsigned status = head.result_int();
    if (status / 100 == 1) {
      if (status != 101) c->submit_head(*s, status, head.base(), false, false);
      continue;
    }
    const auto head_fields = static_cast<std::size_t>(std::distance(head.begin(), head.end()));
    std::size_t got = 0;  // body bytes read before the head goes out
    const auto read_some = [&]() -> asio::awaitable<bool> {
      parser.get().body().data = scratch.data();
      parser.get().body().size = scratch.size();
      auto [rec, n] = co_await bhttp::async_read_some(*s->pipe, buffer, parser, use_nothrow);
      got = scratch.size() - parser.get().body().size;
      co_return !rec || rec == bhttp::error::need_buffer;
    };
    std::vector<std::pair<std::string, std::string>> trailers;
    if (engine::is_grpc_content_type(head[bhttp::field::content_type])) {
      // A gRPC answer that is only a status ("trailers-only" in gRPC's HTTP/2
      // protocol) must be one HEADERS frame that ends the stream: the head waits for
      // the first body byte or the end.
      while (!parser.is_done() && got == 0) {
        if (!co_await read_some()) {
          c->reset(*s, NGHTTP2_INTERNAL_ERROR);
          co_return;
        }
      }
      // A stored answer names its trailers; they go out as trailers again, after a
      // head that carries idempotent-replayed, even when the upstream sent them
      // trailers-only.
      trailers = take_named_trailers(parser.get().base());
      if (parser.is_done() && got == 0 && trailers.empty()) {
        c->submit_head(*s, status, head.base(), true, false);  // the trailers are in it
        co_return;
      }
    }
    c->submit_head(*s, status, head.base(), true,
                   got > 0 || !parser.is_done() || !trailers.empty());
    for (;;) {
      if (got > 0) {
        s->out.append(scratch.data(), got);
        got = 0;
        c->answer_more(*s);
      }
      if (parser.is_done()) break;
      while (!s->closed && s->out.size() - s->out_at > kOutHighWater) co_await s->room.wait();
      if (s->closed) co_return;
      if (!co_await read_some()) {
        // The answer broke off (the upstream failed mid-body): the client must not
        // take a truncated body for a whole one.
        c->reset(*s, NGHTTP2_INTERNAL_ERROR);
        co_return;
      }
      if (s->closed) co_return;
    }
    for (auto& t : trailers_after(parser.get(), head_fields)) trailers.push_back(std::move(t));
    s->trailers = std::move(trailers);
    s->out_end = true;
    c->answer_more(*s);
    co_return;
  }
}

}  // namespace idemproxy::http::h2
