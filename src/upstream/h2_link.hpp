#pragma once
// The HTTP/2 upstream's parts, shared by h2_upstream.cpp (the nghttp2 session, its
// loops and the registry of connections) and h2_call.cpp (each exchange as a stream).
//
// Threads: a link (one connection) runs on its own executor, a strand when there are
// several I/O threads. Everything that touches its session or a stream's state runs
// there; a StreamCall, driven from a client connection's strand, hops onto it for
// each step (on_link) and back, so the two never share a lock.
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "codec/http2/nv.hpp"
#include "codec/http2/session_memory.hpp"
#include "http/arena.hpp"
#include "http/fields.hpp"
#include "http/problem.hpp"
#include "http/signal.hpp"
#include "http/tls.hpp"
#include "upstream/h2_upstream.hpp"

namespace idemproxy::upstream {
namespace h2 {

// Per-stream flow-control window (SETTINGS_INITIAL_WINDOW_SIZE) toward the upstream:
// the most of one answer held here that its client has not taken.
inline constexpr std::uint32_t kStreamWindow = 128 * 1024;
// Request bytes a stream holds here before the client's body stops being read.
inline constexpr std::size_t kOutHighWater = std::size_t{256} * 1024;
inline constexpr std::int32_t kConnectionWindow = 1 << 20;
inline constexpr std::size_t kWriteBatch = std::size_t{64} * 1024;
inline constexpr std::size_t kMaxHeadBytes = std::size_t{1} << 20;
// Request bodies up to this size are kept while their stream runs, so a stream the
// upstream refuses unprocessed (GOAWAY, REFUSED_STREAM) can go again.
inline constexpr std::size_t kResendBody = std::size_t{1} << 20;
// How often a refused stream goes again. An upstream that lowers its
// SETTINGS_MAX_CONCURRENT_STREAMS in a later SETTINGS frame (python-h2 sends its
// defaults first) refuses what was sent under the earlier limit (RFC 9113 §5.1.2,
// §8.7); the registry learns the limit then, so a resend is rarely refused again.
inline constexpr int kMaxResends = 3;

/// A header block as nghttp2 hands it over, field by field: every field's bytes in one
/// string and where each lies in a second vector, so a block takes two heap blocks
/// whatever its fields (a string a name and a value took up to two each, on a gRPC
/// answer's head eight), and a head's `:status` is kept as a number. nghttp2 has
/// checked the block (RFC 9113 §8.2, §8.3.2): lower-case names, and `:status`, three
/// digits, before any other field of a head.
class FieldBlock {
 public:
  /// Adds a field as received; `:status` becomes status().
  void add(std::string_view name, std::string_view value) {
    if (name == ":status") {
      std::from_chars(value.data(), value.data() + value.size(), status_);
      return;
    }
    if (spans_.empty()) {
      bytes_.reserve(kFirstBytes);
      spans_.reserve(kFirstFields);
    }
    spans_.push_back({static_cast<std::uint32_t>(bytes_.size()),
                      static_cast<std::uint32_t>(name.size()),
                      static_cast<std::uint32_t>(value.size())});
    bytes_.append(name).append(value);
  }
  /// The block's `:status`: 0 for trailers.
  unsigned status() const { return status_; }
  std::size_t size() const { return spans_.size(); }
  std::string_view name(std::size_t i) const {
    return {bytes_.data() + spans_[i].at, spans_[i].name_size};
  }
  std::string_view value(std::size_t i) const {
    return {bytes_.data() + spans_[i].at + spans_[i].name_size, spans_[i].value_size};
  }

 private:
  // Room for a usual head at the first field, instead of growing to it by doubling.
  static constexpr std::size_t kFirstBytes = 256;
  static constexpr std::size_t kFirstFields = 8;
  struct Span {
    std::uint32_t at, name_size, value_size;
  };
  std::string bytes_;
  std::vector<Span> spans_;
  unsigned status_ = 0;
};

/// The steady clock in nanoseconds: how links keep when their last stream went.
inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// One stream's state: the request on its way up and the answer on its way back.
/// Touched only on its link's executor.
struct Call {
  explicit Call(const asio::any_io_executor& ex) : room(ex), news(ex) {}

