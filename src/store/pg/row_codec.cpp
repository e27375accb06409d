#include "store/pg/row_codec.hpp"

#include "idemproxy/common/hex.hpp"
#include "store/pg/pool.hpp"

namespace idemproxy::store::pg {
namespace {

// The authenticated context of a sealed field: the record and the field it belongs to.
std::string seal_context(const RecordId& id, std::string_view field) {
  std::string c = "idemproxy/v1";
  c += '\0';
  c += id.scope;
  c += '\0';
  c += id.key;
  c += '\0';
  c += field;
  return c;
}

int column(const pqxx::result& r, const char* name) {
  return static_cast<int>(r.column_number(name));
}

}  // namespace

Columns::Columns(const pqxx::result& r)
    : claimed(column(r, "claimed")),
      fingerprint(column(r, "fingerprint")),
      state(column(r, "state")),
      token(column(r, "token")),
      route(column(r, "route")),
      method(column(r, "method")),
      target(column(r, "target")),
      created_ms(column(r, "created_ms")),
      locked_ms(column(r, "locked_ms")),
      expires_ms(column(r, "expires_ms")),
      expired(column(r, "expired")),
      stale(column(r, "stale")),
      status(column(r, "status")),
      headers(column(r, "headers")),
      body(column(r, "body")),
      key_id(column(r, "key_id")),
      store_now_ms(column(r, "store_now_ms")) {
  for (pqxx::row::size_type i = 0; i < r.columns(); ++i) {
    const std::string_view name = r.column_name(i);
    if (name == "took_over") took_over = static_cast<int>(i);
    if (name == "completed_ms") completed_ms = static_cast<int>(i);
    if (name == "replay_ms") replay_ms = static_cast<int>(i);
    if (name == "chunks") chunks = static_cast<int>(i);
    if (name == "body_length") body_length = static_cast<int>(i);
    if (name == "body_digest") body_digest = static_cast<int>(i);
  }
}

TimePoint from_ms(const pqxx::field& f) {
  return TimePoint{std::chrono::milliseconds{f.as<long long>()}};
}

std::optional<std::string> quota_text(const Quota& q) {
  if (!q.any()) return std::nullopt;
  return "{" + std::to_string(q.records) + "," + std::to_string(q.bytes) + "," +
         std::to_string(q.in_flight) + "}";
}

namespace {
std::int64_t number_or_0(const pqxx::row& row, const char* column) {
  return row[column].is_null() ? std::int64_t{0} : row[column].as<std::int64_t>();
}
}  // namespace

Usage usage_of(const pqxx::row& row) {
  return {number_or_0(row, "records"), number_or_0(row, "bytes"), number_or_0(row, "in_flight")};
}

Views::ScopeUsage scope_usage(const pqxx::row& row) {
  return {row["scope"].as<std::string>(),
          usage_of(row),
          {number_or_0(row, "cap_records"), number_or_0(row, "cap_bytes"),
           number_or_0(row, "cap_in_flight")}};
}

std::string RowCodec::stored(std::string_view value, const RecordId& id,
                             std::string_view field) const {
  if (!sealer_) return std::string(value);
  return sealer_->seal(value, seal_context(id, field));
}

std::string RowCodec::stored(std::string&& value, const RecordId& id,
                             std::string_view field) const {
  if (!sealer_) return std::move(value);
  return sealer_->seal(value, seal_context(id, field));
}

std::string_view RowCodec::stored_view(std::string_view value, const RecordId& id,
                                       std::string_view field, std::string& sealed) const {
  if (!sealer_) return value;
  sealed = sealer_->seal(value, seal_context(id, field));
  return sealed;
}

namespace {
std::string chunk_field(std::int32_t seq) { return "chunk " + std::to_string(seq); }
}  // namespace

std::string RowCodec::stored_chunk(std::string_view bytes, const RecordId& id,
                                   std::int32_t seq) const {
  return stored(bytes, id, chunk_field(seq));
}

std::string RowCodec::open_chunk(std::string sealed, const char* key_id, const RecordId& id,
                                 std::int32_t seq) const {
  if (key_id == nullptr) return sealed;
  if (!sealer_) {
    throw UnreadableRecord(std::string("a chunk is sealed with key \"") + key_id +
                           "\" but store.encryption is not configured");
  }
  auto plain = sealer_->open(key_id, sealed, seal_context(id, chunk_field(seq)));
  if (!plain) {
    throw UnreadableRecord("chunk " + std::to_string(seq) + " does not open with key \"" + key_id +
                           "\" (key missing from store.encryption.key_file, or the row was "
                           "altered, swapped or moved)");
  }
  return std::move(*plain);
}

Record RowCodec::read(const pqxx::row& row, const Columns& at, const RecordId& id,
                      bool listing) const {
  // The id of the key that sealed the row, NULL when it is in the clear.
  std::optional<std::string> key_id;
  if (!row[at.key_id].is_null()) key_id = row[at.key_id].as<std::string>();
  auto opened = [&](std::string value, std::string_view field) {
    if (!key_id) return value;
    if (!sealer_) {
      throw UnreadableRecord("record is sealed with key \"" + *key_id +
                             "\" but store.encryption is not configured");
    }
    auto plain = sealer_->open(*key_id, value, seal_context(id, field));
    if (!plain) {
      throw UnreadableRecord("record " + std::string(field) + " does not open with key \"" +
                             *key_id +
                             "\" (key missing from store.encryption.key_file, or the "
                             "row was altered)");
    }
    return std::move(*plain);
  };
  Record r;
  r.id = id;
  r.sealed_with = key_id;
  r.fingerprint = row[at.fingerprint].as<std::string>();
  if (key_id) {
    try {
      r.fingerprint = opened(from_hex(r.fingerprint).value_or(""), "fingerprint");
    } catch (const UnreadableRecord&) {
      if (!listing) throw;
      r.fingerprint = "(sealed with key " + *key_id + ")";
    }
  }
  r.state = parse_state(row[at.state].as<std::string>()).value_or(RecordState::in_flight);
  r.token = row[at.token].as<long long>();
  r.route = row[at.route].as<std::string>();
  r.method = row[at.method].as<std::string>();
  r.target = row[at.target].as<std::string>();
  r.created_at = from_ms(row[at.created_ms]);
  r.locked_until = from_ms(row[at.locked_ms]);
  r.expires_at = from_ms(row[at.expires_ms]);
  r.completed_at = at.completed_ms >= 0 && !row[at.completed_ms].is_null()
                       ? from_ms(row[at.completed_ms])
                       : r.created_at;
  // One before the record's completion was left by an older binary's takeover, which
  // did not clear it (before migration 010): none.
  if (at.replay_ms >= 0 && !row[at.replay_ms].is_null() &&
      from_ms(row[at.replay_ms]) >= r.completed_at) {
    r.replay_until = from_ms(row[at.replay_ms]);
  }
  r.expired = row[at.expired].as<bool>();
  r.store_now = from_ms(row[at.store_now_ms]);
  r.stale = row[at.stale].as<bool>();
  if (r.state == RecordState::completed && !row[at.status].is_null()) {
    StoredResponse resp;
    resp.status = row[at.status].as<int>();
    // A listing reads neither (kList): its body only says whether one is kept.
    if (!listing && !row[at.headers].is_null()) {
      resp.headers = decode_headers(opened(pqxx::binarystring(row[at.headers]).str(), "headers"),
                                    &resp.trailers);
    }
    if (!listing && !row[at.body].is_null()) {
      resp.body = opened(pqxx::binarystring(row[at.body]).str(), "body");
    }
    resp.body_stored = !row[at.body].is_null();
    // A body in chunks (sql/012): its count, length and digest; the body column is
    // NULL. One an older binary completed whole after a takeover is read whole.
    if (at.chunks >= 0 && !row[at.chunks].is_null() && (listing || row[at.body].is_null())) {
      resp.chunks = row[at.chunks].as<std::int32_t>();
      resp.body_length = row[at.body_length].is_null() ? 0 : row[at.body_length].as<std::int64_t>();
      if (!listing && at.body_digest >= 0 && !row[at.body_digest].is_null()) {
        resp.body_digest = opened(pqxx::binarystring(row[at.body_digest]).str(), "digest");
      }
      resp.body_stored = true;
    }
    r.response = std::move(resp);
  }
  // In flight with a status: its holder's answer streams (kStartStream).
  if (r.state == RecordState::in_flight && !listing && !row[at.status].is_null()) {
    StoredResponse head;
    head.status = row[at.status].as<int>();
    if (!row[at.headers].is_null()) {
      head.headers = decode_headers(opened(pqxx::binarystring(row[at.headers]).str(), "headers"),
                                    &head.trailers);
    }
    r.streaming = std::move(head);
  }
  return r;
}

}  // namespace idemproxy::store::pg
