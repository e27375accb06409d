#pragma once
// The HTTP/1.1 head parsers (codec/http1/request_head.hpp, response_head.hpp) against
// Beast's request and response parsers, which they replaced, on one whole head: the
// oracle shared by fuzz/fuzz_head.cpp and tests/http/request_head_test.cpp and
// response_head_test.cpp.
// They must refuse the same heads with the same error, and read the same start
// line, fields (in order) and framing from the rest. Three differences are by design:
// a head with obsolete line folding is refused (Beast folds it), a head too short for
// its version is refused (Beast waits for more), and so is a head with a
// Transfer-Encoding field that is not a list of tokens (Beast reads up to its first
// bad element).
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "codec/http1/request_head.hpp"
#include "codec/http1/response_head.hpp"
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

namespace detail {

/// Beast's parse of `head`, whole, by `parser`: no limit on a body's length (the
/// exchange and the call check lengths against their own limits later).
template <class Parser>
beast::error_code put_whole(Parser& parser, std::string_view head) {
  parser.eager(false);
  parser.body_limit(boost::none);
  parser.header_limit(static_cast<std::uint32_t>(head.size() + 1));
  beast::error_code ec;
  parser.put(asio::buffer(head.data(), head.size()), ec);
  return ec;
}

/// Whether both parsers accepted `head` (Beast's error `beast_ec`, ours `ec`); when
/// not, `out` says how they differ, if they do (with the differences by design above).
inline bool both_accepted(std::string_view head, const beast::error_code& beast_ec,
                          const beast::error_code& ec, std::ostringstream& out) {
  if (beast_ec == bhttp::error::need_more || has_obs_fold(head) || has_bad_coding_list(head)) {
    if (!ec) out << "accepted a head Beast refuses, would fold, or reads a coding list of\n";
    return false;
  }
  if (beast_ec || ec) {
    if (beast_ec != ec)
      out << "error: Beast '" << beast_ec.message() << "', ours '" << ec.message() << "'\n";
    return false;
  }
  return true;
}

template <class Header>
void same_fields(const Header& theirs, const Header& mine, const codec::http1::MessageFacts& facts,
                 std::ostringstream& out) {
  if (theirs.version() != mine.version() || facts.version != mine.version()) out << "version\n";
  std::size_t count = 0, lengths = 0, encodings = 0, codings = 0;
  auto a = theirs.begin(), b = mine.begin();
  for (; a != theirs.end() && b != mine.end(); ++a, ++b, ++count) {
    if (a->name() != b->name() || a->name_string() != b->name_string() ||
        a->value() != b->value()) {
      out << "field " << count << ": '" << a->name_string() << ": " << a->value() << "' against '"
          << b->name_string() << ": " << b->value() << "'\n";
    }
    lengths += a->name() == bhttp::field::content_length;
    if (a->name() == bhttp::field::transfer_encoding) {
      ++encodings;
      for ([[maybe_unused]] const auto coding : bhttp::opt_token_list{a->value()}) ++codings;
    }
  }
  if (a != theirs.end() || b != mine.end()) out << "field count\n";
  if (facts.fields != count || facts.lengths != lengths || facts.encodings != encodings ||
      facts.codings != codings) {
    out << "field counts in the facts\n";
  }
}

template <class Parser>
void same_framing(const Parser& beast_parser, const codec::http1::MessageFacts& facts,
                  std::ostringstream& out) {
  const auto length = beast_parser.content_length();
  if ((length ? std::optional<std::uint64_t>(*length) : std::nullopt) != facts.content_length) {
    out << "content length\n";
  }
  if (beast_parser.chunked() != facts.chunked) out << "chunked\n";
  // Beast's keep_alive() is false too for a body framed by the close, which the
  // caller reads from the framing.
  if (!beast_parser.need_eof() && beast_parser.keep_alive() != facts.keep_alive) {
    out << "keep-alive\n";
  }
}

}  // namespace detail

