#include "codec/http2/stream.hpp"

#include <charconv>
#include <cstdio>

#include "codec/http2/connection.hpp"
#include "http/fields.hpp"
#include "http/request_target.hpp"

namespace idemproxy::http::h2 {
namespace {

using Clock = std::chrono::steady_clock;

ssize_t data_source(nghttp2_session*, std::int32_t, std::uint8_t*, std::size_t room,
                    std::uint32_t* flags, nghttp2_data_source* source, void*) {
  return static_cast<Stream*>(source->ptr)->next_data(room, flags);
}

}  // namespace

Stream::Stream(Connection& conn, const asio::any_io_executor& ex)
    : conn_(conn), head_storage_(conn.client().fields_allocator()), body_ready_(ex), progress_(ex) {
  head_ = &head_storage_;
  peer_ = &conn.client().peer;
  kept_ = &kept_storage_;
  protocol_ = Protocol::http2;
}

FieldsAllocator Stream::fields_allocator() { return conn_.client().fields_allocator(); }

void Stream::open(std::int32_t id, std::shared_ptr<const Settings> settings) {
  id_ = id;
  settings_ = std::move(settings);
  started_ = Clock::now();
  static_cast<Fields&>(head_storage_).clear();
  head_storage_.version(20);
  head_error_.reset();
  content_length_.reset();
  has_body_ = false;
  answered_ = false;
  authority_.clear();
  scheme_.clear();
  path_.clear();
  header_bytes_ = field_count_ = cookies_ = 0;
  saw_host_ = head_request_ = expects_continue_ = over_limit_ = false;
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
  out_trailers_ = {};
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
  if (name == "host") saw_host_ = true;
  if (name == "cookie") ++cookies_;
  head_storage_.insert(name, value);
}

void Stream::on_head_end(bool end_stream) {
  const auto& server = conn_.settings().config.server;
  has_body_ = !end_stream;
  end_stream_ = end_stream;
  const auto bad = [&](std::string detail) {
    head_error_ = HeadError{HeadError::Kind::malformed, std::move(detail)};
  };
  if (header_bytes_ > server.max_header_size || field_count_ > server.max_header_fields) {
    head_error_ = HeadError{HeadError::Kind::too_large,
                            field_count_ > server.max_header_fields
                                ? "more than " + std::to_string(server.max_header_fields) +
                                      " header fields (server.max_header_fields)"
                                : "the header list exceeds server.max_header_size (" +
                                      std::to_string(server.max_header_size) + " bytes)"};
    return;
  }
  auto& head = head_storage_;
  head_request_ = head.method() == bhttp::verb::head;
  const std::string_view host = head[bhttp::field::host];
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
  if (head_error_) return;
  head.target(path_);
  if (!saw_host_) head.set(bhttp::field::host, authority_);
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
  if (const auto length = head[bhttp::field::content_length]; !length.empty()) {
    std::uint64_t n = 0;  // nghttp2 has checked it is a number
    std::from_chars(length.data(), length.data() + length.size(), n);
    content_length_ = n;
  }
  expects_continue_ = has_body_ && beast::iequals(head[bhttp::field::expect], "100-continue");
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
  progress_.notify();
}

void Stream::release_view() {
  if (view_ == 0) return;
  in_[1 - fill_].clear();
  give_back(view_);
  view_ = 0;
}

asio::awaitable<BodyPiece> Stream::read_body(std::size_t, std::optional<TimePoint> deadline) {
  release_view();
  const auto read_timeout = settings_->config.server.read_timeout;
  for (;;) {
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
    const bool held = content_length_ && delivered_ + ready == *content_length_ && !end_stream_;
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

asio::awaitable<bool> Stream::continue_if_expected() {
  if (!expects_continue_ || received_ > 0 || end_stream_) co_return true;
  expects_continue_ = false;
  ResponseHeader head(fields_allocator());
  head.result(bhttp::status::continue_);
  co_return co_await send_interim(head);
}

void Stream::head_fields(unsigned status, const Fields* fields,
                         std::span<const store::Header> stored, std::span<const ExtraField> extra,
                         Framing framing) {
  nv_.clear();
  std::snprintf(digits_.data(), digits_.size(), "%03u", status);
  nv_.add(":status", std::string_view(digits_.data(), 3));
  const bool keep_length = framing.kind == Framing::Kind::none;
  const auto keep = [&](std::string_view name, std::string_view connection) {
    return !connection_specific(name, connection) && !beast::iequals(name, "te") &&
           (keep_length || !beast::iequals(name, "content-length"));
  };
  if (fields != nullptr) {
    const auto connection = (*fields)[bhttp::field::connection];
    for (const auto& f : *fields) {
      if (keep(f.name_string(), connection)) nv_.add(f.name_string(), f.value());
    }
  }
  for (const auto& h : stored) {
    if (keep(h.name, {})) nv_.add(h.name, h.value);
  }
  for (const auto& e : extra) nv_.add(e.name, e.value);
  if (framing.kind == Framing::Kind::length) {
    char length[24];
    const int n = std::snprintf(length, sizeof length, "%llu",
                                static_cast<unsigned long long>(framing.length));
    nv_.add("content-length", std::string_view(length, static_cast<std::size_t>(n)));
  }
}

bool Stream::submit_head(bool with_body) {
  head_pending_ = false;
  submitted_ = true;
  if (closed_) return false;
  nghttp2_data_provider provider{};
  provider.source.ptr = this;
  provider.read_callback = data_source;
  const int rv = nghttp2_submit_response(conn_.session(), id_, nv_.data(), nv_.size(),
                                         with_body ? &provider : nullptr);
  conn_.wake_writer();
  if (!with_body && rv == 0) answered_ = true;
  if (answered_ && !end_stream_) answered_early_at_ = Clock::now();
  return rv == 0;
}

asio::awaitable<bool> Stream::send_interim(ResponseHeader& head) {
  if (closed_ || submitted_) co_return !closed_;
  head_fields(head.result_int(), &head, {}, {}, Framing::none());
  nghttp2_submit_headers(conn_.session(), NGHTTP2_FLAG_NONE, id_, nullptr, nv_.data(), nv_.size(),
                         nullptr);
  conn_.wake_writer();
  co_return true;
}

asio::awaitable<bool> Stream::send_head(ResponseHeader& head, Framing framing) {
  const unsigned status = head.result_int();
  const bool bodiless =
      head_request_ || status == 204 || status == 304 || framing.kind == Framing::Kind::none;
  // A HEAD answer keeps the length the body would have had (RFC 9110 9.3.2).
  head_fields(status, &head, {}, {},
              bodiless && !(head_request_ && framing.kind == Framing::Kind::length)
                  ? Framing::none()
                  : framing);
  if (bodiless) co_return submit_head(false);
  head_pending_ = true;
  co_return !closed_;
}

asio::awaitable<bool> Stream::send_body(std::string_view data, bool last, Trailers trailers) {
  if (closed_) co_return false;
  if (answered_ || (submitted_ && out_last_)) co_return true;
  if (head_pending_) {
    if (last && data.empty() && trailers.empty()) co_return submit_head(false);
    if (last && data.empty()) {
      // Head and trailers, no DATA frame between them.
      head_pending_ = false;
      submitted_ = true;
      nghttp2_submit_headers(conn_.session(), NGHTTP2_FLAG_NONE, id_, nullptr, nv_.data(),
                             nv_.size(), nullptr);
      nv_.clear();
      for (const auto& t : trailers) {
        if (allowed_in_trailers(t.name)) nv_.add(t.name, t.value);
      }
      nghttp2_submit_trailer(conn_.session(), id_, nv_.data(), nv_.size());
      conn_.wake_writer();
      answered_ = true;
      if (!end_stream_) answered_early_at_ = Clock::now();
      co_return true;
    }
    if (!submit_head(true)) co_return false;
  }
  out_ = data;
  out_at_ = 0;
  out_last_ = last;
  out_trailers_ = trailers;
  if (deferred_) {
    deferred_ = false;
    nghttp2_session_resume_data(conn_.session(), id_);
  }
  conn_.wake_writer();
  const bool written = co_await wait_written();
  out_ = {};
  out_trailers_ = {};
  if (written && last) {
    answered_ = true;
    if (!end_stream_) answered_early_at_ = Clock::now();
  }
  co_return written;
}

asio::awaitable<bool> Stream::wait_written() {
  const auto send_timeout = settings_->config.server.read_timeout;
  auto moved = Clock::now();
  std::size_t at = out_at_;
  for (;;) {
    const bool taken = out_at_ == out_.size() && (!out_last_ || eof_taken_);
    if (taken && in_flight_ == 0) co_return true;
    if (closed_ && in_flight_ == 0) co_return false;
    if (out_at_ != at) {
      at = out_at_;
      moved = Clock::now();
    }
    // A client that opens no window for an answer (a zero window held forever) gets
    // the stream reset after server.read_timeout without progress, as an HTTP/1.1
    // client that stops reading gets its connection closed.
    const auto until = moved + send_timeout;
    if (!co_await progress_.wait_until(until) && out_at_ == at && !closed_) {
      stalled_since_ = moved;
      nghttp2_submit_rst_stream(conn_.session(), NGHTTP2_FLAG_NONE, id_, NGHTTP2_CANCEL);
      conn_.wake_writer();
    }
  }
}

ssize_t Stream::next_data(std::size_t room, std::uint32_t* flags) {
  const std::size_t ready = out_.size() - out_at_;
  if (ready == 0 && !out_last_) {
    deferred_ = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  const std::size_t n = std::min(room, ready);
  if (n > 0) *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  if (n == ready && out_last_) {
    eof_taken_ = true;
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (!out_trailers_.empty()) {
      // RFC 9113 §8.1: trailers are a HEADERS frame that ends the stream after the DATA.
      *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      NvList trailers;
      for (const auto& t : out_trailers_) {
        if (allowed_in_trailers(t.name)) trailers.add(t.name, t.value);
      }
      nghttp2_submit_trailer(conn_.session(), id_, trailers.data(), trailers.size());
    }
    progress_.notify();
  }
  return static_cast<ssize_t>(n);
}

void Stream::take_data(const std::uint8_t* frame_head, std::size_t size) {
  conn_.queue_data(*this, frame_head, out_.data() + out_at_, size);
  out_at_ += size;
  in_flight_ += size;
}

void Stream::flushed(std::size_t size) {
  in_flight_ -= std::min(in_flight_, size);
  progress_.notify();
}

void Stream::abandon() {
  in_flight_ = 0;
  on_close(NGHTTP2_CANCEL);
}

void Stream::served() {
  serving_ = false;
  discarding_ = true;
  // Whatever the client still sends, and what it sent that was not read, is dropped
  // and its window given back.
  release_view();
  give_back(in_[fill_].size());
  in_[fill_].clear();
  if (closed_) return;
  // An exchange the proxy left without a whole answer is reset: the client must not
  // wait for one, nor take part of one for all of it. A malformed request that is
  // still open is a stream error (RFC 9113 §8.1.1), after its answer.
  if (!answered_) {
    nghttp2_submit_rst_stream(conn_.session(), NGHTTP2_FLAG_NONE, id_, NGHTTP2_INTERNAL_ERROR);
  } else if (head_error_ && !end_stream_) {
    nghttp2_submit_rst_stream(conn_.session(), NGHTTP2_FLAG_NONE, id_, NGHTTP2_PROTOCOL_ERROR);
  }
  conn_.wake_writer();
}

void Stream::reset() {
  if (closed_) return;
  nghttp2_submit_rst_stream(conn_.session(), NGHTTP2_FLAG_NONE, id_, NGHTTP2_INTERNAL_ERROR);
  conn_.wake_writer();
}

asio::awaitable<bool> Stream::send_prepared(const PreparedAnswer& answer,
                                            std::span<const ExtraField> extra) {
  const bool bodiless = head_request_ || answer.status == 204 || answer.status == 304;
  head_fields(answer.status, nullptr, answer.fields, extra,
              Framing::of(answer.body.size(), !answer.trailers.empty()));
  head_pending_ = true;
  if (bodiless) co_return submit_head(false);
  co_return co_await send_body(answer.body, true, answer.trailers);
}

}  // namespace idemproxy::http::h2
