#include "idemproxy/engine/fingerprint_rule.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "engine/digest.hpp"
#include "idemproxy/engine/fingerprint.hpp"

namespace idemproxy::engine {
namespace {

using json = nlohmann::json;

// A JSON text as a document whose numbers keep their exact text: an integer that fits
// 64 bits as itself, any other number as a binary value holding its text (which no
// JSON string can equal once the document is written as CBOR, where the two are
// different major types). Built from SAX events over a canonical text, whose depth
// canonicalize_json has already bounded.
class ExactDocument final : public json::json_sax_t {
 public:
  ExactDocument() {}  // user-provided: json's own constructor is not noexcept
  ExactDocument(const ExactDocument&) = delete;
  ExactDocument& operator=(const ExactDocument&) = delete;
  ExactDocument(ExactDocument&&) = delete;
  ExactDocument& operator=(ExactDocument&&) = delete;
  ~ExactDocument() override = default;

  json root;

  bool null() override { return put(nullptr); }
  bool boolean(bool v) override { return put(v); }
  bool number_integer(std::int64_t v) override { return put(v); }
  bool number_unsigned(std::uint64_t v) override { return put(v); }
  bool number_float(double /*v*/, const std::string& text) override {
    return put(json::binary(std::vector<std::uint8_t>(text.begin(), text.end())));
  }
  bool string(std::string& v) override { return put(std::move(v)); }
  bool binary(json::binary_t& v) override { return put(std::move(v)); }
  bool start_object(std::size_t /*n*/) override { return open(json::object()); }
  bool key(std::string& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t /*n*/) override { return open(json::array()); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t /*at*/, const std::string& /*token*/,
                   const nlohmann::detail::exception& /*e*/) override {
    return false;
  }

