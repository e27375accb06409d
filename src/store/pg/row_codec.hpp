#pragma once
// Records to and from rows: the columns of IDEMPROXY_RECORD_COLUMNS (statements.hpp)
// read by name, and fields sealed under store.encryption on the way in and opened on
// the way out.
#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <string_view>

#include "idemproxy/store/record.hpp"
#include "idemproxy/store/sealer.hpp"
#include "idemproxy/store/views.hpp"

namespace idemproxy::store::pg {

/// Where each named column sits in a result, -1 for one it does not have: found once
/// per result, not per row. RowCodec::read requires the record's columns.
struct Columns {
  explicit Columns(const pqxx::result& r);
  /// `at`, a column named `name`; throws pqxx::argument_error when it is -1.
  static int required(int at, std::string_view name);
  /// Throws pqxx::argument_error unless every column of a record is there.
  void require_record() const;
  int claimed = -1, fingerprint = -1, state = -1, token = -1, route = -1, method = -1, target = -1,
      created_ms = -1, locked_ms = -1, expires_ms = -1, expired = -1, stale = -1, status = -1,
      headers = -1, body = -1, key_id = -1, store_now_ms = -1;
  int took_over = -1;                                   // claims only
  int completed_ms = -1;                                // when the result has it
  int replay_ms = -1;                                   // when the result has it
  int chunks = -1, body_length = -1, body_digest = -1;  // when the result has them
  int in_n = -1, completion = -1, watched = -1;         // a batch's (batch_answers.cpp)
  int in_scope = -1, in_key = -1;                       // a batch's on Citus

 private:
  int* slot(std::string_view name);
};

/// A bigint column's value (pqxx's own conversion was 80 instructions a number);
/// throws pqxx::conversion_error when it is NULL or not a whole number.
long long number(const pqxx::field& f);
TimePoint from_ms(const pqxx::field& f);

/// The record a claim of ours wrote, as reading its row back would give it: the
/// request's fields in the clear, in flight under `ours`, its clock the claim's
/// (created at the lease's start, which is also when it was read); `key_id` sealed
/// its fingerprint (nullptr: in the clear). For a later claim of the key in the same
/// batch, whose answer is the first claim's row of three columns.
Record claimed_record(const RecordId& id, const ClaimRequest& claim, const Claimed& ours,
                      const char* key_id);

/// A route's quota as the text of a bigint[] ({records, bytes, in_flight}; the quota
/// column), or none without one.
std::optional<std::string> quota_text(const Quota& q);
/// A row of kNearestQuota.
Views::ScopeUsage scope_usage(const pqxx::row& row);
/// The usage columns (records, bytes, in_flight) of a row; NULL reads as 0.
Usage usage_of(const pqxx::row& row);

class RowCodec {
 public:
  explicit RowCodec(std::shared_ptr<const Sealer> sealer) : sealer_(std::move(sealer)) {}

  /// The record in `row`. Throws UnreadableRecord when a sealed field does not open;
  /// `listing` (kList): a sealed fingerprint that does not open is shown by its key
  /// id instead of failing the whole list, and the stored fields are not read (a
  /// listing's body only says whether one is kept).
  Record read(const pqxx::row& row, const Columns& at, const RecordId& id,
              bool listing = false) const;
  /// The stored form of a field: sealed under the current key, or as it is.
  std::string stored(std::string_view value, const RecordId& id, std::string_view field) const;
  /// stored() for a value the caller gives up: in the clear it is moved, not copied.
  std::string stored(std::string&& value, const RecordId& id, std::string_view field) const;
  /// stored() without a copy in the clear: `value` itself, or the sealed form kept in
  /// `sealed`. The view lives as long as both.
  std::string_view stored_view(std::string_view value, const RecordId& id, std::string_view field,
                               std::string& sealed) const;
  /// A streamed answer's chunk `seq` as stored: sealed with (scope, key, seq) bound
  /// in, so a chunk swapped, moved or reordered does not open.
  std::string stored_chunk(std::string_view bytes, const RecordId& id, std::int32_t seq) const;
  /// A stored chunk's bytes; `key_id` is the key that sealed it (nullptr: in the
  /// clear). Throws UnreadableRecord when it does not open.
  std::string open_chunk(std::string sealed, const char* key_id, const RecordId& id,
                         std::int32_t seq) const;
  /// The id of the key new rows are sealed under; nullptr (SQL NULL) in the clear.
  const char* key_id() const { return sealer_ ? sealer_->current_id().c_str() : nullptr; }
  bool sealing() const { return sealer_ != nullptr; }

 private:
  std::shared_ptr<const Sealer> sealer_;
};

}  // namespace idemproxy::store::pg
