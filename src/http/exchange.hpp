#pragma once
// One request and its answer, whatever the protocol: the HTTP/1.1 codec
// (codec/http1) and the HTTP/2 codec (codec/http2) each provide it, and the proxy
// (proxy/) is written once against it. The split is Envoy's (envoy/http/codec.h: a
// RequestDecoder fed by the codec, a ResponseEncoder the filters write to) and
// Pingora's `enum Session { H1, H2 }`: the codec owns framing, flow control and the
// connection; the proxy owns what the request means.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "http/beast.hpp"
#include "http/extra_fields.hpp"
#include "http/settings.hpp"
#include "idemproxy/common/once_string.hpp"
#include "idemproxy/ops/metrics.hpp"

namespace idemproxy::http {

enum class Protocol : std::uint8_t { http10, http11, http2 };

/// Where a request comes from: facts of its connection.
struct Peer {
  std::string ip;
  std::string subject;  // the verified client certificate's subject (mTLS); "" without
  bool secure = false;  // TLS
};

/// Why the codec found a request unservable before any route saw it (RFC 9112's
/// framing rules, RFC 9113 §8.1.1 and §8.3.1). The proxy answers it.
struct HeadError {
  enum class Kind { malformed, too_large } kind = Kind::malformed;
  std::string detail;
};

/// One piece of a request body.
struct BodyPiece {
  enum class Error : std::uint8_t {
    none,
    too_large,  // over the limit set with body_limit()
    malformed,  // its framing is broken (a bad chunk; DATA against content-length)
    timeout,    // the client sent too slowly (server.read_timeout, or the deadline)
    gone,       // the client went away or reset the stream
  };
  std::string_view data;  // valid until the next read_body() or the exchange's end
  bool end = false;       // the body is complete (data may still hold its last bytes)
  Error error = Error::none;
};

/// Trailer fields of an answer (RFC 9110 6.5), in order.
using Trailers = std::span<const Header>;

/// How an answer's body is framed. `none`: it has no body (HEAD, 204, 304: RFC 9110
/// 6.4.1), and its framing fields, which describe the resource, are kept as they are.
/// `length`: exactly `length` bytes follow. `unknown`: the body ends when it ends.
/// `trailers`: trailer fields may follow the body (HTTP/1.1 then frames it chunked
/// for a client that takes them).
struct Framing {
  enum class Kind : std::uint8_t { none, length, unknown } kind = Kind::unknown;
  std::uint64_t length = 0;
  bool trailers = false;
  static Framing none() { return {Kind::none, 0, false}; }
  static Framing of(std::uint64_t n, bool trailers = false) { return {Kind::length, n, trailers}; }
  static Framing unknown(bool trailers = false) { return {Kind::unknown, 0, trailers}; }
};

/// An answer whose head was laid out once, when it was cached: a replay.
struct PreparedAnswer {
  unsigned status = 0;
  std::span<const Header> fields;  // names as stored (an HTTP/2 codec lowers them)
  std::string_view body;
  Trailers trailers;
  /// Kept with the cached answer for the codec that sends it: a codec with a form of
  /// its own lays it out there at its first replay of the answer, and gathers it at
  /// the next (the HTTP/1.1 codec's head). Null: nothing is kept.
  const OnceString* codec_form = nullptr;
};

/// The room an exchange offers the service for its request's state
/// (Exchange::request_room). The service checks its state against it at compile time.
inline constexpr std::size_t kRequestRoom = 2048;

/// Kept by a connection from one request to the next: strings that outgrow
/// std::string's 15 inline characters take their memory once per connection.
struct KeptStrings {
  /// The largest request body whose memory is kept: per HTTP/1.1 connection, and per
  /// stream an HTTP/2 connection has had open at once, so a larger one would hold
  /// its memory while the connection idles (128 streams, 512 KiB at most).
  static constexpr std::size_t kBodyCapacity = std::size_t{4} * 1024;
  std::string target;
  std::string request_id;
  std::string trace_id;
  std::string body;
};

/// What a codec learned of a request with its head: values it sets, the proxy reads.
struct RequestFacts {
  using TimePoint = std::chrono::steady_clock::time_point;
  Protocol protocol = Protocol::http11;
  const Peer* peer = nullptr;
  /// The configuration in force when the request started; it stays for its life.
  std::shared_ptr<const Settings> settings;
  /// When the request's first bytes were at hand.
  TimePoint started{};
  std::optional<HeadError> head_error;
  /// The body's declared length; none when it has none or it is not declared.
  std::optional<std::uint64_t> content_length;
  /// Whether a body follows the head (false: the request ended with it).
  bool has_body = false;
};

/// The contract between a codec and the proxy: an interface and nothing else. Each
/// codec holds its request's state and says what it is.
class Exchange {
 public:
  using TimePoint = RequestFacts::TimePoint;

