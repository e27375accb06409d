#pragma once
// Fakes at the proxy's two seams, for tests with no sockets: a client's exchange
// (FakeExchange, http/exchange.hpp) and an upstream call (FakeCall, upstream/call.hpp)
// with the upstream that makes it (FakeUpstream). Each records what the proxy did to
// it, in order, so a test can tell when a piece crossed, not only that it did.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "http/exchange.hpp"
#include "http/signal.hpp"
#include "upstream/call.hpp"

namespace idemproxy::testing {

using namespace idemproxy::http;

/// What one side saw, in order: "head 200", "body abc", "end", "read 2", ...
using Log = std::vector<std::string>;

/// A full-duplex fake's wait for the other side's turn: until `ready` holds, woken by
/// notify(), for 2 s at most (false then: a relay that is not full duplex fails
/// instead of hanging).
class Turns {
 public:
  asio::awaitable<bool> until(std::function<bool()> ready,
                              std::chrono::milliseconds limit = std::chrono::seconds{2});
  void notify() {
    if (waiting_ != nullptr) waiting_->notify();
  }

 private:
  // The wait's own, on its frame: nothing outlives the io_context the wait ran on.
  http::Signal* waiting_ = nullptr;
};

/// A client's exchange: a request whose body comes in `pieces`, and an answer kept
/// as it is sent. Every event is written to `log`, shared with the other seam.
class FakeExchange final : public Exchange {
 public:
  explicit FakeExchange(Log& log, std::vector<std::string> pieces = {}, bool takes_trailers = true);
  /// A request as a codec would hand it to the proxy: under `settings`, to `target`,
  /// with `fields` (the body is the pieces').
  void request(std::shared_ptr<const Settings> settings, std::string target,
               const std::vector<std::pair<std::string, std::string>>& fields);

  /// The body's length is not declared (chunked, or an HTTP/2 stream without
  /// content-length), as a codec tells the proxy.
  void unknown_length() {
    facts_.content_length.reset();
    facts_.has_body = true;
  }

  RequestHeader& head() override { return *head_; }
  const RequestFacts& facts() const override { return facts_; }
  KeptStrings& kept() override { return *kept_; }
  bool answered() const override { return answered_; }
  bool accepts_trailers() const override { return takes_trailers_; }
  FieldsAllocator fields_allocator() override { return {}; }
  void body_limit(std::uint64_t) override {}
  asio::awaitable<BodyPiece> read_body(std::size_t max, std::optional<TimePoint>) override;
  bool expects_continue() const override { return false; }
  asio::awaitable<bool> send_continue() override { co_return true; }
  bool body_done() const override {
    return next_ == pieces_.size() && fails_with == BodyPiece::Error::none && !stays_open;
  }
  bool full_duplex() const override { return duplex; }
  void drop_body() override;
  asio::awaitable<bool> send_interim(ResponseHeader& head) override;
  asio::awaitable<bool> send_head(ResponseHeader& head, Framing framing) override;
  asio::awaitable<bool> send_body(std::string_view data, bool last, Trailers trailers) override;
  std::optional<bool> start_prepared(const PreparedAnswer& answer,
                                     std::span<const ExtraField> extra) override;
  asio::awaitable<bool> finish_prepared() override;
  void reset() override { log_.push_back("client reset"); }

  /// A replay's start_prepared() leaves it to finish_prepared(), as a socket that
  /// takes only part of it at once does.
  bool replay_later = false;
  /// The client stops taking the answer after this many body sends (it went away).
  std::optional<int> gone_after_sends;
  /// The request body's read fails with this after the pieces.
  BodyPiece::Error fails_with = BodyPiece::Error::none;
  /// Full duplex (an HTTP/2 stream): each piece after the first comes once the client
  /// got as many pieces of the answer as it sent of the request, as in a conversation.
  bool duplex = false;
  /// The body does not end after its pieces: the client keeps its stream open until
  /// the proxy drops the body (drop_body) or 2 s pass (a timeout then).
  bool stays_open = false;

  unsigned status = 0;
  std::vector<std::pair<std::string, std::string>> fields;  // of the final head
  bool replayed = false;                                    // sent as a prepared replay
  Framing framing;
  std::string body;
  std::vector<store::Header> trailers;
  bool ended = false;
  int pieces_read = 0;

