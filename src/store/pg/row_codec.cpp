#include "store/pg/row_codec.hpp"

#include <charconv>
#include <cstdint>
#include <utility>

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

// A column name's switch code: its length, first and last two characters. Two names
// of the columns below with one code would be a duplicate case label: a compile error.
constexpr std::uint32_t code(std::string_view name) {
  if (name.size() < 2) return 0;
  return static_cast<std::uint32_t>(name.size()) << 24 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(name[0])) << 16 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(name[name.size() - 2])) << 8 |
         static_cast<unsigned char>(name.back());
}

[[noreturn]] void missing(std::string_view name) {
  throw pqxx::argument_error("Unknown column name: '" + std::string(name) + "'.");
}

}  // namespace

// Each column's name is read once and placed by a switch (PQfnumber per name was 17
// library calls, each copying the name and comparing it with every column: about
// 13,800 instructions a batch's result).
Columns::Columns(const pqxx::result& r) {
  const pqxx::row::size_type n = r.columns();
  for (pqxx::row::size_type i = 0; i < n; ++i) {
    int* at = slot(r.column_name(i));
    if (at != nullptr && *at < 0) *at = static_cast<int>(i);  // the first of a name
  }
}

int Columns::required(int at, std::string_view name) {
  if (at < 0) missing(name);
  return at;
}

void Columns::require_record() const {
  for (const auto& [at, name] : {std::pair{claimed, "claimed"},
                                 {fingerprint, "fingerprint"},
                                 {state, "state"},
                                 {token, "token"},
                                 {route, "route"},
                                 {method, "method"},
                                 {target, "target"},
                                 {created_ms, "created_ms"},
                                 {locked_ms, "locked_ms"},
                                 {expires_ms, "expires_ms"},
                                 {expired, "expired"},
                                 {stale, "stale"},
                                 {status, "status"},
                                 {headers, "headers"},
                                 {body, "body"},
                                 {key_id, "key_id"},
                                 {store_now_ms, "store_now_ms"}}) {
    required(at, name);
  }
}

int* Columns::slot(std::string_view name) {
  const auto is = [&](std::string_view n, int& at) { return name == n ? &at : nullptr; };
  // clang-format off
  switch (code(name)) {
    case code("claimed"):      return is("claimed",      claimed);
    case code("fingerprint"):  return is("fingerprint",  fingerprint);
    case code("state"):        return is("state",        state);
    case code("token"):        return is("token",        token);
    case code("route"):        return is("route",        route);
    case code("method"):       return is("method",       method);
    case code("target"):       return is("target",       target);
    case code("created_ms"):   return is("created_ms",   created_ms);
    case code("locked_ms"):    return is("locked_ms",    locked_ms);
    case code("expires_ms"):   return is("expires_ms",   expires_ms);
    case code("expired"):      return is("expired",      expired);
    case code("stale"):        return is("stale",        stale);
    case code("status"):       return is("status",       status);
    case code("headers"):      return is("headers",      headers);
    case code("body"):         return is("body",         body);
    case code("key_id"):       return is("key_id",       key_id);
    case code("store_now_ms"): return is("store_now_ms", store_now_ms);
    case code("took_over"):    return is("took_over",    took_over);
    case code("completed_ms"): return is("completed_ms", completed_ms);
    case code("replay_ms"):    return is("replay_ms",    replay_ms);
    case code("chunks"):       return is("chunks",       chunks);
    case code("body_length"):  return is("body_length",  body_length);
    case code("body_digest"):  return is("body_digest",  body_digest);
    case code("in_n"):         return is("in_n",         in_n);
    case code("completion"):   return is("completion",   completion);
    case code("watched"):      return is("watched",      watched);
    case code("in_scope"):     return is("in_scope",     in_scope);
    case code("in_key"):       return is("in_key",       in_key);
    default: return nullptr;
  }
  // clang-format on
}

long long number(const pqxx::field& f) {
  long long v = 0;
  const char* begin = f.c_str();
  const char* end = begin + f.size();
  const auto [stop, ec] = std::from_chars(begin, end, v);
  if (f.is_null() || ec != std::errc{} || stop != end) {
    throw pqxx::conversion_error("column " + std::to_string(f.num()) + " is not a whole number: '" +
                                 std::string(begin, end) + "'");
  }
  return v;
}

TimePoint from_ms(const pqxx::field& f) { return TimePoint{std::chrono::milliseconds{number(f)}}; }

