#pragma once
// An independent reading of an HTTP/1.1 upstream's answer (RFC 9112), for fuzz_answer:
// lenient where the framing does not depend on it (the status line's reason, a field's
// value, a chunk's extensions), strict where it does. Interim answers (1xx but 101)
// are skipped; the final answer's body is framed by chunked alone (its only transfer
// coding, once, beside no Content-Length), by Content-Length (one number, or a list of
// equal ones), or by the end of the bytes (the upstream closes after it). 204 and 304
// have no body, nor has an answer to HEAD.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace idemproxy::answer_oracle {

struct Reading {
  enum class Kind { whole, malformed, cut } kind = Kind::malformed;
  unsigned status = 0;
  std::string body;
};

namespace detail {

inline bool is_tchar(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

inline char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }

inline bool same_lower(std::string_view a, std::string_view lower_b) {
  if (a.size() != lower_b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower_b[i]) return false;
  }
  return true;
}

inline std::string_view trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

// The elements of a comma-separated list (RFC 9110 5.6.1), empty ones dropped;
// nullopt when an element is not a token.
inline std::optional<std::vector<std::string_view>> tokens(std::string_view value) {
  std::vector<std::string_view> out;
  while (true) {
    const auto comma = value.find(',');
    const std::string_view element = trim(value.substr(0, comma));
    if (!element.empty()) {
      for (const char c : element) {
        if (!is_tchar(c)) return std::nullopt;
      }
      out.push_back(element);
    }
    if (comma == std::string_view::npos) return out;
    value.remove_prefix(comma + 1);
  }
}

inline std::optional<std::uint64_t> decimal(std::string_view v) {
  if (v.empty() || v.size() > 19) return std::nullopt;
  std::uint64_t n = 0;
  for (const char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return n;
}

// One line ending in CRLF from the front of `in`; nullopt when there is none.
inline std::optional<std::string_view> line(std::string_view& in) {
  const auto end = in.find("\r\n");
  if (end == std::string_view::npos) return std::nullopt;
  const std::string_view out = in.substr(0, end);
  in.remove_prefix(end + 2);
  return out;
}

struct Head {
  unsigned status = 0;
  std::vector<std::string> lengths;  // each Content-Length value
  std::vector<std::string> codings;  // each Transfer-Encoding value
};

enum class HeadResult { ok, malformed, cut };

inline HeadResult read_head(std::string_view& in, Head& head) {
  const auto status_line = line(in);
  if (!status_line) return HeadResult::cut;
  // HTTP-version SP 3DIGIT SP reason (the reason is not read).
  const std::string_view s = *status_line;
  if (s.size() < 12 || s.substr(0, 5) != "HTTP/" || s[6] != '.' || s[8] != ' ') {
    return HeadResult::malformed;
  }
  const auto code = decimal(s.substr(9, 3));
  if (!code || *code < 100) return HeadResult::malformed;
  head.status = static_cast<unsigned>(*code);
  std::string* last = nullptr;  // the value an obs-fold continues, when it is framing's
  bool any = false;
  for (;;) {
    const auto field = line(in);
    if (!field) return HeadResult::cut;
    if (field->empty()) return HeadResult::ok;
    if (field->front() == ' ' || field->front() == '\t') {
      // obs-fold (RFC 9112 5.2): the value goes on, joined by a space.
      if (!any) return HeadResult::malformed;
      const std::string_view more = trim(*field);
      if (last != nullptr && !more.empty()) {
        if (!last->empty()) *last += ' ';
        *last += more;
      }
      continue;
    }
    const auto colon = field->find(':');
    if (colon == 0 || colon == std::string_view::npos) return HeadResult::malformed;
    const std::string_view name = field->substr(0, colon);
    for (const char c : name) {
      if (!is_tchar(c)) return HeadResult::malformed;
    }
    const std::string value(trim(field->substr(colon + 1)));
    any = true;
    last = nullptr;
    if (same_lower(name, "content-length")) last = &head.lengths.emplace_back(value);
    if (same_lower(name, "transfer-encoding")) last = &head.codings.emplace_back(value);
  }
}

// A chunked body (RFC 9112 7.1): sizes in hex, extensions skipped to the line's end,
// trailer fields skipped to the empty line.
inline Reading::Kind read_chunked(std::string_view& in, std::string& body) {
  for (;;) {
    const auto size_line = line(in);
    if (!size_line) return Reading::Kind::cut;
    const std::string_view digits = size_line->substr(0, size_line->find_first_of(" \t;"));
    if (digits.empty() || digits.size() > 16) return Reading::Kind::malformed;
    std::uint64_t size = 0;
    for (const char c : digits) {
      const char l = lower(c);
      const bool hex = (l >= '0' && l <= '9') || (l >= 'a' && l <= 'f');
      if (!hex) return Reading::Kind::malformed;
      size = size * 16 + static_cast<std::uint64_t>(l <= '9' ? l - '0' : l - 'a' + 10);
    }
    if (size == 0) break;
    if (in.size() < size + 2) return Reading::Kind::cut;
    if (in.substr(size, 2) != "\r\n") return Reading::Kind::malformed;
    body.append(in.substr(0, size));
    in.remove_prefix(size + 2);
  }
  for (;;) {
    const auto trailer = line(in);
    if (!trailer) return Reading::Kind::cut;
    if (trailer->empty()) return Reading::Kind::whole;
  }
}

}  // namespace detail

/// How `bytes`, all an upstream sent before closing, read as the answer to a POST, or
/// to a HEAD request (`head`: a final answer's head ends it).
inline Reading read(std::string_view bytes, bool head_request = false) {
  using detail::HeadResult;
  Reading out;
  for (int interim = 0;; ++interim) {
    detail::Head head;
    const HeadResult h = detail::read_head(bytes, head);
    if (h == HeadResult::cut) out.kind = Reading::Kind::cut;
    if (h != HeadResult::ok) return out;
    if (head.status / 100 == 1) {
      if (head.status == 101 || interim == 16) return out;  // never an answer
      continue;
    }
    // 600 to 999 are not HTTP's (RFC 9110 15), but nginx and Beast read them, and the
    // proxy relays them as they come (a client takes one for a 5xx).
    out.status = head.status;
    // Framing first, whatever the status: an answer that can be read two ways is
    // malformed even where its status says it has no body.
    std::size_t codings = 0;
    for (const auto& value : head.codings) {
      const auto list = detail::tokens(value);
      if (!list) return out;
      for (const auto coding : *list) {
        if (!detail::same_lower(coding, "chunked")) return out;
        ++codings;
      }
      if (list->empty()) return out;
    }
    if (codings > 1 || (codings == 1 && !head.lengths.empty())) return out;
    std::optional<std::uint64_t> length;
    for (const auto& value : head.lengths) {
      const auto list = detail::tokens(value);
      if (!list || list->empty()) return out;
      for (const auto element : *list) {
        const auto n = detail::decimal(element);
        if (!n || (length && *length != *n)) return out;
        length = n;
      }
    }
    if (head_request || head.status == 204 || head.status == 304) {
      out.kind = Reading::Kind::whole;
      return out;
    }
    if (codings == 1) {
      out.kind = detail::read_chunked(bytes, out.body);
      return out;
    }
    if (length) {
      if (bytes.size() < *length) {
        out.kind = Reading::Kind::cut;
        return out;
      }
      out.body = std::string(bytes.substr(0, *length));
    } else {
      out.body = std::string(bytes);  // to the close
    }
    out.kind = Reading::Kind::whole;
    return out;
  }
}

}  // namespace idemproxy::answer_oracle