/// What differs between the two parsers on `head` (a whole request head); empty when
/// they agree.
inline std::string difference(std::string_view head) {
  http::RequestParser<bhttp::empty_body> beast_parser;
  const auto beast_ec = detail::put_whole(beast_parser, head);

  http::RequestHeader mine;
  codec::http1::HeadFacts facts;
  const auto ec = codec::http1::parse_request_head(head, mine, facts);

  std::ostringstream out;
  if (!detail::both_accepted(head, beast_ec, ec, out)) return out.str();
  const auto& theirs = beast_parser.get().base();
  if (theirs.method_string() != mine.method_string()) out << "method\n";
  if (theirs.method() != mine.method()) out << "verb\n";
  if (theirs.target() != mine.target()) out << "target\n";
  detail::same_fields(theirs, mine, facts, out);
  std::size_t hosts = 0;
  for (const auto& field : theirs) hosts += field.name() == bhttp::field::host;
  if (facts.hosts != hosts) out << "hosts in the facts\n";
  const auto first = [&](bhttp::field name) {
    const auto it = theirs.find(name);
    return it == theirs.end() ? std::string_view{} : std::string_view(it->value());
  };
  if (facts.host != first(bhttp::field::host) || facts.expect != first(bhttp::field::expect) ||
      facts.te != first(bhttp::field::te)) {
    out << "a first value (Host, Expect, TE)\n";
  }
  detail::same_framing(beast_parser, facts, out);
  return out.str();
}

/// The same for an answer's head (codec/http1/response_head.hpp) against Beast's
/// response parser: the status line, the fields and the framing.
inline std::string answer_difference(std::string_view head) {
  http::ResponseParser<bhttp::empty_body> beast_parser;
  const auto beast_ec = detail::put_whole(beast_parser, head);

  http::ResponseHeader mine;
  codec::http1::AnswerFacts facts;
  const auto ec = codec::http1::parse_response_head(head, mine, facts);

  std::ostringstream out;
  if (!detail::both_accepted(head, beast_ec, ec, out)) return out.str();
  const auto& theirs = beast_parser.get().base();
  if (theirs.result_int() != mine.result_int() || facts.status != mine.result_int()) {
    out << "status\n";
  }
  if (theirs.reason() != mine.reason()) out << "reason\n";
  detail::same_fields(theirs, mine, facts, out);
  detail::same_framing(beast_parser, facts, out);
  return out.str();
}

/// What `count` mutations of `seeds` came to (bytes replaced, inserted and removed,
/// biased to the characters a parser decides on), each made a whole head.
struct Tally {
  std::string differs;  // the first difference found, with the head: none, when empty
  std::size_t accepted = 0;
  std::map<std::string, std::size_t> errors;  // the refusals, by their message
};

/// Mutates `seeds` `count` times from `seed`, compares each head by `difference`
/// (difference or answer_difference) and tallies what `parse` (the error of our
/// parse) says of it; stops at the first difference.
template <class Difference, class Parse>
Tally tally_mutations(const std::vector<std::string>& seeds, std::uint32_t seed, int count,
                      Difference difference, Parse parse) {
  const std::string alphabet("\r\n:, \t\x7f\x80\xff\"0123456789aZ-;=/\x01\0", 26);
  std::mt19937 rng(seed);
  Tally tally;
  for (int i = 0; i < count; ++i) {
    std::string bytes = seeds[rng() % seeds.size()];
    for (int edits = 1 + static_cast<int>(rng() % 4); edits > 0; --edits) {
      const std::size_t at = rng() % bytes.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          bytes[at] = c;
          break;
        case 1:
          bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at), c);
          break;
        default:
          bytes.erase(at, 1);
          break;
      }
    }
    const std::string head = whole_head(bytes);
    if (const std::string differs = difference(head); !differs.empty()) {
      tally.differs = differs + "on " + head;
      break;
    }
    if (const beast::error_code ec = parse(head)) {
      ++tally.errors[ec.message()];
    } else {
      ++tally.accepted;
    }
  }
  return tally;
}

}  // namespace idemproxy::head_oracle