Record claimed_record(const RecordId& id, const ClaimRequest& claim, const Claimed& ours,
                      const char* key_id) {
  Record r;
  r.id = id;
  r.fingerprint = claim.fingerprint;
  r.state = RecordState::in_flight;
  r.token = ours.token;
  r.route = claim.route;
  r.method = claim.method;
  r.target = claim.target;
  // The statement's lease and TTL are whole milliseconds from one now(), and its
  // times are read in milliseconds: created_ms = locked_ms - lease exactly.
  r.created_at = ours.locked_until - claim.lease;
  r.locked_until = ours.locked_until;
  r.expires_at = r.created_at + claim.ttl;
  r.completed_at = r.created_at;
  r.store_now = r.created_at;
  if (key_id != nullptr) r.sealed_with = key_id;
  return r;
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
  at.require_record();
  // The row's fields through one iterator moved to each column: row[i] makes a field
  // that holds a copy of the result, a shared count taken and dropped per field.
  pqxx::const_row_iterator cursor = row.begin();
  int cursor_at = 0;
  const auto field = [&cursor, &cursor_at](int col) -> const pqxx::field& {
    cursor += col - cursor_at;
    cursor_at = col;
    return cursor;
  };
  // The id of the key that sealed the row, NULL when it is in the clear.
  std::optional<std::string> key_id;
  if (!field(at.key_id).is_null()) key_id = field(at.key_id).as<std::string>();
  auto opened = [&](std::string value, std::string_view name) {
    if (!key_id) return value;
    if (!sealer_) {
      throw UnreadableRecord("record is sealed with key \"" + *key_id +
                             "\" but store.encryption is not configured");
    }
    auto plain = sealer_->open(*key_id, value, seal_context(id, name));
    if (!plain) {
      throw UnreadableRecord("record " + std::string(name) + " does not open with key \"" +
                             *key_id +
                             "\" (key missing from store.encryption.key_file, or the "
                             "row was altered)");
    }
    return std::move(*plain);
  };
  Record r;
  r.id = id;
  r.sealed_with = key_id;
  r.fingerprint = field(at.fingerprint).as<std::string>();
  if (key_id) {
    try {
      r.fingerprint = opened(from_hex(r.fingerprint).value_or(""), "fingerprint");
    } catch (const UnreadableRecord&) {
      if (!listing) throw;
      r.fingerprint = "(sealed with key " + *key_id + ")";
    }
  }
  r.state = parse_state(field(at.state).as<std::string>()).value_or(RecordState::in_flight);
  r.token = number(field(at.token));
  r.route = field(at.route).as<std::string>();
  r.method = field(at.method).as<std::string>();
  r.target = field(at.target).as<std::string>();
  r.created_at = from_ms(field(at.created_ms));
  r.locked_until = from_ms(field(at.locked_ms));
  r.expires_at = from_ms(field(at.expires_ms));
  r.completed_at = at.completed_ms >= 0 && !field(at.completed_ms).is_null()
                       ? from_ms(field(at.completed_ms))
                       : r.created_at;
  // One before the record's completion was left by an older binary's takeover, which
  // did not clear it (before migration 010): none.
  if (at.replay_ms >= 0 && !field(at.replay_ms).is_null() &&
      from_ms(field(at.replay_ms)) >= r.completed_at) {
    r.replay_until = from_ms(field(at.replay_ms));
  }
  r.expired = field(at.expired).as<bool>();
  r.store_now = from_ms(field(at.store_now_ms));
  r.stale = field(at.stale).as<bool>();
  if (r.state == RecordState::completed && !field(at.status).is_null()) {
    StoredResponse resp;
    resp.status = field(at.status).as<int>();
    // A listing reads neither (kList): its body only says whether one is kept.
    if (!listing && !field(at.headers).is_null()) {
      resp.headers = decode_headers(opened(pqxx::binarystring(field(at.headers)).str(), "headers"),
                                    &resp.trailers);
    }
    if (!listing && !field(at.body).is_null()) {
      resp.body = opened(pqxx::binarystring(field(at.body)).str(), "body");
    }
    resp.body_stored = !field(at.body).is_null();
    // A body in chunks (sql/012): its count, length and digest; the body column is
    // NULL. One an older binary completed whole after a takeover is read whole.
    if (at.chunks >= 0 && !field(at.chunks).is_null() && (listing || field(at.body).is_null())) {
      resp.chunks = field(at.chunks).as<std::int32_t>();
      resp.body_length = field(at.body_length).is_null() ? 0 : number(field(at.body_length));
      if (!listing && at.body_digest >= 0 && !field(at.body_digest).is_null()) {
        resp.body_digest = opened(pqxx::binarystring(field(at.body_digest)).str(), "digest");
      }
      resp.body_stored = true;
    }
    r.response = std::move(resp);
  }
  // In flight with a status: its holder's answer streams (kStartStream).
  if (r.state == RecordState::in_flight && !listing && !field(at.status).is_null()) {
    StoredResponse head;
    head.status = field(at.status).as<int>();
    if (!field(at.headers).is_null()) {
      head.headers = decode_headers(opened(pqxx::binarystring(field(at.headers)).str(), "headers"),
                                    &head.trailers);
    }
    r.streaming = std::move(head);
  }
  return r;
}

}  // namespace idemproxy::store::pg
