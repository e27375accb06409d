#include "world.hpp"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "idemproxy/ops/logging.hpp"
#include "proxy/policy_document.hpp"
#include "proxy/remote_feed.hpp"
#include "server/listener.hpp"

namespace idemproxy::testing {

std::string Reply::field(std::string_view name) const {
  for (const auto& [n, v] : fields) {
    if (beast::iequals(n, name)) return v;
  }
  return {};
}

std::string to_string(Codec c) { return c == Codec::http1 ? "http1" : "http2"; }

World::World(const std::string& config, store::Store* store, const std::string& upstream)
    : memory_(clock_),
      upstream_(io, {asio::ip::make_address("127.0.0.1"), 0}),
      listener_(io, {asio::ip::make_address("127.0.0.1"), 0}) {
  ops::configure_logging("warn", "text");
  answer = [](const StringRequest&) { return UpstreamAnswer{}; };
  const std::string text =
      "upstream: {url: 'http://127.0.0.1:" + std::to_string(upstream_.local_endpoint().port()) +
      "', " + upstream + "}\n" + config;
  auto cfg =
      config::parse_config(text, "world.yaml", [](const std::string&) { return std::nullopt; });
  store_ = store != nullptr ? store : &memory_;
  runtime_ = std::make_unique<proxy::Runtime>(io, proxy::make_settings(std::move(cfg)), *store_,
                                              metrics_, 2);
  service_ = std::make_unique<proxy::ProxyService>(*runtime_);
  asio::co_spawn(io, accept_upstream(), asio::detached);
  asio::co_spawn(io, accept_clients(), asio::detached);
}

World::~World() {
  beast::error_code ec;
  listener_.close(ec);
  upstream_.close(ec);
  runtime_->draining = true;
  // Its watchers use this runtime (with a store shared with another World, that
  // World's go too).
  if (listening_) store_->watch({});
  tracker_.close_idle();
  for (int i = 0; i < 50 && io.poll() > 0; ++i) {
  }
  // As the server does: the database pool's tasks (a store call's answer, a completion
  // retried in the background) end before the runtime they use goes.
  runtime_->db_pool.stop();
  runtime_->db_pool.join();
  runtime_.reset();
}

void World::listen() {
  store_->watch(proxy::announcement_watchers(*runtime_));
  listening_ = true;
  // Another instance reads the holder's lease: renewed as the server renews it.
  asio::co_spawn(io, proxy::renew_leases(*runtime_, std::chrono::milliseconds{100}),
                 asio::detached);
}

void World::stop_upstream() {
  beast::error_code ec;
  upstream_.close(ec);
}

int World::executions(const std::string& key) const {
  const auto it = executions_.find(key);
  return it == executions_.end() ? 0 : it->second;
}

void World::run_until(const bool& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{20};
  while (!done && std::chrono::steady_clock::now() < deadline) {
    io.run_one_for(std::chrono::milliseconds{50});
  }
  ASSERT_TRUE(done) << "no answer within 20 s";
}

Reply World::send(Codec codec, const Request& request) {
  return send_all(codec, {request}).front();
}

std::vector<Reply> World::send_all(Codec codec, const std::vector<Request>& requests) {
  std::vector<Reply> replies(requests.size());
  std::size_t pending = requests.size();
  bool done = pending == 0;
  const auto to = listener_.local_endpoint();
  for (std::size_t i = 0; i < requests.size(); ++i) {
    asio::co_spawn(
        io,
        [&, i]() -> asio::awaitable<void> {
          if (requests[i].start_after.count() > 0) {
            asio::steady_timer pause(io, requests[i].start_after);
            co_await pause.async_wait(asio::use_awaitable);
          }
          // Named, not a temporary in the co_await expression: GCC 12 destroys those twice.
          if (codec == Codec::http1) {
            Reply reply = co_await http1_request(to, requests[i]);
            replies[i] = std::move(reply);
          } else {
            Reply reply = co_await http2_request(to, requests[i]);
            replies[i] = std::move(reply);
          }
          if (--pending == 0) done = true;
        },
        [](const std::exception_ptr& e) {
          if (e) std::rethrow_exception(e);
        });
  }
  run_until(done);
  // What the proxy still does after the client's answer (a completion) settles.
  for (int i = 0; i < 20 && io.poll() > 0; ++i) {
  }
  return replies;
}

asio::awaitable<void> World::accept_clients() {
  for (;;) {
    auto [ec, socket] = co_await listener_.async_accept(use_nothrow);
    if (ec) co_return;
    if (client_send_buffer) {
      socket.set_option(asio::socket_base::send_buffer_size(*client_send_buffer));
    }
    auto conn = std::make_shared<ClientConnection>(std::move(socket), nullptr);
    asio::co_spawn(io, server::serve_client(conn, *service_, tracker_),
                   [](const std::exception_ptr& e) {
                     if (e) std::rethrow_exception(e);
                   });
  }
}

asio::awaitable<void> World::accept_upstream() {
  for (;;) {
    auto [ec, socket] = co_await upstream_.async_accept(use_nothrow);
    if (ec) co_return;
    ++connections_;
    asio::co_spawn(io, serve_upstream(std::move(socket)), asio::detached);
  }
}

asio::awaitable<void> World::serve_upstream(tcp::socket socket) {
  beast::flat_buffer buffer;
  for (;;) {
    RequestParser<bhttp::string_body> parser;
    parser.body_limit(boost::none);
    auto [hec, hn] = co_await bhttp::async_read_header(socket, buffer, parser, use_nothrow);
    if (hec) co_return;
    const bool early = answer_heads && answer_heads(parser.get());
    if (!early) {
      auto [ec, n] = co_await bhttp::async_read(socket, buffer, parser, use_nothrow);
      if (ec) co_return;
    }
    StringRequest req = parser.release();
    ++total_;
    ++executions_[std::string(req["Idempotency-Key"])];
    last_ = req;
    const UpstreamAnswer a = answer(req);
    if (a.delay.count() > 0) {
      asio::steady_timer pause(io, a.delay);
      co_await pause.async_wait(use_nothrow);
    }
    if (a.hang_up) co_return;
    std::string out = "HTTP/1.1 " + std::to_string(a.status) + " X\r\n";
    for (const auto& [name, value] : a.fields) out += name + ": " + value + "\r\n";
    if (!a.stream.empty()) {
      out += "Transfer-Encoding: chunked\r\n\r\n";
      for (const auto& [pause, piece] : a.stream) {
        asio::steady_timer wait(io, pause);
        co_await wait.async_wait(use_nothrow);
        char size[32];
        std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
        out += size + piece + "\r\n";
        auto [sec, sn] = co_await asio::async_write(socket, asio::buffer(out), use_nothrow);
        if (sec) co_return;
        out.clear();
      }
      if (a.cut) co_return;
      out = "0\r\n\r\n";
    } else if (a.trailers.empty()) {
      out += "Content-Length: " + std::to_string(a.body.size()) + "\r\n\r\n" + a.body;
    } else {
      out += "Transfer-Encoding: chunked\r\n\r\n";
      if (!a.body.empty()) {
        char size[32];
        std::snprintf(size, sizeof size, "%zx\r\n", a.body.size());
        out += size + a.body + "\r\n";
      }
      out += "0\r\n";
      for (const auto& [name, value] : a.trailers) out += name + ": " + value + "\r\n";
      out += "\r\n";
    }
    auto [wec, w] = co_await asio::async_write(socket, asio::buffer(out), use_nothrow);
    if (early && a.keeps_open) {
      asio::steady_timer unread(io, std::chrono::seconds{10});
      co_await unread.async_wait(use_nothrow);
    }
    if (wec || a.close_after || early) co_return;
    if (!a.unasked.empty()) {
      asio::steady_timer later(io, std::chrono::milliseconds(20));
      co_await later.async_wait(use_nothrow);
      auto [uec, u] = co_await asio::async_write(socket, asio::buffer(a.unasked), use_nothrow);
      if (uec) co_return;
    }
  }
}

Request json_post(std::string key, std::string path, std::string body) {
  return {"POST",
          std::move(path),
          {{"Idempotency-Key", std::move(key)}, {"Content-Type", "application/json"}},
          std::move(body),
          {}};
}

std::string problem_type(const Reply& r) {
  return nlohmann::json::parse(r.body, nullptr, false).value("type", std::string());
}

}  // namespace idemproxy::testing
