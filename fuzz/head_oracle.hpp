#pragma once
// The HTTP/1.1 request head parser (codec/http1/request_head.hpp) against Beast's
// request parser, which it replaced, on one whole head: the oracle shared by
// fuzz/fuzz_head.cpp and tests/http/request_head_test.cpp.
// They must refuse the same heads with the same error, and read the same request
// line, fields (in order) and framing from the rest. Three differences are by design:
// a head with obsolete line folding is refused (Beast folds it), a head too short for
// its version is refused (Beast waits for more), and so is a head with a
// Transfer-Encoding field that is not a list of tokens (Beast reads up to its first
// bad element).
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "codec/http1/request_head.hpp"
#include "http/beast.hpp"

namespace idemproxy::head_oracle {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

/// `bytes` cut after its first blank line, or given one at its end: a whole head, as
/// the exchange hands one to the parser.
inline std::string whole_head(std::string_view bytes) {
  const auto end = bytes.find("\r\n\r\n");
  if (end != std::string_view::npos) return std::string(bytes.substr(0, end + 4));
  return std::string(bytes) + "\r\n\r\n";
}

inline bool has_obs_fold(std::string_view head) {
  for (auto at = head.find('\n'); at != std::string_view::npos; at = head.find('\n', at + 1)) {
    if (at + 1 < head.size() && (head[at + 1] == ' ' || head[at + 1] == '\t')) return true;
  }
  return false;
}

/// Whether a Transfer-Encoding field's value (OWS trimmed) is not a list of tokens.
inline bool has_bad_coding_list(std::string_view head) {
  for (std::size_t at = head.find("\r\n"); at != std::string_view::npos;) {
    const std::size_t start = at + 2, end = head.find("\r\n", start);
    if (end == std::string_view::npos) break;
    const std::string_view line = head.substr(start, end - start);
    const auto colon = line.find(':');
    if (colon != std::string_view::npos &&
        beast::iequals(line.substr(0, colon), "transfer-encoding")) {
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
        value.remove_prefix(1);
      }
      while (!value.empty() && (value.back() == ' ' || value.back() == '\t'))
        value.remove_suffix(1);
      if (!bhttp::validate_list(bhttp::opt_token_list{value})) return true;
    }
    at = end;
  }
  return false;
}

/// What differs between the two parsers on `head` (a whole head); empty when they agree.
inline std::string difference(std::string_view head) {
  http::RequestParser<bhttp::empty_body> beast_parser;
  beast_parser.eager(false);
  beast_parser.body_limit(boost::none);  // as the exchange parsed heads: limits came later
  beast_parser.header_limit(static_cast<std::uint32_t>(head.size() + 1));
  beast::error_code beast_ec;
  beast_parser.put(asio::buffer(head.data(), head.size()), beast_ec);

  http::RequestHeader mine;
  codec::http1::HeadFacts facts;
  const auto ec = codec::http1::parse_request_head(head, mine, facts);

  std::ostringstream out;
  if (beast_ec == bhttp::error::need_more || has_obs_fold(head) || has_bad_coding_list(head)) {
    if (!ec) out << "accepted a head Beast refuses, would fold, or reads a coding list of\n";
    return out.str();
  }
  if (beast_ec || ec) {
    if (beast_ec != ec)
      out << "error: Beast '" << beast_ec.message() << "', ours '" << ec.message() << "'\n";
    return out.str();
  }
  const auto& theirs = beast_parser.get().base();
  if (theirs.method_string() != mine.method_string()) out << "method\n";
  if (theirs.method() != mine.method()) out << "verb\n";
  if (theirs.target() != mine.target()) out << "target\n";
  if (theirs.version() != mine.version() || facts.version != mine.version()) out << "version\n";
  std::size_t count = 0, lengths = 0, encodings = 0, hosts = 0;
  auto a = theirs.begin(), b = mine.begin();
  for (; a != theirs.end() && b != mine.end(); ++a, ++b, ++count) {
    if (a->name() != b->name() || a->name_string() != b->name_string() ||
        a->value() != b->value()) {
      out << "field " << count << ": '" << a->name_string() << ": " << a->value() << "' against '"
          << b->name_string() << ": " << b->value() << "'\n";
    }
    lengths += a->name() == bhttp::field::content_length;
    encodings += a->name() == bhttp::field::transfer_encoding;
    hosts += a->name() == bhttp::field::host;
  }
  if (a != theirs.end() || b != mine.end()) out << "field count\n";
  if (facts.fields != count || facts.lengths != lengths || facts.encodings != encodings ||
      facts.hosts != hosts) {
    out << "field counts in the facts\n";
  }
  const auto first = [&](bhttp::field name) {
    const auto it = theirs.find(name);
    return it == theirs.end() ? std::string_view{} : std::string_view(it->value());
  };
  if (facts.host != first(bhttp::field::host) || facts.expect != first(bhttp::field::expect) ||
      facts.te != first(bhttp::field::te)) {
    out << "a first value (Host, Expect, TE)\n";
  }
  const auto length = beast_parser.content_length();
  if ((length ? std::optional<std::uint64_t>(*length) : std::nullopt) != facts.content_length) {
    out << "content length\n";
  }
  if (beast_parser.chunked() != facts.chunked) out << "chunked\n";
  if (beast_parser.keep_alive() != facts.keep_alive) out << "keep-alive\n";
  return out.str();
}

}  // namespace idemproxy::head_oracle
