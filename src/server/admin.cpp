// The admin listener. /healthz, /readyz and /metrics are open (probes and scrapers),
// and so is the admin page's code under /ui (it holds no data); everything under
// /admin/ needs `Authorization: Bearer <admin_token>`.
#include "server/admin.hpp"

#include <openssl/crypto.h>

#include <algorithm>
#include <boost/url/parse.hpp>

#include "http/query.hpp"
#include "idemproxy/ops/records.hpp"
#include "server/admin_ui.hpp"
#include "server/listener.hpp"

namespace idemproxy::server {

using http::asio::awaitable;
using http::bhttp::status;
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

// Admin errors are problem+json (RFC 9457), as the proxy's own are: a stable type per
// status, and what went wrong in `detail`.
void set_problem(http::StringResponse& res, status code, const std::string& detail) {
  res.result(code);
  res.set(bhttp::field::content_type, "application/problem+json");
  const std::string reason(bhttp::obsolete_reason(code));
  std::string slug;
  for (const char c : reason) {
    slug += c == ' ' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  const nlohmann::json body = {{"type", "https://idemproxy.dev/problems/admin-" + slug},
                               {"title", reason},
                               {"status", static_cast<unsigned>(code)},
                               {"detail", detail}};
  res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// RFC 9110 15.5.6: 405 names the methods the resource has.
void set_not_allowed(http::StringResponse& res, const char* allow) {
  set_problem(res, status::method_not_allowed, std::string("this endpoint takes ") + allow);
  res.set(bhttp::field::allow, allow);
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
    case RecordAction::Status::bad_request:
      return status::bad_request;
    case RecordAction::Status::not_found:
      return status::not_found;
    case RecordAction::Status::store_error:
      return status::service_unavailable;
  }
  return status::internal_server_error;
}

// Routes /admin/... once the token is checked. Store calls run on the database pool.
awaitable<void> handle_api(const http::StringRequest& req, http::StringResponse& res,
                           ServerRuntime& rt) {
  const auto url = boost::urls::parse_origin_form(req.target());
  if (!url) {
    set_problem(res, status::bad_request, "the request target is not a valid path");
    co_return;
  }
  std::vector<std::string> segments;
  for (auto s : url->segments()) segments.emplace_back(s);
  const store::RecordId id{http::query_param(*url, "scope"),
                           segments.size() >= 3 ? segments[2] : ""};
  auto& store = rt.record_store;
  const auto verb = req.method();
  const bool keys = segments.size() >= 2 && segments[1] == "keys";
  RecordAction action;
  if (segments.size() == 2 && (segments[1] == "stats" || segments[1] == "policy")) {
    if (verb != bhttp::verb::get) {
      set_not_allowed(res, "GET");
      co_return;
    }
    const auto settings = rt.settings();
    if (segments[1] == "policy") {
      res.set(bhttp::field::content_type, "application/json");
      res.body() = settings->policy.json;
      co_return;
    }
    nlohmann::json stats = rt.metrics.snapshot();
    nlohmann::json routes = nlohmann::json::array();
    for (const auto& r : settings->routes.routes()) routes.push_back(r.name);
    stats["routes"] = std::move(routes);
    set_json(res, status::ok, stats);
    co_return;
  }
  if (segments.size() == 2 && segments[1] == "reload") {
    if (verb != bhttp::verb::post) {
      set_not_allowed(res, "POST");
      co_return;
    }
    const auto error = rt.reload();
    if (error) {
      set_problem(res, status::bad_request, "reload rejected: " + *error);
    } else {
      set_json(res, status::ok, {{"reloaded", true}});
    }
    co_return;
  }
  const bool quotas = segments.size() == 2 && segments[1] == "quotas";
  if ((keys && segments.size() == 2) || quotas) {
    if (verb != bhttp::verb::get) {
      set_not_allowed(res, "GET");
      co_return;
    }
    const std::string state = http::query_param(*url, "state");
    const std::string limit_text = http::query_param(*url, "limit");
    int limit = 50;
    if (!limit_text.empty()) {
      const auto parsed = ops::parse_limit(limit_text);
      if (!parsed) {
        set_problem(res, status::bad_request, "limit must be a number from 1 to 1000");
        co_return;
      }
      limit = *parsed;
    }
    if (quotas) {
      action = co_await rt.blocking([&store, &limit] { return ops::list_quotas(store, limit); });
    } else {
      action = co_await rt.blocking(
          [&store, &state, &limit] { return list_records(store, state, limit); });
    }
  } else if (keys && segments.size() == 3) {
    if (verb == bhttp::verb::get) {
      const std::string body = http::query_param(*url, "body");
      const bool with_body = body == "1" || body == "true";
      action = co_await rt.blocking(
          [&store, &id, with_body] { return show_record(store, id, with_body); });
    } else if (verb == bhttp::verb::delete_) {
      action =
          co_await rt.blocking([&store, &id] { return purge_record(store, id, "the admin API"); });
      rt.coordinator.forget(id);
    } else {
      set_not_allowed(res, "GET, DELETE");
      co_return;
    }
  } else if (keys && segments.size() == 4 && segments[3] == "resolve") {
    if (verb != bhttp::verb::post) {
      set_not_allowed(res, "POST");
      co_return;
    }
    action =
        co_await rt.blocking([&store, &id] { return resolve_record(store, id, "the admin API"); });
  } else {
    set_problem(res, status::not_found,
                "no such admin endpoint (/admin/keys, /admin/keys/KEY, /admin/keys/KEY/resolve, "
                "/admin/quotas, /admin/stats, /admin/policy, /admin/reload)");
    co_return;
  }
  if (action.status == RecordAction::Status::ok) {
    set_json(res, status::ok, action.body);
  } else {
    set_problem(res, status_of(action), action.body.value("error", std::string("failed")));
  }
}

// 200 when requests can be served. Without the store (not prepared yet, or not
// answering), that holds only when every route serves without it (fail_open,
// shadow, disabled); the body then says the proxy runs unprotected.
awaitable<void> answer_readiness(http::StringResponse& res, ServerRuntime& rt) {
  std::string problem;
  if (!rt.store_prepared) {
    problem = "store not ready: " + rt.store_problem();
  } else {
    auto& store = rt.record_store;
    const auto ping = co_await rt.blocking([&store] { return store.ping(); });
    if (!ping.ok()) problem = "store unavailable: " + ping.error().detail;
  }
  const auto settings = rt.settings();
  const auto& routes = settings->routes.routes();
  const bool serves_anyway = std::all_of(routes.begin(), routes.end(),
                                         [](const auto& r) { return r.serves_without_store(); });
  if (rt.draining) {
    res.result(status::service_unavailable);
    res.body() = "draining\n";
  } else if (problem.empty()) {
    res.body() = "ready\n";
  } else if (serves_anyway) {
    res.body() = "ready without idempotency protection (every route fails open): " + problem + "\n";
  } else {
    res.result(status::service_unavailable);
    res.body() = problem + "\n";
  }
}

// The admin page's files. Its Content-Security-Policy lets it run only its own script
// and style, and talk only to this listener: no inline script, no other origin, no
// framing, no form posting anywhere (the token field has no name and never leaves in
// a URL).
bool answer_ui(std::string_view path, http::StringResponse& res) {
  std::string_view name;
  if (path == "/ui" || path == "/ui/") {
    name = "index.html";
  } else if (path.starts_with("/ui/")) {
    name = path.substr(4);
  } else {
    return false;
  }
  const auto& files = ui_files();
  const auto it =
      std::find_if(files.begin(), files.end(), [name](const UiFile& f) { return f.name == name; });
  if (it == files.end()) {
    res.result(status::not_found);
    res.body() = "not found\n";
    return true;
  }
  res.set(bhttp::field::content_type, it->content_type);
  res.set("Content-Security-Policy",
          "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
          "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
  res.set("X-Content-Type-Options", "nosniff");
  res.set("X-Frame-Options", "DENY");
  res.set("Referrer-Policy", "no-referrer");
  res.body() = std::string(it->body);
  return true;
}

}  // namespace

awaitable<void> serve_admin(boost::asio::ip::tcp::socket socket, ServerRuntime& rt) {
  http::beast::tcp_stream stream(std::move(socket));
  http::beast::flat_buffer buffer;
  for (;;) {
    RequestParser<bhttp::string_body> parser;
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
        set_problem(res, status::forbidden, "the admin API is off: set admin_token");
      } else if (!authorized(req, token)) {
        set_problem(res, status::unauthorized, "missing or wrong bearer token");
        res.set(bhttp::field::www_authenticate, "Bearer realm=\"idemproxy\"");
      } else {
        co_await handle_api(req, res, rt);
      }
    } else if (req.method() != bhttp::verb::get && req.method() != bhttp::verb::head) {
      res.result(status::method_not_allowed);
      res.body() = "only GET\n";
    } else if (answer_ui(path, res)) {
    } else if (path == "/healthz") {
      res.body() = "ok\n";
    } else if (path == "/readyz") {
      co_await answer_readiness(res, rt);
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

boost::asio::awaitable<void> accept_admin(boost::asio::io_context& io,
                                          boost::asio::ip::tcp::acceptor& acceptor,
                                          ServerRuntime& rt) {
  for (;;) {
    const auto strand = boost::asio::make_strand(io);
    auto [ec, socket] = co_await acceptor.async_accept(strand, http::use_nothrow);
    if (ec) {
      if (!acceptor.is_open()) co_return;
      continue;
    }
    auto ex = socket.get_executor();
    boost::asio::co_spawn(ex, serve_admin(std::move(socket), rt), log_exception);
  }
}

}  // namespace idemproxy::server
