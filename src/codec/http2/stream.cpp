// A stream's request side: its head and fields as nghttp2 decodes them, the RFC 9113
// request rules, and its body, read with flow control.
#include "codec/http2/stream.hpp"

#include <charconv>
#include <cstdio>

#include "codec/http2/connection.hpp"
#include "http/fields.hpp"
#include "http/request_target.hpp"

namespace idemproxy::codec::http2 {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Stream::Stream(Connection& conn, const asio::any_io_executor& ex)
    : conn_(conn), head_storage_(conn.client().fields_allocator()), body_ready_(ex), progress_(ex) {
  head_ = &head_storage_;
  facts_.peer = &conn.client().peer;
  kept_ = &kept_storage_;
  facts_.protocol = Protocol::http2;
}

FieldsAllocator Stream::fields_allocator() { return conn_.client().fields_allocator(); }

void Stream::open(std::int32_t id, std::shared_ptr<const Settings> settings) {
  id_ = id;
  facts_.settings = std::move(settings);
  facts_.started = Clock::now();
  static_cast<Fields&>(head_storage_).clear();
  head_storage_.version(20);
  facts_.head_error.reset();
  facts_.content_length.reset();
  facts_.has_body = false;
  answered_ = false;
  authority_.clear();
  scheme_.clear();
  path_.clear();
  header_bytes_ = field_count_ = cookies_ = 0;
  saw_host_ = saw_expect_ = head_request_ = expects_continue_ = over_limit_ = false;
  in_[0].clear();
  in_[1].clear();
  fill_ = view_ = 0;
  received_ = consumed_ = delivered_ = 0;
  limit_ = std::numeric_limits<std::uint64_t>::max();
  end_stream_ = discarding_ = false;
  nv_.clear();
  head_pending_ = submitted_ = deferred_ = false;
  out_ = {};
  out_at_ = 0;
  out_last_ = eof_taken_ = false;
  out_trailers_ = false;
  handed_at_ = {};
  in_flight_ = 0;
  stalled_since_ = answered_early_at_ = {};
  close_code_ = 0;
  closed_ = false;
  serving_ = true;
}

void Stream::on_field(std::string_view name, std::string_view value, bool trailers) {
  const auto& server = conn_.settings().config.server;
  // As SETTINGS_MAX_HEADER_LIST_SIZE counts them (RFC 9113 §6.5.2). Past a limit the
  // head is answered 431 (HPACK can expand a small frame into a large list); the
  // fields past it are counted, never kept.
  header_bytes_ += name.size() + value.size() + 32;
  ++field_count_;
  if (trailers) return;  // a request's trailers are dropped (RFC 9110 6.5.1)
  if (header_bytes_ > server.max_header_size || field_count_ > server.max_header_fields) {
    // Only content-type is kept, and one value of it: a gRPC client is refused with a
    // gRPC status.
    if (!over_limit_) {
      over_limit_ = true;
      const std::string content_type(head_storage_[bhttp::field::content_type]);
      static_cast<Fields&>(head_storage_).clear();
      if (!content_type.empty()) head_storage_.set(bhttp::field::content_type, content_type);
    }
    if (name == "content-type") head_storage_.set(bhttp::field::content_type, value);
    return;
  }
  if (!name.empty() && name.front() == ':') {
    // nghttp2 has checked the set of pseudo-fields and their order (RFC 9113 §8.3).
    if (name == ":method") {
      head_storage_.method_string(value);
    } else if (name == ":path") {
      path_.assign(value);
    } else if (name == ":authority") {
      authority_.assign(value);
    } else if (name == ":scheme") {
      scheme_.assign(value);
    }
    return;
  }
  // What on_head_end() reads of the fields, read as they come rather than searched
  // for in the field tree after: the first value of each, as head[name] would give.
  if (name == "host") {
    saw_host_ = true;
  } else if (name == "cookie") {
    ++cookies_;
  } else if (name == "content-length") {
    if (!facts_.content_length) {
      std::uint64_t n = 0;  // nghttp2 has checked it is a number, and the only one
      std::from_chars(value.data(), value.data() + value.size(), n);
      facts_.content_length = n;
    }
  } else if (name == "expect" && !std::exchange(saw_expect_, true)) {
    expects_continue_ = beast::iequals(value, "100-continue");
  }
  head_storage_.insert(name, value);
}

void Stream::on_head_end(bool end_stream) {
  const auto& server = conn_.settings().config.server;
  facts_.has_body = !end_stream;
  end_stream_ = end_stream;
  const auto bad = [&](std::string detail) {
    facts_.head_error = HeadError{HeadError::Kind::malformed, std::move(detail)};
  };
  if (header_bytes_ > server.max_header_size || field_count_ > server.max_header_fields) {
    facts_.content_length.reset();  // a head refused says nothing of a body
    facts_.head_error = HeadError{HeadError::Kind::too_large,
                                  field_count_ > server.max_header_fields
                                      ? "more than " + std::to_string(server.max_header_fields) +
                                            " header fields (server.max_header_fields)"
                                      : "the header list exceeds server.max_header_size (" +
                                            std::to_string(server.max_header_size) + " bytes)"};
    return;
  }
  auto& head = head_storage_;
  head_request_ = head.method() == bhttp::verb::head;
  const std::string_view host = saw_host_ ? std::string_view(head[bhttp::field::host]) : "";
  // RFC 9113 §8.3.1: every request but CONNECT carries :scheme and :path; :path is
  // origin-form (or "*" for OPTIONS), never an absolute URI that would name another
  // authority than :authority. RFC 9113 §8.3.1 also says a Host that differs from
  // :authority makes the request malformed.
  if (head.method() == bhttp::verb::connect) {
    bad("CONNECT is not served");
  } else if (!beast::iequals(scheme_, "http") && !beast::iequals(scheme_, "https")) {
    bad(":scheme must be http or https");
  } else if (path_ == "*" ? head.method() != bhttp::verb::options : !path_.starts_with('/')) {
    bad(":path must be an absolute path (origin-form), or * for OPTIONS");
  } else if (authority_.empty() && host.empty()) {
    bad("the request has neither :authority nor Host");
  } else if (!authority_.empty() && saw_host_ && host != authority_) {
    bad("Host differs from :authority");
  } else if (!valid_authority(authority_.empty() ? host : std::string_view(authority_))) {
    bad(":authority is not a valid host");
  }
  if (facts_.head_error) {
    facts_.content_length.reset();
    return;
  }
  head.target(path_);
  if (!saw_host_) head.insert(bhttp::field::host, authority_);  // none to replace
  // RFC 9113 §8.2.3: cookie crumbs are one field again for HTTP/1.1.
  if (cookies_ > 1) {
    std::string joined;
    for (auto it = head.find(bhttp::field::cookie); it != head.end();
         it = head.find(bhttp::field::cookie)) {
      if (!joined.empty()) joined += "; ";
      joined.append(it->value());
      head.erase(it);
    }
    head.set(bhttp::field::cookie, joined);
  }
  expects_continue_ = expects_continue_ && facts_.has_body;
}

void Stream::on_data(const std::uint8_t* data, std::size_t size) {
  received_ += size;
  if (discarding_ || closed_) {
    give_back(size);
    return;
  }
  in_[fill_].append(reinterpret_cast<const char*>(data), size);
  body_ready_.notify();
}

void Stream::give_back(std::uint64_t size) {
  const auto n = std::min(size, received_ - consumed_);
  if (n == 0) return;
  consumed_ += n;
  // A closed stream's bytes still count against the connection's window.
  nghttp2_session_consume(conn_.session(), id_, static_cast<std::size_t>(n));
  conn_.wake_writer();
}

void Stream::on_end_stream() {
  end_stream_ = true;
  body_ready_.notify();
}

void Stream::on_close(std::uint32_t code) {
  closed_ = true;
  close_code_ = code;
  give_back(received_ - consumed_);
  body_ready_.notify();
  // wait_written ends once nothing is in flight; bytes in flight end with a flushed()
  // (the write loop calls it for every piece it took, written or not), which wakes it.
  if (in_flight_ == 0) progress_.notify();
}

void Stream::release_view() {
  if (view_ == 0) return;
  in_[1 - fill_].clear();
  give_back(view_);
  view_ = 0;
}

void Stream::drop_body() {
  discarding_ = true;
  release_view();
  give_back(in_[fill_].size());
  in_[fill_].clear();
  body_ready_.notify();
}

asio::awaitable<BodyPiece> Stream::read_body(std::size_t, std::optional<TimePoint> deadline) {
  release_view();
  const auto read_timeout = facts_.settings->config.server.read_timeout;
  for (;;) {
    if (discarding_) co_return BodyPiece{{}, false, BodyPiece::Error::gone};  // drop_body()
    if (closed_ && !end_stream_) {
      // Reset, or a stream error: nghttp2 resets a stream whose DATA disagrees with
      // its content-length (RFC 9113 §8.1.1), before that DATA is handed on.
      co_return BodyPiece{{},
                          false,
                          close_code_ == NGHTTP2_PROTOCOL_ERROR ? BodyPiece::Error::malformed
                                                                : BodyPiece::Error::gone};
    }
    const std::size_t ready = in_[fill_].size();
    // The last bytes of a declared length wait for END_STREAM: a body that goes on
    // past its content-length must not look whole to the upstream first.
    const bool held =
        facts_.content_length && delivered_ + ready == *facts_.content_length && !end_stream_;
    if ((ready > 0 && !held) || end_stream_) break;
    const auto by = Clock::now() + read_timeout;
    const auto until = deadline ? std::min(by, *deadline) : by;
    if (!co_await body_ready_.wait_until(until)) {
      co_return BodyPiece{{}, false, BodyPiece::Error::timeout};
    }
  }
  const std::size_t ready = in_[fill_].size();
  if (delivered_ + ready > limit_) co_return BodyPiece{{}, false, BodyPiece::Error::too_large};
  view_ = ready;
  delivered_ += ready;
  const std::string_view piece = in_[fill_];
  fill_ = 1 - fill_;
  co_return BodyPiece{piece, end_stream_ && in_[fill_].empty(), BodyPiece::Error::none};
}

// A body all here (END_STREAM came, as it mostly does with the HEADERS or right after)
// and none handed out yet, taken whole: its buffer becomes the body. Its window goes
// back as a piece read_body handed out does, at the next read or once served: given
// back here, the WINDOW_UPDATE went out in a write of its own ahead of the answer
// (bench/ab.sh h2replay: 12 % more CPU a replay).
bool Stream::take_buffered_body(std::string& body) {
  if (!end_stream_ || delivered_ != 0 || in_[fill_].size() > limit_) return false;
  const std::size_t size = in_[fill_].size();
  body.clear();
  body.swap(in_[fill_]);
  delivered_ = size;
  view_ = size;
  return true;
}

asio::awaitable<bool> Stream::send_continue() {
  expects_continue_ = false;
  ResponseHeader head(fields_allocator());
  head.result(bhttp::status::continue_);
  co_return co_await send_interim(head);
}

}  // namespace idemproxy::codec::http2