 private:
  // A container on the stack only ever gains members after the ones above it have
  // closed, so the pointers the stack holds stay valid.
  json* place(json v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[key_];
    slot = std::move(v);
    return &slot;
  }
  bool put(json v) {
    place(std::move(v));
    return true;
  }
  bool open(json v) {
    stack_.push_back(place(std::move(v)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }
  std::vector<json*> stack_;
  std::string key_;
};

std::optional<json::json_pointer> pointer(const std::string& text) {
  try {
    return json::json_pointer(text);
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

// Whether `doc` has a value at `p`. An array index past any size_t (nlohmann throws
// on those) names nothing.
bool has(const json& doc, const json::json_pointer& p) {
  try {
    return doc.contains(p);
  } catch (const json::exception&) {
    return false;
  }
}

// Pointers in the order that removes each before anything that would shift it: by
// token, array indexes compared as numbers, deepest and highest index first.
bool removed_before(const std::string& a, const std::string& b) {
  const auto ta = pointer(a), tb = pointer(b);
  if (!ta || !tb) return a > b;
  std::vector<std::string> x, y;
  for (auto p = *ta; !p.empty(); p = p.parent_pointer()) x.insert(x.begin(), p.back());
  for (auto p = *tb; !p.empty(); p = p.parent_pointer()) y.insert(y.begin(), p.back());
  for (std::size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    if (x[i] == y[i]) continue;
    unsigned long long nx = 0, ny = 0;
    const bool numbers = std::from_chars(x[i].data(), x[i].data() + x[i].size(), nx).ptr ==
                             x[i].data() + x[i].size() &&
                         std::from_chars(y[i].data(), y[i].data() + y[i].size(), ny).ptr ==
                             y[i].data() + y[i].size();
    return numbers ? nx > ny : x[i] > y[i];
  }
  return x.size() > y.size();
}

void remove(json& doc, const std::string& text) {
  const auto p = pointer(text);
  if (!p || p->empty() || !has(doc, *p)) return;
  json& parent = doc.at(p->parent_pointer());
  if (parent.is_object()) {
    parent.erase(p->back());
  } else if (parent.is_array()) {
    parent.erase(static_cast<std::size_t>(std::stoull(p->back())));
  }
}

// What of a JSON document the rule covers, as CBOR.
std::string covered_json(const FingerprintRule& rule, json doc) {
  json covered;
  if (!rule.include.empty()) {
    covered = json::array();
    for (const auto& text : rule.include) {
      const auto p = pointer(text);
      if (p && has(doc, *p)) {
        covered.push_back(json::array({true, doc.at(*p)}));
      } else {
        covered.push_back(json::array({false}));
      }
    }
  } else {
    std::vector<std::string> order = rule.exclude;
    std::sort(order.begin(), order.end(), removed_before);
    for (const auto& text : order) remove(doc, text);
    covered = std::move(doc);
  }
  const std::vector<std::uint8_t> cbor = json::to_cbor(covered);
  return {cbor.begin(), cbor.end()};
}

// The target's path, and its query as the rule counts it.
std::string covered_target(const FingerprintRule& rule, std::string_view target) {
  const auto q = target.find('?');
  if (rule.query == FingerprintRule::Query::all || q == std::string_view::npos) {
    return std::string(rule.query == FingerprintRule::Query::all ? target : target.substr(0, q));
  }
  std::string out(target.substr(0, q));
  if (rule.query == FingerprintRule::Query::none) return out;
  std::string_view query = target.substr(q + 1);
  char sep = '?';
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    const std::string_view name = param.substr(0, param.find('='));
    if (std::find(rule.query_params.begin(), rule.query_params.end(), name) !=
        rule.query_params.end()) {
      out += sep;
      out.append(param);
      sep = '&';
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return out;
}

constexpr std::size_t kDigestSize = 64;

}  // namespace

std::string FingerprintRule::spelling() const {
  if (is_default()) return {};
  json s = json::object();
  if (!include.empty()) s["include"] = include;
  if (!exclude.empty()) s["exclude"] = exclude;
  if (query == Query::none) s["query"] = "none";
  if (query == Query::listed) s["query"] = query_params;
  if (!headers.empty()) s["headers"] = headers;
  return s.dump();
}

std::optional<FingerprintRule> FingerprintRule::from_spelling(std::string_view spelling) {
  const json s = json::parse(spelling, nullptr, false);
  if (!s.is_object()) return std::nullopt;
  FingerprintRule rule;
  const auto strings = [&](const char* name, std::vector<std::string>& into) {
    if (!s.contains(name)) return true;
    if (!s[name].is_array()) return false;
    for (const auto& v : s[name]) {
      if (!v.is_string()) return false;
      into.push_back(v.get<std::string>());
    }
    return true;
  };
  if (!strings("include", rule.include) || !strings("exclude", rule.exclude) ||
      !strings("headers", rule.headers)) {
    return std::nullopt;
  }
  if (s.contains("query")) {
    if (s["query"] == "none") {
      rule.query = Query::none;
    } else if (strings("query", rule.query_params)) {
      rule.query = Query::listed;
    } else {
      return std::nullopt;
    }
  }
  if (rule.is_default()) return std::nullopt;  // the default is never spelled
  return rule;
}

std::string fingerprint(const FingerprintRule& rule, const RequestParts& request,
                        std::size_t max_json_depth) {
  if (rule.is_default()) {
    return fingerprint(request.method, request.target, request.content_type, request.body,
                       max_json_depth);
  }
  PartsDigest h;
  h.part("rule");
  h.part(request.method);
  h.part(covered_target(rule, request.target));
  std::optional<std::string> canonical;
  if (is_json_content_type(request.content_type)) {
    canonical = canonicalize_json(request.body, max_json_depth);
  }
  ExactDocument doc;
  if (canonical && json::sax_parse(*canonical, &doc)) {
    h.part("json");
    h.part(covered_json(rule, std::move(doc.root)));
  } else if (canonical) {
    // JSON that nlohmann refuses (a number past a double's range, 1e400): whole, by
    // its canonical form, so the same request in other bytes still matches.
    h.part("canonical");
    h.part(*canonical);
  } else {
    h.part("raw");
    h.part(request.body);
  }
  for (const auto& name : rule.headers) {
    h.part(name);
    h.part(request.header ? request.header(name) : std::string());
  }
  return rule.spelling() + h.hex();
}

std::optional<FingerprintRule> rule_of(std::string_view stored_fingerprint) {
  if (stored_fingerprint.size() <= kDigestSize) return FingerprintRule{};
  return FingerprintRule::from_spelling(
      stored_fingerprint.substr(0, stored_fingerprint.size() - kDigestSize));
}

bool same_rule(std::string_view a, std::string_view b) {
  const auto spelled = [](std::string_view f) {
    return f.substr(0, f.size() > kDigestSize ? f.size() - kDigestSize : 0);
  };
  return spelled(a) == spelled(b);
}

}  // namespace idemproxy::engine
