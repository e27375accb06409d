#include "idemproxy/engine/engine.hpp"

#include <strings.h>

#include <algorithm>
#include <array>
#include <charconv>

#include "idemproxy/engine/grpc_status.hpp"

namespace idemproxy::engine {

Admission Engine::admit(const store::ClaimRequest& request) {
  return admission(request, claims_.claim(request));
}

Admission Engine::admission(const store::ClaimRequest& request,
                            store::Result<store::ClaimResult> result) {
  Admission a;
  if (!result.ok()) {
    // An unreadable record is known to exist: never treat it as an outage that
    // fail_open would forward through.
    a.kind = result.error().code == store::StoreErrc::unreadable ? Admission::Kind::unreadable
                                                                 : Admission::Kind::store_failed;
    a.detail = result.error().detail;
    return a;
  }
  if (auto* claimed = std::get_if<store::Claimed>(&result.value())) {
    a.kind = Admission::Kind::execute;
    a.token = claimed->token;
    a.locked_until = claimed->locked_until;
    a.took_over = claimed->took_over;
    return a;
  }
  if (auto* over = std::get_if<store::OverQuota>(&result.value())) {
    a.kind = Admission::Kind::over_quota;
    a.quota = *over;
    return a;
  }
  auto& existing = std::get<store::Record>(result.value());
  // The fingerprint is checked first: a different request never learns the
  // state of the original, only that the key is taken.
  if (existing.fingerprint != request.fingerprint) {
    a.kind = Admission::Kind::mismatch;
    if (!same_rule(existing.fingerprint, request.fingerprint))
      a.other_rule = std::make_unique<store::Record>(std::move(existing));
    return a;
  }
  // With after_expiry: reject the record outlives its ttl as a tombstone (its
  // expiry is the tombstone's): past ttl it is never replayed, nor executed again.
  const TimePoint replay_until = engine::replay_until(existing, request.tombstones, request.ttl);
  if (existing.state == store::RecordState::completed && request.tombstones &&
      existing.store_now >= replay_until) {
    a.kind = Admission::Kind::expired;
    a.completed_at = existing.completed_at;
    a.expires_at = replay_until;
    return a;
  }
  if (existing.state == store::RecordState::completed && existing.response) {
    a.kind = existing.response->body_stored ? Admission::Kind::replay : Admission::Kind::not_stored;
    a.replay = std::move(existing.response);
    a.token = existing.token;  // a body in chunks is read under it
    a.expires_at = replay_until;
    a.store_now = existing.store_now;
    return a;
  }
  if (existing.state == store::RecordState::indeterminate) {
    a.kind = Admission::Kind::indeterminate;
    return a;
  }
  a.kind = existing.stale ? Admission::Kind::stale : Admission::Kind::in_flight;
  a.token = existing.token;  // in flight: its holder's, whose stream a retry may attach to
  if (!existing.stale) a.streaming = existing.streaming;
  a.locked_until = existing.locked_until;
  return a;
}

namespace {
Finish from_store(const store::StoreError& e) {
  return e.code == store::StoreErrc::fenced ? Finish::fenced : Finish::store_failed;
}

// A gRPC answer's status: its grpc-status field, a trailer or, in a trailers-only
// answer, a header field; UNKNOWN when it has none or an unreadable one. nullopt for
// other answers.
std::optional<int> grpc_status_of(const store::StoredResponse& response) {
  bool grpc = false;
  std::optional<int> status;
  const auto look = [&](const store::Header& h) {
    if (h.named("content-type")) grpc = is_grpc_content_type(h.value);
    if (h.named("grpc-status")) {
      int code = 0;
      const auto* end = h.value.data() + h.value.size();
      const auto [at, ec] = std::from_chars(h.value.data(), end, code);
      if (ec == std::errc{} && at == end) status = code;
    }
  };
  for (const auto& h : response.headers) look(h);
  for (const auto& h : response.trailers) look(h);
  if (!grpc) return std::nullopt;
  return status.value_or(2);
}

// Engine::stores() with the answer's Idempotency-Policy already read.
bool stored_under(const RoutePolicy& policy, const store::StoredResponse& response,
                  const AnswerPolicy& asked) {
  if (asked.no_store) return false;
  const auto grpc = grpc_status_of(response);
  return grpc ? policy.stores_grpc_status(*grpc) : policy.stores_status(response.status);
}
}  // namespace

Finish Engine::finish(const store::RecordId& id, std::int64_t token, const RoutePolicy& policy,
                      const store::StoredResponse& response, TimePoint* expires_at,
                      store::StoredResponse* stored) {
  KeptAnswer kept = keep(store::StoredResponse(response), policy);
  const Finish f = finish(id, token, kept, expires_at);
  if (f == Finish::stored && stored) *stored = std::move(kept.answer);
  return f;
}

Finish Engine::finish(const store::RecordId& id, std::int64_t token, const KeptAnswer& kept,
                      TimePoint* expires_at) {
  if (!kept.stores) return abandon(id, token);
  return finished(claims_.complete(id, token, kept.answer, kept.keep), kept.keep, expires_at);
}

bool Engine::stores(const RoutePolicy& policy, const store::StoredResponse& response) {
  return stored_under(policy, response, answer_policy(response.headers));
}

KeptAnswer Engine::keep(store::StoredResponse&& response, const RoutePolicy& policy) {
  const AnswerPolicy asked = answer_policy(response.headers);
  const bool stored = stored_under(policy, response, asked);
  const store::Retention retained = policy.retention(asked.max_age);
  keep_storable(response.headers, policy);
  keep_storable(response.trailers, policy);
  return {std::move(response), retained, stored};
}

store::Retention Engine::retention(const RoutePolicy& policy,
                                   const store::StoredResponse& response) {
  return policy.retention(answer_policy(response.headers).max_age);
}

Finish Engine::finished(const store::Result<TimePoint>& done, const store::Retention& keep,
                        TimePoint* expires_at) {
  if (!done.ok()) return from_store(done.error());
  if (expires_at) *expires_at = done.value() - (keep.record - keep.answer);
  return Finish::stored;
}

bool Engine::renew(const store::RecordId& id, std::int64_t token, Duration lease) {
  return claims_.renew(id, token, lease).ok();
}

Finish Engine::abandon(const store::RecordId& id, std::int64_t token) {
  auto done = claims_.release(id, token);
  return done.ok() ? Finish::released : from_store(done.error());
}

Finish Engine::mark_indeterminate(const store::RecordId& id, std::int64_t token) {
  auto done = claims_.mark_indeterminate(id, token);
  return done.ok() ? Finish::indeterminate : from_store(done.error());
}

namespace {
// Headers that describe this exchange, not the resource: set afresh on every answer.
bool is_per_exchange(std::string_view name) {
  for (std::string_view h :
       {"x-request-id", "idempotency-key-expires", "idempotent-replayed", "idempotency-policy"}) {
    if (h.size() == name.size() && strncasecmp(h.data(), name.data(), h.size()) == 0) return true;
  }
  return false;
}
}  // namespace

AnswerPolicy read_answer_policy(std::string_view value) {
  AnswerPolicy out;
  const auto is = [](std::string_view d, std::string_view name) {
    return d.size() == name.size() && strncasecmp(d.data(), name.data(), name.size()) == 0;
  };
  while (!value.empty()) {
    const auto comma = value.find(',');
    std::string_view directive = value.substr(0, comma);
    while (!directive.empty() && (directive.front() == ' ' || directive.front() == '\t')) {
      directive.remove_prefix(1);
    }
    while (!directive.empty() && (directive.back() == ' ' || directive.back() == '\t')) {
      directive.remove_suffix(1);
    }
    const auto eq = directive.find('=');
    const std::string_view name = directive.substr(0, eq);
    bool read = true;
    if (is(name, "no-store") && eq == std::string_view::npos) {
      out.no_store = true;
    } else if (is(name, "max-age") && eq != std::string_view::npos) {
      // Seconds as digits alone (RFC 9111 1.2.2's delta-seconds); a value past ten
      // years is read as ten years, which max_ttl bounds in any case.
      const std::string_view digits = directive.substr(eq + 1);
      long long seconds = 0;
      const auto* end = digits.data() + digits.size();
      const auto [at, ec] = std::from_chars(digits.data(), end, seconds);
      constexpr long long kLongest = 10LL * 366 * 24 * 3600;
      read = !digits.empty() && digits.front() != '-' && at == end &&
             (ec == std::errc{} || ec == std::errc::result_out_of_range);
      if (read)
        out.max_age =
            std::chrono::seconds(ec == std::errc{} ? std::min(seconds, kLongest) : kLongest);
    } else {
      read = directive.empty();
    }
    if (!read && out.malformed.empty()) out.malformed = std::string(directive);
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return out;
}

AnswerPolicy answer_policy(const std::vector<store::Header>& headers) {
  AnswerPolicy out;
  for (const auto& h : headers) {
    if (!h.named("idempotency-policy")) continue;
    AnswerPolicy one = read_answer_policy(h.value);
    out.no_store = out.no_store || one.no_store;
    if (one.max_age)
      out.max_age = out.max_age ? std::min(*out.max_age, *one.max_age) : *one.max_age;
    if (out.malformed.empty()) out.malformed = std::move(one.malformed);
  }
  return out;
}

bool is_hop_by_hop(std::string_view name) {
  const auto same = [&](std::string_view h) {
    return h.size() == name.size() && strncasecmp(h.data(), name.data(), h.size()) == 0;
  };
  return same("transfer-encoding") || same("content-length") ||
         std::any_of(kConnectionHeaders.begin(), kConnectionHeaders.end(), same);
}

void keep_storable(std::vector<store::Header>& headers, const RoutePolicy& policy) {
  std::erase_if(headers, [&](const store::Header& h) {
    return is_hop_by_hop(h.name) || is_per_exchange(h.name) || policy.denies_header(h.name);
  });
}

}  // namespace idemproxy::engine
