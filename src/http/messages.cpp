// Problem responses, header rewriting and replay construction: everything the proxy
// says to a client that did not come verbatim from the upstream.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <set>
#include <span>

#include "http/headers.hpp"
#include "http/problem.hpp"
#include "http/relay.hpp"
#include "http/request_context.hpp"

namespace idemproxy::http {
namespace {

struct ProblemInfo {
  const char* slug;
  unsigned status;
  const char* title;
};

ProblemInfo info(ProblemKind kind) {
  switch (kind) {
    case ProblemKind::malformed_request:
      return {"malformed-request", 400, "Malformed HTTP request"};
    case ProblemKind::header_too_large:
      return {"header-too-large", 431, "Request header fields too large"};
    case ProblemKind::missing_key:
      return {"missing-key", 400, "Idempotency-Key is required"};
    case ProblemKind::bad_key:
      return {"bad-key", 400, "Invalid Idempotency-Key"};
    case ProblemKind::invalid_key:
      return {"invalid-key", 400, "No usable idempotency key in the request body"};
    case ProblemKind::body_too_large:
      return {"body-too-large", 413, "Request body too large"};
    case ProblemKind::key_mismatch:
      return {"key-mismatch", 422, "Idempotency-Key reused with a different request"};
    case ProblemKind::request_in_flight:
      return {"request-in-flight", 409, "A request with this Idempotency-Key is in progress"};
    case ProblemKind::outcome_unknown:
      return {"outcome-unknown", 409,
              "The outcome of the request with this Idempotency-Key is unknown"};
    case ProblemKind::outcome_indeterminate:
      return {"outcome-indeterminate", 409,
              "The request with this Idempotency-Key may have executed"};
    case ProblemKind::store_unavailable:
      return {"store-unavailable", 503, "Idempotency store unavailable"};
    case ProblemKind::upstream_unreachable:
      return {"upstream-unreachable", 502, "Upstream unreachable"};
    case ProblemKind::upstream_failed:
      return {"upstream-failed", 502, "Upstream connection failed"};
    case ProblemKind::upstream_timeout:
      return {"upstream-timeout", 504, "Upstream timed out"};
    case ProblemKind::response_not_stored:
      return {"response-not-stored", 409, "Response too large to replay"};
    case ProblemKind::record_unreadable:
      return {"record-unreadable", 500, "Idempotency record unreadable"};
    case ProblemKind::expired:
      return {"expired", 409, "Idempotency-Key expired"};
    case ProblemKind::internal:
      break;
  }
  return {"internal", 500, "Internal error"};
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

std::string problem_type(ProblemKind kind) {
  return std::string("https://idemproxy.dev/problems/") + info(kind).slug;
}

ProxyError refusal_error(engine::Refusal why, std::string detail, std::optional<int> retry_after) {
  using engine::Refusal;
  ProblemKind kind = ProblemKind::store_unavailable;
  switch (why) {
    case Refusal::key_mismatch:
      kind = ProblemKind::key_mismatch;
      break;
    case Refusal::request_in_flight:
      kind = ProblemKind::request_in_flight;
      break;
    case Refusal::outcome_unknown:
      kind = ProblemKind::outcome_unknown;
      break;
    case Refusal::outcome_indeterminate:
      kind = ProblemKind::outcome_indeterminate;
      break;
    case Refusal::store_unavailable:
      kind = ProblemKind::store_unavailable;
      break;
    case Refusal::response_not_stored:
      kind = ProblemKind::response_not_stored;
      break;
    case Refusal::record_unreadable:
      kind = ProblemKind::record_unreadable;
      break;
    case Refusal::expired:
      kind = ProblemKind::expired;
      break;
  }
  return {kind, std::move(detail), retry_after, std::nullopt};
}

std::optional<unsigned> route_status(const engine::RoutePolicy& route, ProblemKind kind) {
  const auto& s = route.statuses;
  switch (kind) {
    case ProblemKind::missing_key:
      return s.missing_key;
    case ProblemKind::key_mismatch:
      return s.mismatch;
    case ProblemKind::request_in_flight:
      return s.in_flight;
    case ProblemKind::store_unavailable:
      return s.store_unavailable;
    case ProblemKind::expired:
      return s.expired;
    default:
      return std::nullopt;
  }
}

StringResponse problem_response(const ProxyError& error, unsigned version, bool keep_alive) {
  const ProblemInfo i = info(error.kind);
  const unsigned status = error.status.value_or(i.status);
  nlohmann::json body = {{"type", problem_type(error.kind)},
                         {"title", i.title},
                         {"status", status},
                         {"detail", error.detail}};
  StringResponse res{static_cast<bhttp::status>(status), version};
  res.set(bhttp::field::content_type, "application/problem+json");
  res.set(bhttp::field::cache_control, "no-store");
  if (error.retry_after_seconds) {
    res.set(bhttp::field::retry_after, std::to_string(*error.retry_after_seconds));
  }
  res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  res.keep_alive(keep_alive);
  res.prepare_payload();
  return res;
}

namespace {

int grpc_code(ProblemKind kind) {
  switch (kind) {
    case ProblemKind::malformed_request:
    case ProblemKind::missing_key:
    case ProblemKind::bad_key:
    case ProblemKind::invalid_key:
      return 3;  // INVALID_ARGUMENT
    case ProblemKind::key_mismatch:
    case ProblemKind::expired:
      return 9;  // FAILED_PRECONDITION
    case ProblemKind::request_in_flight:
    case ProblemKind::outcome_unknown:
    case ProblemKind::outcome_indeterminate:
    case ProblemKind::response_not_stored:
      return 10;  // ABORTED
    case ProblemKind::header_too_large:
    case ProblemKind::body_too_large:
      return 8;  // RESOURCE_EXHAUSTED
    case ProblemKind::store_unavailable:
    case ProblemKind::upstream_unreachable:
    case ProblemKind::upstream_failed:
      return 14;  // UNAVAILABLE
    case ProblemKind::upstream_timeout:
      return 4;  // DEADLINE_EXCEEDED
    case ProblemKind::record_unreadable:
    case ProblemKind::internal:
      break;
  }
  return 13;  // INTERNAL
}

// grpc-message is percent-encoded UTF-8 (gRPC's HTTP/2 protocol): bytes outside
// printable ASCII, and '%', become %XX.
std::string grpc_message(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const unsigned char c : text) {
    if (c < 0x20 || c > 0x7e || c == '%') {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace

std::vector<ProblemEntry> problem_catalog(const engine::RoutePolicy& route) {
  std::vector<ProblemEntry> out;
  for (int k = 0; k <= static_cast<int>(ProblemKind::internal); ++k) {
    const auto kind = static_cast<ProblemKind>(k);
    const ProblemInfo i = info(kind);
    out.push_back({problem_type(kind), i.title, route_status(route, kind).value_or(i.status),
                   grpc_code(kind)});
  }
  return out;
}

StringResponse grpc_refusal(const ProxyError& error, unsigned version, bool keep_alive) {
  StringResponse res{bhttp::status::ok, version};
  res.set(bhttp::field::content_type, "application/grpc");
  res.set("grpc-status", std::to_string(grpc_code(error.kind)));
  // The problem type's last segment names the refusal, as it does over HTTP.
  const auto type = problem_type(error.kind);
  res.set("grpc-message", grpc_message(type.substr(type.rfind('/') + 1) + ": " + error.detail));
  if (error.retry_after_seconds) {
    res.set(bhttp::field::retry_after, std::to_string(*error.retry_after_seconds));
  }
  res.keep_alive(keep_alive);
  res.prepare_payload();
  return res;
}

void strip_hop_by_hop(Fields& fields) {
  // Framing and Host must never be removed because Connection names them.
  static const std::set<std::string> kProtected = {"content-length", "transfer-encoding", "host"};
  std::vector<std::string> named;
  for (const auto& f : fields) {
    if (f.name() != bhttp::field::connection) continue;
    std::string_view v = f.value();
    while (!v.empty()) {
      const auto comma = v.find(',');
      std::string token = lower(trim(v.substr(0, comma)));
      if (!token.empty() && !kProtected.contains(token)) named.push_back(std::move(token));
      if (comma == std::string_view::npos) break;
      v.remove_prefix(comma + 1);
    }
  }
  for (const auto& n : named) fields.erase(n);
  for (const std::string_view h : engine::kConnectionHeaders) fields.erase(h);
}

void prepare_forward(RequestHeader& req, const std::string& client_ip, bool tls,
                     const config::UpstreamConfig& upstream) {
  Fields& fields = req;
  strip_hop_by_hop(fields);
  fields.erase(bhttp::field::expect);  // 100-continue is answered by the proxy itself
  std::string xff;
  for (const auto& f : fields) {
    if (!beast::iequals(f.name_string(), "X-Forwarded-For")) continue;
    if (!xff.empty()) xff += ", ";
    xff += trim(f.value());
  }
  xff += (xff.empty() ? "" : ", ") + client_ip;
  fields.set("X-Forwarded-For", xff);
  if (fields.find("X-Forwarded-Proto") == fields.end()) {
    fields.set("X-Forwarded-Proto", tls ? "https" : "http");
  }
  const auto host = fields.find(bhttp::field::host);
  if (host != fields.end() && fields.find("X-Forwarded-Host") == fields.end()) {
    fields.set("X-Forwarded-Host", host->value());
  }
  // RFC 9112 3.2: every HTTP/1.1 request carries Host; an HTTP/1.0 client's may lack
  // it, and the upstream then gets its own authority.
  if (host == fields.end()) fields.set(bhttp::field::host, upstream.host + ":" + upstream.port);
  if (!upstream.base_path.empty()) req.target(upstream.base_path + std::string(req.target()));
  req.version(11);  // keep-alive by default: Connection was removed above
}

std::vector<store::Header> to_headers(const Fields& fields) {
  std::vector<store::Header> out;
  for (const auto& f : fields)
    out.push_back({std::string(f.name_string()), std::string(f.value())});
  return out;
}

std::vector<std::pair<std::string, std::string>> trailers_after(const Fields& fields,
                                                                std::size_t head_fields) {
  static constexpr std::string_view kNever[] = {
      "content-length", "transfer-encoding", "host",         "connection",
      "keep-alive",     "proxy-connection",  "te",           "trailer",
      "upgrade",        "content-encoding",  "content-type", "content-range"};
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t at = 0;
  for (const auto& f : fields) {
    if (at++ < head_fields) continue;
    const auto name = f.name_string();
    const bool never = std::any_of(std::begin(kNever), std::end(kNever),
                                   [&](std::string_view n) { return beast::iequals(name, n); });
    if (!never) out.emplace_back(std::string(name), std::string(f.value()));
  }
  return out;
}

std::string http_date(TimePoint t) {
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s, %02d %s %04d %02d:%02d:%02d GMT", kDays[tm.tm_wday],
                tm.tm_mday, kMonths[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                tm.tm_sec);
  return buf;
}

std::string original_trace_id(const store::StoredResponse& stored) {
  for (const auto& h : stored.headers) {
    if (h.name == store::kTraceIdEntry) return h.value;
  }
  return {};
}

StringResponse replay_response(const store::StoredResponse& stored, TimePoint expires_at,
                               unsigned version, bool keep_alive) {
  StringResponse res{static_cast<bhttp::status>(stored.status), version};
  for (const auto& h : stored.headers) {
    if (!h.name.starts_with(':')) res.insert(h.name, h.value);  // kTraceIdEntry stays here
  }
  res.set("Idempotent-Replayed", "true");
  res.set(kExpiresHeader, http_date(expires_at));
  res.body() = stored.body;
  res.keep_alive(keep_alive);
  res.prepare_payload();
  return res;
}

void prepare_replay_head(engine::ReplayCache::Entry& e) {
  const int status = e.response.status;
  if (status / 100 == 1 || status == 204 || status == 304) return;
  // The head replay_response(stored, expires_at, 11, true) has; test_replay_cache
  // compares a cached replay with one built from the record byte for byte.
  const HeadBytes head = serialize_head(replay_response(e.response, e.expires_at, 11, true).base());
  e.head.assign(head.data(), head.size());
  e.head.resize(e.head.size() - 2);  // the blank line: per-request lines go before it
}

bool covered(const RequestContext& ctx) {
  const auto* route = ctx.route;
  return route != nullptr && route->enabled && route->covers_method(ctx.method);
}

std::string_view policy_link(const RequestContext& ctx) {
  if (ctx.grpc || !covered(ctx)) return {};
  return ctx.settings->policy.link;
}

asio::awaitable<bool> send_cached(RequestContext& ctx, const engine::ReplayCache::Entry& entry) {
  // The per-exchange lines are gathered from where they are, not copied into one
  // string: a replay allocates nothing to be sent.
  static constexpr std::string_view kCrlf = "\r\n";
  std::array<asio::const_buffer, 10> buffers;
  std::size_t count = 0;
  const auto add = [&](std::string_view bytes) { buffers[count++] = asio::buffer(bytes); };
  add(entry.head);
  if (!ctx.keep_alive) add("Connection: close\r\n");
  // In the order a replay built per request has them (send_replay).
  if (const auto link = policy_link(ctx); !link.empty()) {
    add("Link: ");
    add(link);
    add(kCrlf);
  }
  if (!ctx.request_id.empty()) {
    add("X-Request-Id: ");
    add(ctx.request_id);
    add(kCrlf);
  }
  add(kCrlf);
  add(entry.response.body);
  ctx.status = entry.response.status;
  ctx.client.stream.expires_after(ctx.settings->config.server.read_timeout);
  auto [ec, n] = co_await asio::async_write(
      ctx.client.stream, std::span<const asio::const_buffer>(buffers.data(), count), use_nothrow);
  co_return !ec;
}

asio::awaitable<bool> send_response(RequestContext& ctx, StringResponse& response) {
  response.keep_alive(ctx.keep_alive);
  if (!ctx.request_id.empty()) response.set("X-Request-Id", ctx.request_id);
  ctx.status = response.result_int();
  ctx.client.stream.expires_after(ctx.settings->config.server.read_timeout);
  auto [ec, n] = co_await write_whole(ctx.client.stream, response);
  co_return !ec;
}

asio::awaitable<bool> continue_if_expected(RequestContext& ctx) {
  // RFC 9110 10.1.1: an HTTP/1.0 request's expectation is ignored (and 15.2: no 1xx
  // is ever sent to an HTTP/1.0 client).
  if (ctx.version < 11) co_return true;
  if (!beast::iequals(ctx.head.get()[bhttp::field::expect], "100-continue")) co_return true;
  Response<bhttp::empty_body> res{bhttp::status::continue_, ctx.version};
  ctx.client.stream.expires_after(ctx.settings->config.server.read_timeout);
  auto [ec, n] = co_await bhttp::async_write(ctx.client.stream, res, use_nothrow);
  co_return !ec;
}

asio::awaitable<bool> send_problem(RequestContext& ctx) {
  if (ctx.route != nullptr) ctx.error->status = route_status(*ctx.route, ctx.error->kind);
  auto res = ctx.grpc ? grpc_refusal(*ctx.error, ctx.version, ctx.keep_alive)
                      : problem_response(*ctx.error, ctx.version, ctx.keep_alive);
  if (const auto link = policy_link(ctx); !link.empty()) res.set(bhttp::field::link, link);
  const bool sent = co_await send_response(ctx, res);
  co_return ctx.keep_alive ? sent : false;
}

}  // namespace idemproxy::http
