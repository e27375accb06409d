// The admin listener. /healthz, /readyz and /metrics are open (probes and scrapers);
// everything under /admin/ needs `Authorization: Bearer <admin_token>`.
#include "http/admin.hpp"

#include <openssl/crypto.h>

#include <boost/url/parse.hpp>

#include "idemproxy/ops/records.hpp"

namespace idemproxy::http {

using http::asio::awaitable;
using http::bhttp::status;
namespace bhttp = http::bhttp;
using ops::list_records;
using ops::purge_record;
using ops::RecordAction;
using ops::resolve_record;
using ops::show_record;

namespace {

void set_json(http::StringResponse& res, status code, const nlohmann::json& body) {
  res.result(code);
  res.set(bhttp::field::content_type, "application/json");
  res.body() = body.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

bool authorized(const http::StringRequest& req, const std::string& token) {
  const std::string_view auth = req[bhttp::field::authorization];
  constexpr std::string_view kBearer = "Bearer ";
  if (!auth.starts_with(kBearer)) return false;
  const std::string_view given = auth.substr(kBearer.size());
  return given.size() == token.size() &&
         CRYPTO_memcmp(given.data(), token.data(), token.size()) == 0;
}

status status_of(const RecordAction& a) {
  switch (a.status) {
    case RecordAction::Status::ok:
      return status::ok;
    case RecordAction::Status::not_found:
      return status::not_found;
    case RecordAction::Status::store_error:
      return status::service_unavailable;
  }
  return status::internal_server_error;
}

std::string param(const boost::urls::url_view& url, std::string_view name) {
  const auto it = url.params().find(name);
  return it == url.params().end() ? std::string() : std::string((*it).value);
}

// Routes /admin/... once the token is checked. Store calls run on the database pool.
awaitable<void> handle_api(const http::StringRequest& req, http::StringResponse& res,
                           http::Runtime& rt) {
  const auto url = boost::urls::parse_origin_form(req.target());
  if (!url) {
    set_json(res, status::bad_request, {{"error", "malformed target"}});
    co_return;
  }
  std::vector<std::string> segments;
  for (auto s : url->segments()) segments.emplace_back(s);
  const store::RecordId id{param(*url, "scope"), segments.size() >= 3 ? segments[2] : ""};
  auto& store = rt.record_store;
  const auto verb = req.method();
  RecordAction action;
  if (segments.size() == 2 && segments[1] == "reload" && verb == bhttp::verb::post) {
    const auto error = rt.reload();
    if (error)
      set_json(res, status::bad_request, {{"reloaded", false}, {"error", *error}});
    else
      set_json(res, status::ok, {{"reloaded", true}});
    co_return;
  }
  if (segments.size() < 2 || segments[1] != "keys") {
    set_json(res, status::not_found, {{"error", "no such admin endpoint"}});
    co_return;
  }
  if (segments.size() == 2 && verb == bhttp::verb::get) {
    const std::string state = param(*url, "state");
    const std::string limit_text = param(*url, "limit");
    int limit = 50;
    if (!limit_text.empty()) {
      const auto parsed = ops::parse_limit(limit_text);
      if (!parsed) {
        set_json(res, status::bad_request, {{"error", "limit must be a number from 1 to 1000"}});
        co_return;
      }
      limit = *parsed;
    }
    action = co_await rt.blocking(
        [&store, &state, &limit] { return list_records(store, state, limit); });
  } else if (segments.size() == 3 && verb == bhttp::verb::get) {
    action = co_await rt.blocking([&store, &id] { return show_record(store, id); });
  } else if (segments.size() == 3 && verb == bhttp::verb::delete_) {
    action = co_await rt.blocking([&store, &id] { return purge_record(store, id); });
    rt.coordinator.forget(id);
  } else if (segments.size() == 4 && segments[3] == "resolve" && verb == bhttp::verb::post) {
    action = co_await rt.blocking([&store, &id] { return resolve_record(store, id); });
  } else {
    set_json(res, status::not_found, {{"error", "no such admin endpoint"}});
    co_return;
  }
  set_json(res, status_of(action), action.body);
}

}  // namespace

awaitable<void> serve_admin(boost::asio::ip::tcp::socket socket, http::Runtime& rt) {
  http::beast::tcp_stream stream(std::move(socket));
  http::beast::flat_buffer buffer;
  for (;;) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(8 * 1024);
    parser.body_limit(std::uint64_t{64} << 10);
    stream.expires_after(std::chrono::seconds{30});
    auto [ec, n] = co_await bhttp::async_read(stream, buffer, parser, http::use_nothrow);
    if (ec) break;
    const auto req = parser.release();
    const std::string_view target = req.target();
    const std::string_view path = target.substr(0, target.find('?'));

    http::StringResponse res{status::ok, req.version()};
    res.set(bhttp::field::content_type, "text/plain; charset=utf-8");
    res.set(bhttp::field::cache_control, "no-store");
    if (path == "/admin" || path.starts_with("/admin/")) {
      const std::string token = rt.settings()->config.admin_token;
      if (token.empty()) {
        set_json(res, status::forbidden, {{"error", "the admin API is off: set admin_token"}});
      } else if (!authorized(req, token)) {
        set_json(res, status::unauthorized, {{"error", "missing or wrong bearer token"}});
        res.set(bhttp::field::www_authenticate, "Bearer realm=\"idemproxy\"");
      } else {
        co_await handle_api(req, res, rt);
      }
    } else if (req.method() != bhttp::verb::get && req.method() != bhttp::verb::head) {
      res.result(status::method_not_allowed);
      res.body() = "only GET\n";
    } else if (path == "/healthz") {
      res.body() = "ok\n";
    } else if (path == "/readyz") {
      auto& store = rt.record_store;
      const auto ping = co_await rt.blocking([&store] { return store.ping(); });
      if (rt.draining) {
        res.result(status::service_unavailable);
        res.body() = "draining\n";
      } else if (!ping.ok()) {
        res.result(status::service_unavailable);
        res.body() = "store unavailable: " + ping.error().detail + "\n";
      } else {
        res.body() = "ready\n";
      }
    } else if (path == "/metrics") {
      res.set(bhttp::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      res.body() = rt.metrics.render();
    } else {
      res.result(status::not_found);
      res.body() = "not found\n";
    }
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    auto [wec, wn] = co_await bhttp::async_write(stream, res, http::use_nothrow);
    if (wec || !res.keep_alive()) break;
  }
  http::beast::error_code ignored;
  stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_send, ignored);
}

}  // namespace idemproxy::http