  std::int32_t id = -1;
  bool headers_sent = false;  // the request's HEADERS frame went out
  std::string out;            // request body bytes not yet taken by nghttp2
  std::size_t out_at = 0;
  bool out_end = false;
  bool out_deferred = false;
  Signal room;  // nghttp2 took request bytes, or the stream closed

  FieldBlock block;  // the header block being received
  std::size_t block_bytes = 0;
  // 1xx answers not yet taken (a vector: libstdc++'s deque allocates when made)
  std::vector<FieldBlock> interim;
  std::optional<FieldBlock> head;  // the final answer's head
  bool head_taken = false;
  std::string in;  // answer body bytes not yet taken
  bool in_end = false;
  FieldBlock trailers;
  bool closed = false;
  std::uint32_t close_code = 0;
  Signal news;  // a head, body bytes, the end, or the close
};

/// A request as sent on a stream: its fields, and its body while it is small enough
/// to send again (kResendBody).
struct Outgoing {
  codec::http2::NvList fields;
  std::string body;
  bool has_body = false;
  bool resendable = true;
};

class UpstreamLink;

/// The upstream's HTTP/2 connections, shared by H2Upstream and its calls.
struct Registry : std::enable_shared_from_this<Registry> {
  Registry(asio::any_io_executor executor, const config::UpstreamConfig& upstream,
           ssl::context* context, bool per_link_strands)
      : ex(std::move(executor)), config(upstream), tls(context), strands(per_link_strands) {}

  asio::any_io_executor ex;
  const config::UpstreamConfig& config;
  ssl::context* tls;
  bool strands;
  std::mutex mu;
  std::vector<std::shared_ptr<UpstreamLink>> links;
  /// The last SETTINGS_MAX_CONCURRENT_STREAMS any link of this upstream was sent. A
  /// new link assumes it until its own SETTINGS say otherwise, so a burst does not
  /// crowd onto a fresh connection that the upstream then refuses in part (a
  /// server may send its limit in a second SETTINGS frame, after its preface).
  std::atomic<std::uint32_t> learned_max{0xffffffffu};
  /// The limit a link takes from a SETTINGS frame naming `announced`. A link's first
  /// frame does not raise it above learned_max while other links live: python-h2
  /// announces 100 in its preface and its real limit (1) in the next frame, and a
  /// burst that went by the 100 in between was refused in part. Otherwise (a later
  /// frame, or a link alone, as after the upstream restarted) the frame decides, and
  /// teaches the registry.
  std::uint32_t limit_from(const UpstreamLink& link, std::uint32_t announced, bool first);

  /// A link with room for another stream, or a new one (on `established`'s executor
  /// when given); its stream count already includes the caller's. `besides`: a link
  /// not to pick (one that refused the caller's stream).
  std::shared_ptr<UpstreamLink> pick(const http::Stream* established,
                                     const UpstreamLink* besides = nullptr);
  /// How many streams `link` takes at once: upstream.http2_max_streams, and never
  /// more than the upstream's SETTINGS_MAX_CONCURRENT_STREAMS.
  std::size_t room(const UpstreamLink& link) const;
  /// Closes `link` to new streams if it has had none for `idle`; true when it did.
  bool close_if_idle(UpstreamLink& link, Duration idle);
};

/// One HTTP/2 connection to the upstream.
class UpstreamLink : public std::enable_shared_from_this<UpstreamLink> {
 public:
  UpstreamLink(asio::any_io_executor ex, const config::UpstreamConfig& config, ssl::context* tls,
               std::weak_ptr<Registry> registry, bool own_executor)
      : ex_(std::move(ex)),
        config_(config),
        tls_(tls),
        registry_(std::move(registry)),
        own_executor_(own_executor),
        ready_(ex_, Signal::Reset::never),
        writable_(ex_) {}
  ~UpstreamLink() {
    if (session_ != nullptr) nghttp2_session_del(session_);
  }
  UpstreamLink(const UpstreamLink&) = delete;
  UpstreamLink& operator=(const UpstreamLink&) = delete;

