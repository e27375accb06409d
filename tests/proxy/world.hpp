#pragma once
// A whole proxy in this process, for tests of its behaviour over both codecs in
// milliseconds: the memory store (or one that is down), an upstream on loopback that
// counts what it executes, the proxy's listener with its real codecs, and clients
// that speak HTTP/1.1 (Beast) or HTTP/2 (nghttp2). One io_context runs them all.
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "http/beast.hpp"
#include "idemproxy/common/clock.hpp"
#include "idemproxy/ops/metrics.hpp"
#include "idemproxy/store/memory_store.hpp"
#include "proxy/runtime.hpp"
#include "proxy/serve.hpp"
#include "server/session_tracker.hpp"

namespace idemproxy::testing {

using namespace idemproxy::http;

/// A header field as a client sends or receives it.
using Field = std::pair<std::string, std::string>;

struct Request {
  std::string method = "POST";
  std::string path = "/";
  std::vector<Field> fields;  // for HTTP/2, pseudo-fields may be given here to override
  std::string body;
  /// HTTP/2 only: content-length sent as given (it may disagree with the body), and
  /// the body sent in DATA frames of these sizes, END_STREAM after the last.
  std::vector<std::size_t> data_frames;
  /// send_all: how long after the first this request is sent.
  std::chrono::milliseconds start_after{0};
};

struct Reply {
  unsigned status = 0;
  std::vector<Field> fields;
  std::string body;
  std::vector<Field> trailers;
  std::vector<unsigned> interim;  // 1xx statuses before the final answer
  bool reset = false;             // HTTP/2: RST_STREAM instead of (all of) an answer
  std::uint32_t reset_code = 0;
  bool closed = false;  // the connection ended before an answer
  /// HTTP/2: the final head's HEADERS frame ended the stream (no DATA, no trailers).
  bool head_ended = false;
  /// HTTP/2: the names of the fields that came "never indexed" (RFC 7541 §6.2.3).
  std::vector<std::string> never_indexed;
  std::string field(std::string_view name) const;
};

/// A keyed JSON POST (Idempotency-Key; Content-Type: application/json).
Request json_post(std::string key, std::string path = "/v1/orders",
                  std::string body = R"({"a":1})");
/// The "type" of a problem+json reply; "" when the body is not one.
std::string problem_type(const Reply& r);

enum class Codec { http1, http2 };
std::string to_string(Codec c);

/// What the upstream does with a request it receives.
struct UpstreamAnswer {
  unsigned status = 201;
  std::vector<Field> fields = {{"Content-Type", "application/json"}};
  std::string body = R"({"id":1})";
  std::vector<Field> trailers;  // sent chunked when present
  std::chrono::milliseconds delay{0};
  bool hang_up = false;  // close without answering
  /// A streamed answer: each piece sent chunked after its pause, instead of `body`;
  /// `cut`: the connection closes after the last one, without the last chunk.
  std::vector<std::pair<std::chrono::milliseconds, std::string>> stream;
  bool cut = false;
  /// The connection closes after this answer, though the answer kept it alive (no
  /// `Connection: close`), as an upstream that drops idle keep-alive connections does.
  bool close_after = false;
  /// An answer sent early (answer_heads) leaves the connection open with the body
  /// unread for 10 s, where it would close it: the proxy's write of the body stalls.
  bool keeps_open = false;
  /// Bytes sent on the connection 20 ms after this answer, though nothing asked for
  /// them (an upstream out of step); the connection stays open.
  std::string unasked;
};

class World {
 public:
  /// `config`: YAML without the upstream line; `store` may replace the memory store;
  /// `upstream`: more of the upstream section, e.g. "read_timeout: 1s" (its timeout
  /// is 5s unless this says otherwise).
  explicit World(const std::string& config, store::Store* store = nullptr,
                 const std::string& upstream = "timeout: 5s");
  ~World();

  /// Sends `request` on a new connection over `codec` and waits for the answer.
  Reply send(Codec codec, const Request& request);
  /// Sends every request at once, each on its own connection; answers in order.
  std::vector<Reply> send_all(Codec codec, const std::vector<Request>& requests);

  /// How often the upstream executed a request with this Idempotency-Key ("" for
  /// requests without one).
  int executions(const std::string& key) const;
  int executions() const { return total_; }
  /// How many connections the upstream accepted.
  int upstream_connections() const { return connections_; }
  /// The request the upstream received last.
  const StringRequest& last_request() const { return last_; }
  /// What the upstream answers next (and from then on).
  std::function<UpstreamAnswer(const StringRequest&)> answer;
  /// The upstream answers a request whose head this returns true for once the head
  /// came, without reading its body, and closes the connection (a reset, the body
  /// unread), as a server that refuses an upload early does; answer() sees the head.
  std::function<bool(const StringRequest& head)> answer_heads;
  /// The send buffer (SO_SNDBUF) of the proxy's sockets to its clients, when set: a
  /// small one makes its writes partial (loopback otherwise takes megabytes at once).
  std::optional<int> client_send_buffer;
  /// Stops the upstream: connections are refused.
  void stop_upstream();
  /// Listens to the store's announcements, as a proxy does once its store is ready
  /// (proxy::announcement_watchers): with two Worlds over one store, each hears what
  /// the other's requests do to a record, as two instances over one database do; and
  /// renews the leases of the requests it holds, as the server does (renew_leases).
  void listen();

  proxy::Runtime& runtime() { return *runtime_; }
  ops::Metrics& metrics() { return metrics_; }
  asio::io_context io;

 private:
  asio::awaitable<void> accept_upstream();
  asio::awaitable<void> serve_upstream(tcp::socket socket);
  asio::awaitable<void> accept_clients();
  void run_until(const bool& done);

  SystemClock clock_;
  store::MemoryStore memory_;
  store::Store* store_;  // memory_, or the one given
  ops::Metrics metrics_;
  tcp::acceptor upstream_;
  tcp::acceptor listener_;
  std::unique_ptr<proxy::Runtime> runtime_;
  std::unique_ptr<proxy::ProxyService> service_;
  server::SessionTracker tracker_;
  std::map<std::string, int> executions_;
  int total_ = 0;
  int connections_ = 0;
  StringRequest last_;
  bool listening_ = false;
};

/// The clients (clients.cpp).
asio::awaitable<Reply> http1_request(tcp::endpoint to, const Request& request);
asio::awaitable<Reply> http2_request(tcp::endpoint to, const Request& request);

}  // namespace idemproxy::testing
