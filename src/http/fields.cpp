#include "http/fields.hpp"

#include <algorithm>
#include <array>
#include <iterator>
#include <span>

#include "idemproxy/engine/engine.hpp"

namespace idemproxy::http {
std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

void strip_hop_by_hop(Fields& fields) {
  // Framing and Host must never be removed because Connection names them.
  static constexpr std::array<std::string_view, 3> kProtected = {"content-length",
                                                                 "transfer-encoding", "host"};
  // Connection names few fields: a small fixed list, no allocation on the common path.
  std::array<std::string_view, 8> named{};
  std::size_t count = 0;
  std::string connection;  // the values viewed by `named`, copied before fields change
  for (const auto& f : fields) {
    if (f.name() != bhttp::field::connection) continue;
    if (!connection.empty()) connection += ',';
    connection.append(f.value());
  }
  for (std::string_view v = connection; !v.empty();) {
    const auto comma = v.find(',');
    const auto token = trim_ows(v.substr(0, comma));
    const bool kept = std::any_of(kProtected.begin(), kProtected.end(),
                                  [&](std::string_view p) { return beast::iequals(p, token); });
    if (!token.empty() && !kept && count < named.size()) named[count++] = token;
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
  // One walk, erasing as it goes, where a search of the field tree per name (eight
  // and those Connection names) cost more than the rest of a head's handling.
  const std::span<const std::string_view> tokens(named.data(), count);
  for (auto it = fields.begin(); it != fields.end();) {
    it = is_connection_field(it->name()) ||
                 (!tokens.empty() && std::any_of(tokens.begin(), tokens.end(),
                                                 [name = it->name_string()](std::string_view t) {
                                                   return beast::iequals(name, t);
                                                 }))
             ? fields.erase(it)
             : std::next(it);
  }
}

bool is_connection_field(bhttp::field name) {
  // engine::kConnectionHeaders, as Beast numbers them (each a name it knows: a test
  // says so); `unknown` never matches.
  static const auto known = [] {
    std::array<bhttp::field, engine::kConnectionHeaders.size()> out{};
    std::transform(engine::kConnectionHeaders.begin(), engine::kConnectionHeaders.end(),
                   out.begin(), [](std::string_view n) { return bhttp::string_to_field(n); });
    return out;
  }();
  return name != bhttp::field::unknown &&
         std::find(known.begin(), known.end(), name) != known.end();
}

bool connection_specific(std::string_view name, std::string_view connection) {
  static constexpr std::array<std::string_view, 5> kFields = {
      "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"};
  for (auto f : kFields) {
    if (beast::iequals(name, f)) return true;
  }
  for (std::size_t at = 0; at < connection.size();) {
    auto end = connection.find(',', at);
    if (end == std::string_view::npos) end = connection.size();
    const auto token = trim_ows(connection.substr(at, end - at));
    if (!token.empty() && beast::iequals(name, token)) return true;
    at = end + 1;
  }
  return false;
}

std::string joined_values(const Fields& fields, std::string_view name) {
  std::string joined;
  for (const auto& f : fields) {
    if (!beast::iequals(f.name_string(), name)) continue;
    if (!joined.empty()) joined += ", ";
    joined += trim_ows(f.value());
  }
  return joined;
}

void append_codings_but_chunked(std::string& codings, std::string_view value) {
  for (const auto& coding : bhttp::token_list{value}) {
    if (beast::iequals(coding, "chunked")) continue;
    if (!codings.empty()) codings += ", ";
    codings += coding;
  }
}

bool coding_list(std::string_view value) {
  return bhttp::validate_list(bhttp::opt_token_list{value});
}

bool allowed_in_trailers(std::string_view name) {
  static constexpr std::array<std::string_view, 12> kNever = {
      "content-length", "transfer-encoding", "host",         "connection",
      "keep-alive",     "proxy-connection",  "te",           "trailer",
      "upgrade",        "content-encoding",  "content-type", "content-range"};
  return std::none_of(kNever.begin(), kNever.end(),
                      [&](std::string_view n) { return beast::iequals(name, n); });
}

}  // namespace idemproxy::http
