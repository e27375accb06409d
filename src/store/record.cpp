#include "idemproxy/store/record.hpp"

#include <strings.h>

#include <algorithm>
#include <random>

namespace idemproxy::store {

std::uint64_t slot_hash_seed() {
  static const std::uint64_t drawn = [] {
    std::random_device device;
    return std::uint64_t{device()} << 32 | device();
  }();
  return drawn;
}

std::string_view to_string(QuotaCap cap) {
  switch (cap) {
    case QuotaCap::records:
      return "records";
    case QuotaCap::bytes:
      return "bytes";
    case QuotaCap::in_flight:
      return "in_flight";
  }
  return "unknown";
}

std::optional<QuotaCap> reached(const Quota& quota, const Usage& usage) {
  if (quota.records > 0 && usage.records >= quota.records) return QuotaCap::records;
  if (quota.bytes > 0 && usage.bytes >= quota.bytes) return QuotaCap::bytes;
  if (quota.in_flight > 0 && usage.in_flight >= quota.in_flight) return QuotaCap::in_flight;
  return std::nullopt;
}

std::string_view to_string(RecordState state) {
  switch (state) {
    case RecordState::in_flight:
      return "in_flight";
    case RecordState::completed:
      return "completed";
    case RecordState::released:
      return "released";
    case RecordState::indeterminate:
      return "indeterminate";
  }
  return "unknown";
}

std::optional<RecordState> parse_state(std::string_view text) {
  if (text == "in_flight") return RecordState::in_flight;
  if (text == "completed") return RecordState::completed;
  if (text == "released") return RecordState::released;
  if (text == "indeterminate") return RecordState::indeterminate;
  return std::nullopt;
}

std::optional<ExecutingSpan> executing_span(const StoredResponse& stored) {
  ExecutingSpan span;
  for (const auto& h : stored.headers) {
    if (h.name == kTraceIdEntry) span.trace_id = h.value;
    if (h.name == kSpanIdEntry) span.span_id = h.value;
  }
  if (span.trace_id.empty() || span.span_id.empty()) return std::nullopt;
  return span;
}

namespace {

void encode(const std::vector<Header>& fields, std::string& out) {
  for (const auto& h : fields) {
    out += h.name;
    out += ": ";
    out += h.value;
    out += "\r\n";
  }
}

// Moves the fields a legacy Idemproxy-Trailers field names out of `head`.
void move_legacy_trailers(std::vector<Header>& head, std::vector<Header>& trailers) {
  const auto named = std::find_if(head.begin(), head.end(),
                                  [](const Header& h) { return h.named("idemproxy-trailers"); });
  if (named == head.end()) return;
  std::string names = named->value;
  head.erase(named);
  for (std::string_view rest = names; !rest.empty();) {
    const auto comma = rest.find(',');
    std::string_view name = rest.substr(0, comma);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    for (auto it = head.begin(); it != head.end();) {
      if (!name.empty() && name.size() == it->name.size() &&
          strncasecmp(name.data(), it->name.data(), name.size()) == 0) {
        trailers.push_back(std::move(*it));
        it = head.erase(it);
      } else {
        ++it;
      }
    }
  }
}

// The bytes encode() writes for `fields`.
std::size_t encoded_size(const std::vector<Header>& fields) {
  std::size_t n = 0;
  for (const auto& h : fields) n += h.name.size() + h.value.size() + 4;
  return n;
}

}  // namespace

std::string encode_headers(const std::vector<Header>& headers,
                           const std::vector<Header>& trailers) {
  std::string out;
  out.reserve(encoded_size(headers) + (trailers.empty() ? 0 : 2 + encoded_size(trailers)));
  encode(headers, out);
  if (!trailers.empty()) {
    out += "\r\n";
    encode(trailers, out);
  }
  return out;
}

std::vector<Header> decode_headers(std::string_view block, std::vector<Header>* trailers) {
  std::vector<Header> head;
  std::vector<Header> after;
  std::vector<Header>* into = &head;
  while (!block.empty()) {
    const auto eol = block.find("\r\n");
    const std::string_view line = block.substr(0, eol);
    const auto colon = line.find(": ");
    if (line.empty()) into = &after;  // the trailer section follows
    if (colon != std::string_view::npos) {
      into->push_back({std::string(line.substr(0, colon)), std::string(line.substr(colon + 2))});
    }
    if (eol == std::string_view::npos) break;
    block.remove_prefix(eol + 2);
  }
  move_legacy_trailers(head, after);
  if (trailers != nullptr) *trailers = std::move(after);
  return head;
}

}  // namespace idemproxy::store
