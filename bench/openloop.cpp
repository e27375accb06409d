// An open-loop load generator: requests leave on a fixed schedule whether or not
// earlier ones have been answered, and each latency is measured from the moment its
// request was due, so queueing in the system under test is never hidden
// (no coordinated omission).
//   bench_openloop PORT PATH RATE SECONDS CONNECTIONS [KEY_PREFIX [KEY_SPACE]]
// Request i is due at start + i/RATE and goes out on connection i % CONNECTIONS.
// With KEY_PREFIX, request i carries `Idempotency-Key: KEY_PREFIX-i`; with KEY_SPACE
// too, `KEY_PREFIX-(i % KEY_SPACE)`: past the first KEY_SPACE, requests replay.
// Prints one JSON line: sent, ok, errors, rate, and latency percentiles in ms.
#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

struct Plan {
  unsigned short port = 0;
  std::string path;
  double rate = 0;
  double seconds = 0;
  int connections = 0;
  std::string key_prefix;
  long key_space = 0;  // 0: every key new
};

struct Results {
  std::vector<double> latencies_ms;
  long sent = 0;
  long errors = 0;
};

constexpr auto tuple = asio::as_tuple(asio::use_awaitable);

asio::awaitable<void> connection(const Plan& plan, int index, Clock::time_point start,
                                 Results& results) {
  auto ex = co_await asio::this_coro::executor;
  const tcp::endpoint target{asio::ip::make_address("127.0.0.1"), plan.port};
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
  asio::steady_timer timer(ex);
  const auto interval = std::chrono::duration<double>(1.0 / plan.rate);
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(plan.seconds));
  for (long i = index;; i += plan.connections) {
    const auto due = start + std::chrono::duration_cast<Clock::duration>(interval * i);
    if (due >= end) break;
    if (Clock::now() < due) {
      timer.expires_at(due);
      co_await timer.async_wait(tuple);
    }
    if (!stream) {
      stream.emplace(ex);
      buffer.clear();
      auto [cec] = co_await stream->async_connect(target, tuple);
      if (cec) {
        ++results.errors;
        stream.reset();
        continue;
      }
      stream->socket().set_option(tcp::no_delay(true));
    }
    http::request<http::string_body> req{http::verb::post, plan.path, 11};
    req.set(http::field::host, "bench");
    req.set(http::field::content_type, "application/json");
    if (!plan.key_prefix.empty()) {
      const long n = plan.key_space > 0 ? i % plan.key_space : i;
      req.set("Idempotency-Key", plan.key_prefix + "-" + std::to_string(n));
    }
    req.body() = R"({"amount":1000,"currency":"eur"})";
    req.prepare_payload();
    ++results.sent;
    stream->expires_after(std::chrono::seconds{30});
    auto [wec, w] = co_await http::async_write(*stream, req, tuple);
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 * 1024 * 1024);
    beast::error_code rec = wec;
    if (!wec)
      std::tie(rec, std::ignore) = co_await http::async_read(*stream, buffer, parser, tuple);
    if (rec || parser.get().result_int() >= 300) {
      ++results.errors;
      stream.reset();
      continue;
    }
    results.latencies_ms.push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - due).count());
    if (!parser.keep_alive()) stream.reset();  // the server closes: reconnect next time
  }
}

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto at = static_cast<std::size_t>(p / 100.0 * static_cast<double>(sorted.size() - 1));
  return sorted[at];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::cerr
        << "usage: bench_openloop PORT PATH RATE SECONDS CONNECTIONS [KEY_PREFIX [KEY_SPACE]]\n";
    return 2;
  }
  Plan plan{static_cast<unsigned short>(std::atoi(argv[1])),
            argv[2],
            std::atof(argv[3]),
            std::atof(argv[4]),
            std::atoi(argv[5]),
            argc > 6 ? argv[6] : "",
            argc > 7 ? std::atol(argv[7]) : 0};
  asio::io_context io(1);
  Results results;
  const auto start = Clock::now() + std::chrono::milliseconds{100};
  for (int c = 0; c < plan.connections; ++c) {
    asio::co_spawn(io, connection(plan, c, start, results), asio::detached);
  }
  io.run();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  auto& l = results.latencies_ms;
  std::sort(l.begin(), l.end());
  std::printf(
      "{\"sent\": %ld, \"ok\": %zu, \"errors\": %ld, \"rate\": %.1f, \"p50_ms\": %.3f, "
      "\"p90_ms\": %.3f, \"p99_ms\": %.3f, \"p999_ms\": %.3f, \"max_ms\": %.3f}\n",
      results.sent, l.size(), results.errors, static_cast<double>(l.size()) / elapsed,
      percentile(l, 50), percentile(l, 90), percentile(l, 99), percentile(l, 99.9),
      l.empty() ? 0.0 : l.back());
  return results.errors > 0 ? 1 : 0;
}