  virtual ~Exchange() = default;
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // ---- The request.
  /// Its head: method, origin-form target, fields (HTTP/2's :authority as Host). The
  /// proxy rewrites it in place for the upstream.
  virtual RequestHeader& head() = 0;
  virtual const RequestFacts& facts() const = 0;
  Protocol protocol() const { return facts().protocol; }
  const Peer& peer() const { return *facts().peer; }
  const Settings& settings() const { return *facts().settings; }
  const std::shared_ptr<const Settings>& settings_ptr() const { return facts().settings; }
  TimePoint started() const { return facts().started; }
  const std::optional<HeadError>& head_error() const { return facts().head_error; }
  std::optional<std::uint64_t> content_length() const { return facts().content_length; }
  bool has_body() const { return facts().has_body; }
  /// Whether the client takes trailer fields: every HTTP/2 client; an HTTP/1.1 one
  /// that sent `TE: trailers` (RFC 9110 10.1.4).
  virtual bool accepts_trailers() const = 0;
  /// Memory for fields that live no longer than the connection (its arena).
  virtual FieldsAllocator fields_allocator() = 0;
  virtual KeptStrings& kept() = 0;
  /// Room for what the service keeps while it serves this exchange (Service::serve_now):
  /// `size` bytes aligned to `align`, the exchange's until it ends; null where the codec
  /// has none that big. The service constructs and destroys what it puts there.
  virtual void* request_room(std::size_t size, std::size_t align) { return nullptr; }

  /// Bounds the body: reading past `limit` bytes gives Error::too_large.
  virtual void body_limit(std::uint64_t limit) = 0;
  /// The next piece of the body, at most `max` bytes. Each read waits at most
  /// server.read_timeout, and none ends after `deadline` when one is given. What a
  /// piece views is the consumer's until its next read: only then does the codec
  /// take more (HTTP/2 reopens the stream's window), so a slow upstream holds back
  /// its own client and no one else.
  virtual asio::awaitable<BodyPiece> read_body(std::size_t max,
                                               std::optional<TimePoint> deadline) = 0;
  /// read_body()'s piece when it is here already (a body's bytes buffered with its
  /// head, or none left), with no wait and no coroutine frame; none, having taken
  /// nothing, when read_body() must be awaited.
  virtual std::optional<BodyPiece> read_body_now(std::size_t max) { return std::nullopt; }
  /// The whole body into `body` (its memory reused), up to the limit, each read as
  /// read_body() times it.
  virtual asio::awaitable<BodyPiece::Error> read_whole_body(std::string& body,
                                                            std::optional<TimePoint> deadline);
  /// The whole body into `body`, when it is here already and within the limit: no
  /// wait, so no coroutine frame (most API requests send their body with the head).
  /// False, having taken nothing, when read_whole_body has to wait or report an error.
  virtual bool take_buffered_body(std::string& body) { return false; }
  /// Whether the client waits for `100 Continue` (RFC 9110 10.1.1) before it sends the
  /// body: it sent `Expect: 100-continue`, no body yet, and none was answered. Asked
  /// first, so that the usual request makes no coroutine frame for it.
  virtual bool expects_continue() const = 0;
  /// Sends `100 Continue`; false when the client cannot be written to.
  virtual asio::awaitable<bool> send_continue() = 0;
  /// Whether the body was read to its end (or there was none).
  virtual bool body_done() const = 0;
  /// Whether the body may be read while the answer is sent, by another coroutine on
  /// the same executor: an HTTP/2 stream, whose two directions are apart (gRPC's
  /// bidirectional calls). An HTTP/1.1 exchange reads its body first.
  virtual bool full_duplex() const { return false; }
  /// The proxy reads no more of the body (a full-duplex exchange whose answer is
  /// over): a read under way returns Error::gone, and what the client still sends is
  /// dropped.
  virtual void drop_body() {}