  const asio::any_io_executor& executor() const { return ex_; }
  /// Whether the link runs on an executor of its own (a strand), which callers must
  /// hop onto; otherwise every caller already runs where it does.
  bool own_executor() const { return own_executor_; }
  /// No new streams: the connection failed, went idle, or the upstream sent GOAWAY.
  bool closed_to_new() const { return closed_to_new_.load(); }
  void close_to_new() { closed_to_new_ = true; }

  /// Streams picked for this link and not yet released (Registry::pick).
  std::atomic<std::size_t> streams{0};
  /// The upstream's SETTINGS_MAX_CONCURRENT_STREAMS on this connection: what the
  /// registry learned from other links until this one's SETTINGS name it.
  std::atomic<std::uint32_t> remote_max{0xffffffffu};
  /// When the last stream was released (steady clock, nanoseconds).
  std::atomic<std::int64_t> last_release{0};

  /// Connects (or adopts `established`) once; every caller waits for the outcome.
  asio::awaitable<beast::error_code> ready(std::unique_ptr<http::Stream> established);
  /// Submits a request's HEADERS; its body, if it has one, comes through push().
  /// Null when the session takes no new stream.
  std::shared_ptr<Call> start(Outgoing& request);
  /// Hands request body bytes to the stream.
  void push(Call& call, std::string_view data, bool end);
  /// The caller took `n` answer bytes: the stream's window reopens by as much.
  void consume(Call& call, std::size_t n);
  /// The caller is done with the stream: a stream still open is reset (CANCEL).
  void release(Call& call);

  // nghttp2's callbacks.
  int on_header(const nghttp2_frame& frame, std::string_view name, std::string_view value);
  int on_frame_recv(const nghttp2_frame& frame);
  int on_frame_send(const nghttp2_frame& frame);
  int on_data(std::int32_t id, const std::uint8_t* data, std::size_t size);
  int on_stream_close(std::int32_t id, std::uint32_t code);
  ssize_t read_body(std::int32_t id, std::uint8_t* buf, std::size_t size, std::uint32_t* flags);

 private:
  asio::awaitable<beast::error_code> connect();
  void start_session();
  asio::awaitable<void> read_loop();
  asio::awaitable<void> write_loop();
  /// Closes the connection once it has carried no stream for upstream.idle_timeout.
  asio::awaitable<void> idle_loop();
  void fail(const char* why);
  std::shared_ptr<Call> find(std::int32_t id) const {
    const auto it = calls_.find(id);
    return it == calls_.end() ? nullptr : it->second;
  }
  void wake_writer() { writable_.notify(); }

  asio::any_io_executor ex_;
  const config::UpstreamConfig& config_;
  ssl::context* tls_;
  std::weak_ptr<Registry> registry_;
  bool own_executor_;
  std::unique_ptr<http::Stream> stream_;
  // nghttp2's allocations (streams, queued frames, header blocks, HPACK strings) from
  // the link's own arena, as the client side's session takes them from its
  // connection's: a warm link's streams take nothing from the heap for them. Only the
  // link's executor touches the session, so the arena needs no lock.
  http::Arena arena_;
  codec::http2::SessionMemory memory_{arena_};
  nghttp2_session* session_ = nullptr;
  enum class State { fresh, connecting, ready, failed } state_ = State::fresh;
  beast::error_code connect_error_;
  Signal ready_;  // stays set once the link is ready or has failed
  bool settings_received_ = false;
  asio::steady_timer* settings_wait_ = nullptr;  // ready() waiting for them
  Signal writable_;
  std::atomic<bool> closed_to_new_{false};
  std::map<std::int32_t, std::shared_ptr<Call>> calls_;
};

/// Runs `step` (a callable returning an awaitable) on `link`'s executor and resumes
/// the caller on its own; directly when the link has no executor of its own.
template <class Step>
auto on_link(UpstreamLink& link, Step& step) -> decltype(step()) {
  if (!link.own_executor()) return step();
  return asio::co_spawn(link.executor(), step(), asio::use_awaitable);
}

/// What a wait on a stream found (StreamCall::take).
struct Taken {
  std::vector<FieldBlock> interim;
  std::optional<FieldBlock> head;
  std::string data;
  bool end = false;
  FieldBlock trailers;
  bool closed = false;
  std::uint32_t close_code = 0;
  bool timed_out = false;
};

/// One exchange as a stream of a link (UpstreamCall over HTTP/2).
class StreamCall final : public UpstreamCall {
 public:
  explicit StreamCall(std::shared_ptr<Registry> registry) : registry_(std::move(registry)) {}
  ~StreamCall() override;
  void destroy() noexcept override { delete this; }
  StreamCall(const StreamCall&) = delete;
  StreamCall& operator=(const StreamCall&) = delete;

