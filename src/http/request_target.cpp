#include "http/request_target.hpp"

#include <cctype>

#include "idemproxy/common/hex.hpp"

namespace idemproxy::http {
namespace {

bool is_unreserved(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
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
  if (a.empty()) return false;
  for (const char c : a) {
    const auto u = static_cast<unsigned char>(c);
    if (!(is_unreserved(u) || c == '%' || c == ':' || c == '[' || c == ']' || c == '!' ||
          c == '$' || c == '&' || c == '\'' || c == '(' || c == ')' || c == '*' || c == '+' ||
          c == ',' || c == ';' || c == '=')) {
      return false;
    }
  }
  return true;
}

namespace {

// Removes ";parameters" from each segment.
std::string without_parameters(std::string_view path) {
  std::string out;
  out.reserve(path.size());
  bool in_parameter = false;
  for (const char c : path) {
    if (c == '/') in_parameter = false;
    if (c == ';') in_parameter = true;
    if (!in_parameter) out += c;
  }
  return out;
}

}  // namespace

std::string remove_dot_segments(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  const auto drop_last_segment = [&out] {
    const auto slash = out.rfind('/');
    out.erase(slash == std::string::npos ? 0 : slash);
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
      out += segment;
      in.remove_prefix(segment.size());
    }
  }
  return out;
}

std::variant<RequestTarget, std::string> normalize_target(std::string_view target,
                                                          const TargetRules& rules) {
  RequestTarget out;
  if (target == "*") {  // asterisk-form (OPTIONS *): no path, no route
    out.forward = "*";
    return out;
  }
  if (starts_with_nocase(target, "http://") || starts_with_nocase(target, "https://")) {
    target.remove_prefix(target.find("//") + 2);
    const auto end = target.find_first_of("/?");
    out.authority = std::string(target.substr(0, end));
    if (!valid_authority(out.authority) || out.authority.find('@') != std::string::npos) {
      return std::string("the request target's authority is not a valid host");
    }
    target = end == std::string_view::npos ? std::string_view{} : target.substr(end);
  } else if (!target.starts_with('/')) {
    return std::string("the request target must be an absolute path or an absolute URI");
  }
  const auto question = target.find('?');
  const std::string_view raw_path = target.substr(0, question);
  const std::string_view query =
      question == std::string_view::npos ? std::string_view{} : target.substr(question);
  if (target.find('#') != std::string_view::npos) {
    return std::string("the request target must not contain a fragment");
  }

  std::string path;
  path.reserve(raw_path.size() + 1);
  if (raw_path.empty()) path = "/";
  for (std::size_t i = 0; i < raw_path.size(); ++i) {
    const char c = raw_path[i];
    if (c == '\\' && rules.reject_escaped_slashes) {
      return std::string("the request path contains a backslash");
    }
    if (c != '%') {
      if (c == '/' && rules.merge_slashes && !path.empty() && path.back() == '/') continue;
      path += c;
      continue;
    }
    const int hi = i + 2 < raw_path.size() ? hex_digit(raw_path[i + 1]) : -1;
    const int lo = hi >= 0 ? hex_digit(raw_path[i + 2]) : -1;
    if (hi < 0 || lo < 0) return std::string("the request path has an invalid percent-escape");
    const auto decoded = static_cast<unsigned char>(hi * 16 + lo);
    i += 2;
    if (is_unreserved(decoded)) {
      path += static_cast<char>(decoded);
      continue;
    }
    if ((decoded == '/' || decoded == '\\' || decoded == 0) && rules.reject_escaped_slashes) {
      return std::string("the request path contains an encoded slash, backslash or NUL");
    }
    static constexpr char kHex[] = "0123456789ABCDEF";
    path += '%';
    path += kHex[decoded >> 4];
    path += kHex[decoded & 0xf];
  }
  path = remove_dot_segments(path);
  if (path.empty()) path = "/";
  out.route_path = remove_dot_segments(without_parameters(path));
  if (out.route_path.empty()) out.route_path = "/";
  out.forward = std::move(path);
  out.forward += query;
  return out;
}

}  // namespace idemproxy::http
