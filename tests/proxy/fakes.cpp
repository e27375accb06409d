#include "fakes.hpp"

#include <chrono>

namespace idemproxy::testing {

asio::awaitable<bool> Turns::until(std::function<bool()> ready, std::chrono::milliseconds limit) {
  http::Signal signal(co_await asio::this_coro::executor);
  waiting_ = &signal;
  const auto by = std::chrono::steady_clock::now() + limit;
  bool came = true;
  while (!ready()) {
    if (!co_await signal.wait_until(by) && !ready()) {
      came = false;
      break;
    }
  }
  waiting_ = nullptr;
  co_return came;
}

FakeExchange::FakeExchange(Log& log, std::vector<std::string> pieces, bool takes_trailers)
    : log_(log), pieces_(std::move(pieces)), takes_trailers_(takes_trailers) {
  head_ = &request_;
  facts_.peer = &peer_value_;
  kept_ = &kept_value_;
  facts_.has_body = !pieces_.empty();
  request_.method(bhttp::verb::post);
  request_.target("/");
}

void FakeExchange::request(std::shared_ptr<const Settings> settings, std::string target,
                           const std::vector<std::pair<std::string, std::string>>& fields) {
  facts_.settings = std::move(settings);
  request_.target(target);
  request_.version(11);
  for (const auto& [name, value] : fields) request_.insert(name, value);
  std::uint64_t length = 0;
  for (const auto& p : pieces_) length += p.size();
  facts_.content_length = length;
  facts_.started = std::chrono::steady_clock::now();
  peer_value_.ip = "127.0.0.1";
}

std::optional<bool> FakeExchange::start_prepared(const PreparedAnswer& answer,
                                                 std::span<const ExtraField> extra) {
  status = answer.status;
  replayed = true;
  fields.clear();
  for (const auto& f : answer.fields) fields.emplace_back(f.name, f.value);
  for (const auto& f : extra) fields.emplace_back(f.name, f.value);
  if (replay_later) {
    log_.push_back("client got replay head " + std::to_string(status));
    prepared_body_ = answer.body;
    prepared_trailers_ = answer.trailers;
    return std::nullopt;
  }
  body.assign(answer.body);
  trailers.assign(answer.trailers.begin(), answer.trailers.end());
  ended = true;
  answered_ = true;
  log_.push_back("client got replay " + std::to_string(status));
  return true;
}

asio::awaitable<bool> FakeExchange::finish_prepared() {
  // What start_prepared() viewed is still there.
  body.assign(prepared_body_);
  trailers.assign(prepared_trailers_.begin(), prepared_trailers_.end());
  ended = true;
  answered_ = true;
  log_.push_back("client got replay rest");
  co_return true;
}

void FakeExchange::drop_body() {
  log_.push_back("client body dropped");
  dropped_ = true;
  turns_.notify();
}

asio::awaitable<BodyPiece> FakeExchange::read_body(std::size_t, std::optional<TimePoint>) {
  BodyPiece piece;
  if (duplex && next_ > 0) {
    // The next piece answers the answer's: it comes once the client has that.
    const auto turn = next_;
    const bool open = stays_open && next_ == pieces_.size();
    const bool came = co_await turns_.until(
        [&] { return dropped_ || (!open && answer_pieces_ >= static_cast<int>(turn)); });
    if (dropped_) piece.error = BodyPiece::Error::gone;
    if (!came) piece.error = BodyPiece::Error::timeout;
    if (piece.error != BodyPiece::Error::none) co_return piece;
  }
  if (next_ == pieces_.size()) {
    piece.error = fails_with;
    piece.end = fails_with == BodyPiece::Error::none;
    co_return piece;
  }
  ++pieces_read;
  log_.push_back("client sent " + pieces_[next_]);
  piece.data = pieces_[next_++];
  piece.end = next_ == pieces_.size() && fails_with == BodyPiece::Error::none && !stays_open;
  co_return piece;
}

asio::awaitable<bool> FakeExchange::send_interim(ResponseHeader& head) {
  log_.push_back("client got " + std::to_string(head.result_int()));
  co_return true;
}

asio::awaitable<bool> FakeExchange::send_head(ResponseHeader& head, Framing f) {
  status = head.result_int();
  fields.clear();
  for (const auto& h : head) fields.emplace_back(h.name_string(), h.value());
  framing = f;
  log_.push_back("client got head " + std::to_string(status));
  co_return true;
}

asio::awaitable<bool> FakeExchange::send_body(std::string_view data, bool last, Trailers t) {
  if (gone_after_sends && sends_ >= *gone_after_sends) co_return false;
  ++sends_;
  if (!data.empty()) ++answer_pieces_;
  turns_.notify();
  body.append(data);
  if (!data.empty()) log_.push_back("client got " + std::string(data));
  if (last) {
    trailers.assign(t.begin(), t.end());
    ended = true;
    answered_ = true;
    log_.push_back("client got end");
  }
  co_return true;
}

asio::awaitable<beast::error_code> FakeCall::send_head(RequestHeader& head,
                                                       const http::ExtraFields& extra,
                                                       upstream::RequestFraming framing,
                                                       TimePoint) {
  for (const auto& f : head) request_fields.emplace_back(f.name_string(), f.value());
  for (const auto& f : extra) request_fields.emplace_back(f.name, f.value);
  te_trailers = framing.te_trailers;
  request_ended = !framing.body;
  log_.push_back("upstream got head");
  co_return script_.send_error;
}

asio::awaitable<beast::error_code> FakeCall::send_body(std::string_view data, bool last,
                                                       TimePoint) {
  if (interrupted_) co_return beast::error_code(asio::error::connection_reset);
  ++request_pieces_;
  request_body.append(data);
  request_ended = last;
  turns_.notify();
  log_.push_back("upstream got " + std::string(data) + (last ? " (last)" : ""));
  co_return beast::error_code{};
}

asio::awaitable<beast::error_code> FakeCall::read_head(bool, std::optional<std::uint64_t>,
                                                       FieldsAllocator, TimePoint) {
  if (next_head_ == 0 && script_.delay.count() > 0 && script_.duplex) {
    co_await turns_.until([&] { return interrupted_; }, script_.delay);
    if (interrupted_) co_return beast::error_code(asio::error::connection_reset);
  } else if (next_head_ == 0 && script_.delay.count() > 0) {
    asio::steady_timer working(co_await asio::this_coro::executor, script_.delay);
    co_await working.async_wait(use_nothrow);
  }
  if (script_.head_error) co_return script_.head_error;
  if (script_.duplex && !co_await request_has(1)) {
    co_return interrupted_ ? beast::error_code(asio::error::connection_reset)
                           : beast::error_code(beast::error::timeout);
  }
  const auto& [status, fields] = script_.heads.at(next_head_++);
  head_ = ResponseHeader();
  head_.result(status);
  for (const auto& [name, value] : fields) head_.insert(name, value);
  log_.push_back("upstream sent head " + std::to_string(status));
  co_return beast::error_code{};
}

asio::awaitable<upstream::AnswerPiece> FakeCall::read_body(TimePoint) {
  upstream::AnswerPiece piece;
  const auto end = [&] {
    ended_ = true;
    piece.end = true;
    piece.trailers = script_.trailers;
  };
  if (ended_) {
    end();
    co_return piece;
  }
  // The piece answers the request's piece of the same turn; the end, its end.
  const int turn = next_piece_ < script_.pieces.size() ? static_cast<int>(next_piece_) + 1 : -1;
  if (script_.duplex && !co_await request_has(turn)) {
    piece.error = interrupted_ ? beast::error_code(bhttp::error::partial_message)
                               : beast::error_code(beast::error::timeout);
    log_.push_back("upstream cut");
    co_return piece;
  }
  if (next_piece_ < script_.pieces.size()) {
    piece.data = script_.pieces[next_piece_++];
    log_.push_back("upstream sent " + std::string(piece.data));
    // The last piece comes with the end, as a whole small answer does.
    if (next_piece_ == script_.pieces.size() && !script_.cut && !script_.end_apart) end();
    co_return piece;
  }
  if (script_.cut) {
    piece.error = script_.cut;
    log_.push_back("upstream cut");
    co_return piece;
  }
  end();
  log_.push_back("upstream sent end");
  co_return piece;
}

void FakeCall::interrupt() {
  if (interrupted_ || (request_ended && ended_)) return;
  log_.push_back("upstream interrupted");
  interrupted_ = true;
  turns_.notify();
}

asio::awaitable<bool> FakeCall::request_has(int pieces) {
  co_return co_await turns_.until(
      [&] { return interrupted_ || request_ended || (pieces > 0 && request_pieces_ >= pieces); }) &&
      !interrupted_;
}

asio::awaitable<std::pair<beast::error_code, upstream::UpstreamCallPtr>> FakeUpstream::open_call(
    FieldsAllocator) {
  if (next_ == scripts.size())
    co_return std::make_pair(beast::error_code(asio::error::connection_refused), nullptr);
  ++opened;
  auto* call = new FakeCall(log_, scripts[next_++], &last);
  co_return std::make_pair(beast::error_code{}, upstream::UpstreamCallPtr(call));
}

}  // namespace idemproxy::testing
