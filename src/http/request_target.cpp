#include "http/request_target.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "idemproxy/common/hex.hpp"

namespace idemproxy::http {
namespace {

// RFC 3986 2.3's unreserved characters, and those 3.2.2 allows in a host (and 3.2.3
// a port): a table each, where isalnum would ask the C locale per character.
constexpr auto kUnreserved = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) {
    t[c] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
  }
  return t;
}();
constexpr auto kAuthority = [] {
  std::array<bool, 256> t = kUnreserved;
  for (const char c : std::string_view("%:[]!$&'()*+,;=")) t[static_cast<unsigned char>(c)] = true;
  return t;
}();

bool is_unreserved(unsigned char c) { return kUnreserved[c]; }

// Whether `path` (from "/") is already as normalize_target would leave it: no
// percent-escape, backslash, parameter, dot segment, or (with merge_slashes) empty
// segment. Most paths are, and are copied as they are.
bool already_normal(std::string_view path, bool merge_slashes) {
  char previous = 0;
  for (const char c : path) {
    if (c == '%' || c == '\\' || c == ';') return false;
    if (previous == '/' && (c == '.' || (c == '/' && merge_slashes))) return false;
    previous = c;
  }
  return true;
}

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  }
  return true;
}

}  // namespace

bool valid_authority(std::string_view a) {
  return !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
    return kAuthority[static_cast<unsigned char>(c)];
  });
}

namespace {

// Removes ";parameters" from each segment, in place.
void remove_parameters(std::string& path) {
  std::size_t kept = 0;
  bool in_parameter = false;
  for (const char c : path) {
    if (c == '/') in_parameter = false;
    if (c == ';') in_parameter = true;
    if (!in_parameter) path[kept++] = c;
  }
  path.resize(kept);
}

}  // namespace

// The output is written over the input it has consumed: each step appends at most
// what it consumed, so the write position never passes the read position.
void remove_dot_segments(std::string& path) {
  char* const base = path.data();
  std::string_view in(path);
  std::size_t out = 0;  // path[0, out) is the output buffer of RFC 3986 5.2.4
  const auto drop_last_segment = [&] {
    const auto slash = std::string_view(base, out).rfind('/');
    out = slash == std::string_view::npos ? 0 : slash;
  };
  while (!in.empty()) {
    if (in.starts_with("../")) {
      in.remove_prefix(3);
    } else if (in.starts_with("./") || in.starts_with("/./")) {
      in.remove_prefix(2);  // A drops "./"; B turns "/./" into "/"
    } else if (in == "/.") {
      in = "/";
    } else if (in.starts_with("/../")) {
      in.remove_prefix(3);
      drop_last_segment();
    } else if (in == "/..") {
      in = "/";
      drop_last_segment();
    } else if (in == "." || in == "..") {
      in = {};
    } else {
      const auto next = in.find('/', 1);
      const auto segment = in.substr(0, next);
      std::memmove(base + out, segment.data(), segment.size());
      out += segment.size();
      in.remove_prefix(segment.size());
    }
  }
  path.resize(out);
}

std::optional<std::string_view> normalize_target(std::string_view target, const TargetRules& rules,
                                                 RequestTarget& out) {
  out.forward.clear();
  out.route_path.clear();
  out.authority.clear();
  if (target == "*") {  // asterisk-form (OPTIONS *): no path, no route
    out.forward = "*";
    return std::nullopt;
  }
  if (starts_with_nocase(target, "http://") || starts_with_nocase(target, "https://")) {
    target.remove_prefix(target.find("//") + 2);
    const auto end = target.find_first_of("/?");
    out.authority.assign(target.substr(0, end));
    if (!valid_authority(out.authority) || out.authority.find('@') != std::string::npos) {
      return "the request target's authority is not a valid host";
    }
    target = end == std::string_view::npos ? std::string_view{} : target.substr(end);
  } else if (!target.starts_with('/')) {
    return "the request target must be an absolute path or an absolute URI";
  }
  const auto question = target.find('?');
  const std::string_view raw_path = target.substr(0, question);
  const std::string_view query =
      question == std::string_view::npos ? std::string_view{} : target.substr(question);
  if (target.find('#') != std::string_view::npos) {
    return "the request target must not contain a fragment";
  }

  std::string& path = out.forward;
  if (raw_path.starts_with('/') && already_normal(raw_path, rules.merge_slashes)) {
    out.route_path.assign(raw_path);
    path.reserve(raw_path.size() + query.size());
    path.assign(raw_path);
    path += query;
    return std::nullopt;
  }
  path.reserve(raw_path.size() + query.size() + 1);
  if (raw_path.empty()) path = "/";
  for (std::size_t i = 0; i < raw_path.size(); ++i) {
    const char c = raw_path[i];
    if (c == '\\' && rules.reject_escaped_slashes) {
      return "the request path contains a backslash";
    }
    if (c != '%') {
      if (c == '/' && rules.merge_slashes && !path.empty() && path.back() == '/') continue;
      path += c;
      continue;
    }
    const int hi = i + 2 < raw_path.size() ? hex_digit(raw_path[i + 1]) : -1;
    const int lo = hi >= 0 ? hex_digit(raw_path[i + 2]) : -1;
    if (hi < 0 || lo < 0) return "the request path has an invalid percent-escape";
    const auto decoded = static_cast<unsigned char>(hi * 16 + lo);
    i += 2;
    if (is_unreserved(decoded)) {
      path += static_cast<char>(decoded);
      continue;
    }
    if ((decoded == '/' || decoded == '\\' || decoded == 0) && rules.reject_escaped_slashes) {
      return "the request path contains an encoded slash, backslash or NUL";
    }
    static constexpr char kHex[] = "0123456789ABCDEF";
    path += '%';
    path += kHex[decoded >> 4];
    path += kHex[decoded & 0xf];
  }
  remove_dot_segments(path);
  if (path.empty()) path = "/";
  out.route_path.assign(path);
  remove_parameters(out.route_path);
  remove_dot_segments(out.route_path);
  if (out.route_path.empty()) out.route_path = "/";
  path += query;
  return std::nullopt;
}

}  // namespace idemproxy::http
