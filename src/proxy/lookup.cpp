#include "proxy/lookup.hpp"

#include <boost/url/parse.hpp>
#include <nlohmann/json.hpp>

#include "http/query.hpp"
#include "idemproxy/common/clock.hpp"
#include "idemproxy/engine/engine.hpp"
#include "idemproxy/engine/key.hpp"
#include "proxy/phases.hpp"

namespace idemproxy::proxy {
namespace {

// The record as its caller may see it: no body, no fields, no fingerprint.
nlohmann::json describe(const store::Record& r, const engine::RoutePolicy& route) {
  nlohmann::json out;
  out["created_at"] = rfc3339(r.created_at);
  const bool completed = r.state == store::RecordState::completed;
  const TimePoint replay_until = engine::replay_until(r, route.after_expiry_reject, route.ttl);
  const bool expired = r.expired || (completed && r.store_now >= replay_until);
  if (expired) {
    out["state"] = "expired";
  } else if (r.state == store::RecordState::in_flight) {
    out["state"] = r.stale ? "unknown" : "in_flight";
  } else {
    out["state"] = std::string(store::to_string(r.state));
  }
  if (completed) {
    out["completed_at"] = rfc3339(r.completed_at);
    if (r.response) out["status"] = r.response->status;
  }
  out["expires_at"] = rfc3339(completed ? replay_until : r.expires_at);
  out["replays"] = completed && !expired && r.response && r.response->body_stored;
  return out;
}

}  // namespace

asio::awaitable<void> send_lookup(RequestContext& ctx, std::string_view target) {
  ctx.outcome = ops::Outcome::passthrough;
  const auto url = boost::urls::parse_origin_form(target);
  const std::string path = url ? http::query_param(*url, "path") : std::string();
  const engine::RoutePolicy* route = path.empty() ? nullptr : ctx.settings.routes.match(path);
  if (route == nullptr || !route->enabled) {
    ctx.fail(ProblemKind::malformed_request,
             path.empty() ? "the lookup names no path: ?path=<the request's path>"
                          : "no route protects " + path,
             ops::Outcome::bad_request);
    co_await send_problem(ctx);
    co_return;
  }
  const std::string_view given = ctx.ex.head()[route->header];
  if (given.empty()) {
    ctx.fail(ProblemKind::missing_key, "the lookup needs the " + route->header + " it asks about",
             ops::Outcome::missing_key);
    co_await send_problem(ctx);
    co_return;
  }
  auto parsed = engine::parse_key(given);
  if (const auto* bad = std::get_if<engine::KeyError>(&parsed)) {
    ctx.fail(ProblemKind::bad_key, bad->reason, ops::Outcome::bad_key);
    co_await send_problem(ctx);
    co_return;
  }
  // The scope comes from this request's credentials, as for the request it asks
  // about: a caller finds only its own keys.
  const store::RecordId id{idempotent::record_scope(*route, ctx),
                           std::get<std::string>(std::move(parsed))};
  Runtime& rt = ctx.rt;
  auto found = co_await rt.blocking([&rt, &id] { return rt.views().find(id); });
  if (!found.ok()) {
    ctx.fail(ProblemKind::store_unavailable, found.error().detail, ops::Outcome::store_unavailable);
    ctx.error->retry_after_seconds = 1;
    co_await send_problem(ctx);
    co_return;
  }
  nlohmann::json body = found.value() ? describe(*found.value(), *route)
                                      : nlohmann::json{{"state", "unknown"}, {"replays", false}};
  body["key"] = id.key;
  body["route"] = route->name;
  const std::string text = body.dump();
  ResponseHeader head;
  head.result(bhttp::status::ok);
  head.set(bhttp::field::content_type, "application/json");
  head.set(bhttp::field::cache_control, "no-store");
  const Trailers none;
  co_await send_answer(ctx, head, text, none);
}

}  // namespace idemproxy::proxy
