#include "proxy/duplex.hpp"

#include <boost/asio/co_spawn.hpp>
#include <exception>

namespace idemproxy::proxy {

RequestSide::RequestSide(const asio::any_io_executor& ex, upstream::UpstreamCall& call,
                         RequestHeader& head, const ExtraFields& extra, Exchange& from,
                         bool te_trailers, Duration timeout, std::optional<TimePoint> deadline)
    : ex_(ex),
      call_(call),
      head_(head),
      extra_(extra),
      from_(from),
      te_trailers_(te_trailers),
      timeout_(timeout),
      deadline_(deadline),
      head_signal_(ex),
      done_signal_(ex) {}

void RequestSide::start() {
  // Ended with an exception too (the memory ran out): finish() must not wait forever.
  asio::co_spawn(ex_, run(), [this](const std::exception_ptr&) {
    done_ = true;
    done_signal_.notify();
  });
}

asio::awaitable<void> RequestSide::run() {
  out_.sent = co_await send_request(call_, head_, extra_, from_, te_trailers_, timeout_, deadline_,
                                    out_.read_error, out_.write_error, &answer_over_);
  if (answer_over_) {
    // finish() stopped it (the body dropped, the stream interrupted): whatever that
    // made it end with is no failure of its own, and must not be blamed for the answer's.
    out_ = Outcome{};
    co_return;
  }
  if (out_.sent != RelayError::none) {
    // The client's body broke off, or the upstream took no more of it: the answer's
    // read ends, and the caller tells which.
    call_.interrupt();
    co_return;
  }
  const auto by = std::chrono::steady_clock::now() + timeout_;
  while (!head_came_ && !answer_over_) {
    if (!co_await head_signal_.wait_until(by)) break;
  }
  if (!head_came_ && !answer_over_) {
    out_.head_late = true;
    call_.interrupt();
  }
}

void RequestSide::head_read() {
  head_came_ = true;
  head_signal_.notify();
}

asio::awaitable<RequestSide::Outcome> RequestSide::finish() {
  answer_over_ = true;
  if (!done_) {
    from_.drop_body();
    call_.interrupt();
    head_signal_.notify();
    while (!done_) co_await done_signal_.wait();
  }
  co_return out_;
}

}  // namespace idemproxy::proxy