 private:
  Log& log_;
  RequestHeader* head_ = nullptr;
  KeptStrings* kept_ = nullptr;
  RequestFacts facts_;
  bool answered_ = false;
  RequestHeader request_;
  Peer peer_value_;
  KeptStrings kept_value_;
  std::vector<std::string> pieces_;
  std::size_t next_ = 0;
  bool takes_trailers_;
  int sends_ = 0;
  std::string_view prepared_body_;  // a replay left to finish_prepared()
  Trailers prepared_trailers_;
  int answer_pieces_ = 0;  // body sends with data
  bool dropped_ = false;   // drop_body()
  Turns turns_;
};

/// What an upstream call answers: heads (any interim ones, then the final one), the
/// framing, body pieces, and how it ends.
struct Script {
  std::vector<std::pair<unsigned, std::vector<std::pair<std::string, std::string>>>> heads = {
      {200, {}}};
  Framing framing = Framing::unknown();
  std::vector<std::string> pieces;
  std::vector<store::Header> trailers;
  beast::error_code head_error;  // read_head fails with it
  beast::error_code cut;         // the body ends with this error instead of its end
  bool refused = false;          // the upstream refused the request unprocessed
  bool answers_early = false;    // answered before it took the request's whole body
  beast::error_code send_error;  // send_head fails with it
  bool end_apart = false;        // the end comes in a read of its own (HTTP/2: END_STREAM alone)
  /// Before the first head: the upstream works (duplex: until interrupted, if sooner).
  std::chrono::milliseconds delay{0};
  /// Full duplex (an HTTP/2 stream): the head comes once the request's first piece
  /// came, and each body piece once one more did, as in a conversation; the end,
  /// once the request ended. Each waits 2 s at most (a timeout then).
  bool duplex = false;
};

/// One call: plays its script and logs what the proxy sent and read.
struct SentRequest {
  std::string body;
  bool ended = false;
  /// The head's fields as the codec would write them: its own, then those added.
  std::vector<std::pair<std::string, std::string>> fields;
};

class FakeCall final : public upstream::UpstreamCall {
 public:
  FakeCall(Log& log, Script script, SentRequest* record = nullptr)
      : log_(log), script_(std::move(script)), record_(record) {}
  /// The request as sent is kept in `record`, which outlives the call.
  void destroy() noexcept override {
    if (record_ != nullptr) *record_ = {request_body, request_ended, request_fields};
    delete this;
  }

  asio::awaitable<beast::error_code> send_head(RequestHeader& head, const http::ExtraFields& extra,
                                               upstream::RequestFraming framing,
                                               TimePoint) override;
  asio::awaitable<beast::error_code> send_body(std::string_view data, bool last,
                                               TimePoint) override;
  bool answered_early() const override { return script_.answers_early && request_pieces_ > 0; }
  bool full_duplex() const override { return script_.duplex; }
  void interrupt() override;
  asio::awaitable<beast::error_code> read_head(bool, std::optional<std::uint64_t>, FieldsAllocator,
                                               TimePoint) override;
  ResponseHeader& head() override { return head_; }
  Framing framing() const override { return script_.framing; }
  asio::awaitable<upstream::AnswerPiece> read_body(TimePoint) override;
  bool maybe_processed() const override { return !script_.refused; }
  bool reached_upstream() const override { return !script_.send_error; }

  std::string request_body;
  bool request_ended = false;
  bool te_trailers = false;
  std::vector<std::pair<std::string, std::string>> request_fields;

 private:
  Log& log_;
  Script script_;
  SentRequest* record_;
  ResponseHeader head_;
  std::size_t next_head_ = 0;
  std::size_t next_piece_ = 0;
  int request_pieces_ = 0;
  bool ended_ = false;
  bool interrupted_ = false;
  Turns turns_;
  /// duplex: waits until the request has `pieces` pieces or its end; false when
  /// interrupted or 2 s passed.
  asio::awaitable<bool> request_has(int pieces);
};

/// Makes calls from scripts, in turn; connection refused when none is left.
class FakeUpstream final : public upstream::Upstream {
 public:
  explicit FakeUpstream(Log& log) : log_(log) {}
  asio::awaitable<std::pair<beast::error_code, upstream::UpstreamCallPtr>> open_call(
      FieldsAllocator) override;
  std::vector<Script> scripts;
  SentRequest last;  // the last call's request, as sent
  int opened = 0;    // calls made

 private:
  Log& log_;
  std::size_t next_ = 0;
};

}  // namespace idemproxy::testing