  // ---- The answer. Each send returns false when the client cannot take it (gone,
  // reset, or not reading within server.read_timeout).
  /// An interim answer (1xx but 101).
  virtual asio::awaitable<bool> send_interim(ResponseHeader& head) = 0;
  /// The final head; its body follows by send_body(). The codec adds the framing
  /// and connection fields and drops what its protocol does not carry. A head may
  /// wait to go out with the first body bytes.
  virtual asio::awaitable<bool> send_head(ResponseHeader& head, Framing framing) = 0;
  /// send_head()'s outcome when the head waits for the first body bytes, with no
  /// coroutine frame; none, having done nothing, when send_head() must be awaited.
  virtual std::optional<bool> send_head_now(ResponseHeader& head, Framing framing) {
    return std::nullopt;
  }
  /// More of the body; `last` ends the answer, with `trailers` for a client that
  /// takes them (HTTP/1.1 then frames the body chunked). `data` must stay valid until
  /// this returns.
  virtual asio::awaitable<bool> send_body(std::string_view data, bool last, Trailers trailers) = 0;
  /// send_body()'s outcome when the socket took the piece at once, with no coroutine
  /// frame; otherwise none, and send_body() must be awaited next with the same piece:
  /// it sends what this left (by default, having done nothing, all of it).
  virtual std::optional<bool> send_body_now(std::string_view data, bool last, Trailers trailers) {
    return std::nullopt;
  }
  /// A whole answer.
  asio::awaitable<bool> send(ResponseHeader& head, std::string_view body, Trailers trailers);
  /// A replay whose head was laid out when it was cached, with `extra` fields, sent
  /// with no coroutine frame when the socket takes it at once: the outcome then (true:
  /// sent whole). Otherwise nothing, and finish_prepared() must be awaited for it
  /// before anything else is sent. What `answer` and `extra` view must stay valid
  /// until then; the span itself need not.
  virtual std::optional<bool> start_prepared(const PreparedAnswer& answer,
                                             std::span<const ExtraField> extra) = 0;
  /// The rest of the replay start_prepared() began; true when it went out whole.
  virtual asio::awaitable<bool> finish_prepared() = 0;
  /// Abandons the answer: an HTTP/2 stream is reset, an HTTP/1.1 connection closed,
  /// so that a client never takes part of an answer for all of it.
  virtual void reset() = 0;
  /// Whether the final answer went out whole.
  virtual bool answered() const = 0;

 protected:
  Exchange() = default;
};

/// What a codec needs from the server around it, and what serves each exchange it
/// makes (the proxy).
class Service {
 public:
  virtual ~Service() = default;
  /// The configuration in force now.
  virtual std::shared_ptr<const Settings> settings() const = 0;
  /// A number that changes whenever settings() would give another configuration: a
  /// connection keeps what settings() gave while it stays the same, and each of its
  /// requests starts without the lock and reference count settings() takes. Read it
  /// before settings(). 0: none kept; settings() is asked each time.
  virtual std::uint64_t settings_version() const { return 0; }
  /// Keeps `kept` the configuration in force, for a connection that holds one: asks
  /// settings() only when the version `version` was read at has changed (or is 0),
  /// and updates `version`.
  void keep_current(std::shared_ptr<const Settings>& kept, std::uint64_t& version) const {
    const auto now = settings_version();  // before settings()
    if (now == 0 || now != version) {
      kept = settings();
      version = now;
    }
  }
  /// Whether the server drains: connections take no new requests.
  virtual bool draining() const = 0;
  virtual ops::Metrics& metrics() = 0;
  /// Serves one exchange to its end.
  virtual asio::awaitable<void> serve(Exchange& exchange) = 0;
  /// serve() where it may end at once: nullopt when the exchange was served without
  /// waiting, else what serves it to its end, for the codec to await. A codec calls it
  /// in the frame that holds the exchange, and awaits what it gives at once.
  virtual std::optional<asio::awaitable<void>> serve_now(Exchange& exchange) {
    return serve(exchange);
  }
};

}  // namespace idemproxy::http