  /// Picks a link with room (or opens one) and waits until it is ready.
  asio::awaitable<beast::error_code> open(std::unique_ptr<http::Stream> established);

  asio::awaitable<beast::error_code> send_head(RequestHeader& head, const ExtraFields& extra,
                                               RequestFraming framing, TimePoint until) override;
  asio::awaitable<beast::error_code> send_body(std::string_view data, bool last,
                                               TimePoint until) override;
  bool answered_early() const override { return answered_early_; }
  bool full_duplex() const override { return true; }
  void interrupt() override;
  asio::awaitable<beast::error_code> read_head(bool head_request,
                                               std::optional<std::uint64_t> body_limit,
                                               FieldsAllocator fields, TimePoint until) override;
  ResponseHeader& head() override { return *head_; }
  Framing framing() const override;
  asio::awaitable<AnswerPiece> read_body(TimePoint until) override;
  bool maybe_processed() const override { return !refused_; }
  bool reached_upstream() const override { return started_; }

 private:
  asio::awaitable<beast::error_code> start();
  asio::awaitable<Taken> take(std::chrono::steady_clock::time_point until, bool body);
  /// Sends the request again on another link (it was refused unprocessed).
  asio::awaitable<bool> resend();
  void release();
  /// Ends `call` on `link`'s executor (RST_STREAM CANCEL unless it ended already).
  static void end_on_link(const std::shared_ptr<UpstreamLink>& link,
                          const std::shared_ptr<Call>& call);
  /// The next answer bytes, by `until`; `end` with the trailers at the end.
  asio::awaitable<Taken> take_body(std::chrono::steady_clock::time_point until);

  std::shared_ptr<Registry> registry_;
  std::shared_ptr<UpstreamLink> link_;
  std::shared_ptr<Call> call_;
  Outgoing request_;
  std::optional<ResponseHeader> head_;
  std::vector<FieldBlock> interims_;  // 1xx heads not yet read
  std::optional<FieldBlock> final_;   // the final head, not yet read
  // The final head's Content-Length, when it has one that parses, and whether it
  // names a Trailer field: noted as its fields go into head_, for framing().
  std::optional<std::uint64_t> declared_;
  bool announces_trailers_ = false;
  int interim_count_ = 0;
  std::string piece_;  // the body piece read last
  std::vector<Header> trailers_;
  std::size_t unconsumed_ = 0;  // answer bytes taken, their window not yet reopened
  std::uint64_t body_limit_ = ~std::uint64_t{0};
  std::uint64_t body_seen_ = 0;
  bool head_request_ = false;
  bool refused_ = false;
  int resends_ = 0;  // of kMaxResends
  bool ended_ = false;
  bool sent_body_ = false;
  bool started_ = false;  // a stream was opened for the request (its HEADERS submitted)
  bool answered_early_ = false;
  bool body_ended_ = false;  // the request's last body piece was pushed
};

inline std::uint32_t Registry::limit_from(const UpstreamLink& link, std::uint32_t announced,
                                          bool first) {
  std::lock_guard lock(mu);
  const auto other = [&](const auto& l) { return l.get() != &link && !l->closed_to_new(); };
  if (first && announced > learned_max && std::any_of(links.begin(), links.end(), other)) {
    return learned_max;
  }
  return learned_max = announced;
}

}  // namespace h2
}  // namespace idemproxy::upstream
