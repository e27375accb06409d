#include "idemproxy/ops/records.hpp"

#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include "idemproxy/common/sha256.hpp"

namespace idemproxy::ops {
namespace {

// One line per operator action that changes a record, at info level whatever the
// outcome: who asked (via), which record (the key by its hash, as access lines name
// it), and what happened.
void audit(std::string_view action, std::string_view via, const store::RecordId& id,
           const RecordAction& a) {
  const char* outcome = a.status == RecordAction::Status::ok          ? "done"
                        : a.status == RecordAction::Status::not_found ? "not found"
                                                                      : "failed";
  spdlog::info("audit: {} via {}: scope \"{}\" key {}: {}", action, via, id.scope,
               sha256_hex16(id.key).view(), outcome);
}

RecordAction store_error(const store::StoreError& e) {
  return {RecordAction::Status::store_error, {{"error", "store error: " + e.detail}}};
}

RecordAction not_found(const store::RecordId& id, const std::string& what) {
  return {RecordAction::Status::not_found,
          {{"error", "no " + what + " for key \"" + id.key + "\" in scope \"" + id.scope + "\""}}};
}

std::string base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

// The stored body, for an operator who asked for it: UTF-8 text as it is, other bytes
// in base64. A sealed record's never: encryption at rest means an operator reads
// status and times, not what the upstream answered.
void add_body(nlohmann::json& out, const store::Record& r) {
  if (r.sealed_with) {
    out["body_withheld"] = "the record is sealed with key \"" + *r.sealed_with +
                           "\" (store.encryption); its body is never shown";
  } else if (!r.response) {
    out["body_withheld"] = "no answer is stored (" + std::string(store::to_string(r.state)) + ")";
  } else if (!r.response->body_stored) {
    out["body_withheld"] = "the answer was too large to store";
  } else if (r.response->chunked()) {
    out["body_withheld"] =
        "the answer streamed and is stored in " + std::to_string(r.response->chunks) + " chunks (" +
        std::to_string(r.response->body_length) + " bytes); a retry with the key replays it";
  } else {
    const std::string& body = r.response->body;
    try {
      (void)nlohmann::json(body).dump();  // throws on bytes that are not UTF-8
      out["response"]["body"] = body;
    } catch (const nlohmann::json::type_error&) {
      out["response"]["body_base64"] = base64(body);
    }
  }
}

}  // namespace

nlohmann::json record_to_json(const store::Record& r, bool summary) {
  nlohmann::json out = {{"scope", r.id.scope},
                        {"key", r.id.key},
                        {"state", store::to_string(r.state)},
                        {"expired", r.expired},
                        {"fingerprint", r.fingerprint},
                        {"fencing_token", r.token},
                        {"route", r.route},
                        {"method", r.method},
                        {"target", r.target},
                        {"created_at", rfc3339(r.created_at)},
                        {"expires_at", rfc3339(r.expires_at)},
                        {"sealed", r.sealed_with.has_value()}};
  if (r.state == store::RecordState::in_flight || r.state == store::RecordState::indeterminate) {
    out["locked_until"] = rfc3339(r.locked_until);
    out["stale"] = r.stale;
  }
  if (r.state == store::RecordState::completed) {
    out["completed_at"] = rfc3339(r.completed_at);
    // Its own replay window (Idempotency-Policy: max-age), when the store kept one;
    // a tombstone's expires_at is later.
    if (r.replay_until) out["replay_until"] = rfc3339(*r.replay_until);
  }
  if (r.response) {
    out["response"] = {{"status", r.response->status}};
    // A streamed answer kept in chunks: how many, and the body's length (a listing
    // shows them too).
    if (r.response->chunked()) {
      out["response"]["chunks"] = r.response->chunks;
      out["response"]["body_bytes"] = r.response->body_length;
    }
    if (!summary) {
      nlohmann::json headers = nlohmann::json::array();
      for (const auto& h : r.response->headers) {
        if (h.name == store::kTraceIdEntry) {
          out["response"]["trace_id"] = h.value;  // the trace that executed it
        } else if (h.name == store::kSpanIdEntry) {
          out["response"]["span_id"] = h.value;  // and its span, when it was recorded
        } else {
          headers.push_back({h.name, h.value});
        }
      }
      out["response"]["headers"] = headers;
      if (!r.response->chunked()) out["response"]["body_bytes"] = r.response->body.size();
    }
  }
  return out;
}

RecordAction show_record(store::Views& store, const store::RecordId& id, bool with_body) {
  auto found = store.find(id);
  if (!found.ok()) return store_error(found.error());
  if (!found.value()) return not_found(id, "record");
  RecordAction a{RecordAction::Status::ok, record_to_json(*found.value())};
  if (with_body) add_body(a.body, *found.value());
  return a;
}

RecordAction purge_record(store::Maintenance& store, const store::RecordId& id,
                          std::string_view via) {
  auto purged = store.purge(id);
  RecordAction a;
  if (!purged.ok()) {
    a = store_error(purged.error());
  } else if (!purged.value()) {
    a = not_found(id, "record");
  } else {
    a = {RecordAction::Status::ok, {{"purged", true}, {"scope", id.scope}, {"key", id.key}}};
  }
  audit("purge", via, id, a);
  return a;
}

RecordAction resolve_record(store::Maintenance& store, const store::RecordId& id,
                            std::string_view via) {
  auto resolved = store.resolve(id);
  RecordAction a;
  if (!resolved.ok()) {
    a = store_error(resolved.error());
  } else if (!resolved.value()) {
    a = not_found(id, "indeterminate or stale record");
  } else {
    a = {RecordAction::Status::ok,
         {{"resolved", true}, {"state", "released"}, {"scope", id.scope}, {"key", id.key}}};
  }
  audit("resolve", via, id, a);
  return a;
}

RecordAction list_records(store::Views& store, const std::string& state, int limit) {
  if (!state.empty() && !store::parse_state(state)) {
    return {RecordAction::Status::bad_request,
            {{"error",
              "unknown state \"" + state + "\" (in_flight, completed, released, indeterminate)"}}};
  }
  auto listed = store.list(state.empty() ? std::nullopt : store::parse_state(state), limit);
  if (!listed.ok()) return store_error(listed.error());
  nlohmann::json records = nlohmann::json::array();
  for (const auto& r : listed.value()) records.push_back(record_to_json(r, true));
  return {RecordAction::Status::ok, {{"records", records}, {"count", records.size()}}};
}

RecordAction list_quotas(store::Views& store, int limit) {
  auto listed = store.nearest_quota(limit);
  if (!listed.ok()) return store_error(listed.error());
  nlohmann::json scopes = nlohmann::json::array();
  for (const auto& u : listed.value()) {
    const auto cap = [](std::int64_t v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(); };
    scopes.push_back({{"scope", u.scope},
                      {"records", u.usage.records},
                      {"bytes", u.usage.bytes},
                      {"in_flight", u.usage.in_flight},
                      {"quota",
                       {{"records", cap(u.quota.records)},
                        {"bytes", cap(u.quota.bytes)},
                        {"in_flight", cap(u.quota.in_flight)}}}});
  }
  return {RecordAction::Status::ok, {{"scopes", scopes}, {"count", scopes.size()}}};
}

std::optional<int> parse_limit(std::string_view text) {
  if (text.empty() || text.size() > 4 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  const int n = std::stoi(std::string(text));
  if (n < 1 || n > 1000) return std::nullopt;
  return n;
}

}  // namespace idemproxy::ops
