// JSON canonicalisation for fingerprints, without recursion and without doubles.
//
// The output is the form nlohmann::json's dump() gave before (members sorted by
// their bytes, no whitespace, its escapes and its float layout), so records stored
// by earlier versions keep matching, except where that form was wrong:
// - numbers are read from their text, never through a double: 100.10000000000000001
//   and 100.1 differ, and integers beyond 64 bits stay exact;
// - duplicate member names are all kept, in their order, so {"a":1,"a":2} never
//   matches {"a":2} (parsers disagree on which one wins);
// - nesting deeper than `max_depth`, or an exponent of more than 15 digits, is not
//   canonicalised (the caller fingerprints the bytes), and nothing here recurses,
//   so depth cannot exhaust the stack.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/json_number.hpp"
#include "idemproxy/common/hex.hpp"
#include "idemproxy/engine/fingerprint.hpp"

namespace idemproxy::engine {
namespace {

class Canonicalizer {
 public:
  Canonicalizer(std::string_view in, std::size_t max_depth) : in_(in), max_depth_(max_depth) {
    out_.reserve(in.size());
  }

  std::optional<std::string> run() {
    skip_ws();
    if (!begin_value()) return std::nullopt;
    while (!stack_.empty()) {
      skip_ws();
      if (pos_ >= in_.size()) return std::nullopt;
      Frame& f = stack_.back();
      const char c = in_[pos_];
      if (f.object && f.count > 0) f.members.back().end = out_.size();
      if (c == (f.object ? '}' : ']')) {
        ++pos_;
        close(f);
        stack_.pop_back();
        continue;
      }
      if (f.count > 0) {
        if (c != ',') return std::nullopt;
        ++pos_;
        out_ += ',';
        skip_ws();
      }
      ++f.count;
      if (f.object) {
        Member m;
        m.begin = out_.size();
        if (pos_ >= in_.size() || in_[pos_] != '"' || !string(&m.key)) return std::nullopt;
        skip_ws();
        if (pos_ >= in_.size() || in_[pos_] != ':') return std::nullopt;
        ++pos_;
        out_ += ':';
        f.members.push_back(std::move(m));
        skip_ws();
      }
      if (!begin_value()) return std::nullopt;
    }
    skip_ws();
    if (pos_ != in_.size()) return std::nullopt;
    return std::move(out_);
  }

 private:
  struct Member {
    std::string key;        // decoded: members sort by these bytes, as std::map did
    std::size_t begin = 0;  // `"key":value` is out_[begin, end)
    std::size_t end = 0;
  };
  struct Frame {
    bool object = false;
    std::size_t start = 0;  // just past the opening bracket in out_
    std::size_t count = 0;
    std::vector<Member> members;
  };

  void skip_ws() {
    while (pos_ < in_.size() &&
           (in_[pos_] == ' ' || in_[pos_] == '\t' || in_[pos_] == '\n' || in_[pos_] == '\r')) {
      ++pos_;
    }
  }

  // A scalar is parsed and written whole; a container is opened and pushed.
  bool begin_value() {
    if (pos_ >= in_.size()) return false;
    const char c = in_[pos_];
    if (c == '{' || c == '[') {
      if (stack_.size() >= max_depth_) return false;
      ++pos_;
      out_ += c;
      stack_.push_back(Frame{c == '{', out_.size(), 0, {}});
      return true;
    }
    if (c == '"') return string(nullptr);
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    for (const std::string_view literal : {"true", "false", "null"}) {
      if (in_.substr(pos_, literal.size()) == literal) {
        pos_ += literal.size();
        out_ += literal;
        return true;
      }
    }
    return false;
  }

  void close(Frame& f) {
    if (f.object && f.members.size() > 1) {
      const auto by_key = [](const Member& a, const Member& b) { return a.key < b.key; };
      if (!std::is_sorted(f.members.begin(), f.members.end(), by_key)) {
        std::stable_sort(f.members.begin(), f.members.end(), by_key);
        std::string sorted;
        sorted.reserve(out_.size() - f.start);
        for (const auto& m : f.members) {
          if (!sorted.empty()) sorted += ',';
          sorted.append(out_, m.begin, m.end - m.begin);
        }
        out_.replace(f.start, std::string::npos, sorted);
      }
    }
    out_ += f.object ? '}' : ']';
  }

  bool hex4(std::uint32_t& v) {
    if (pos_ + 4 > in_.size()) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = hex_digit(in_[pos_++]);
      if (h < 0) return false;
      v = v * 16 + static_cast<std::uint32_t>(h);
    }
    return true;
  }

  static void append_utf8(std::string& s, std::uint32_t cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // Length of the well-formed UTF-8 sequence at pos_ (RFC 3629 4), or 0.
  std::size_t utf8_length() const {
    const auto b = [&](std::size_t i) { return static_cast<unsigned char>(in_[pos_ + i]); };
    const unsigned char c = b(0);
    std::size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    // The table of RFC 3629 4: the lead byte sets the length and the second byte's
    // range (narrower after E0, ED, F0 and F4: no overlongs, surrogates or > U+10FFFF).
    if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return 0;
    }
    if (pos_ + n > in_.size()) return 0;
    if (b(1) < lo || b(1) > hi) return 0;
    for (std::size_t i = 2; i < n; ++i) {
      if (b(i) < 0x80 || b(i) > 0xBF) return 0;
    }
    return n;
  }

  // Decodes a string at pos_ (at its quote) and writes it in canonical escapes;
  // `decoded`, when given, gets its value.
  bool string(std::string* decoded) {
    ++pos_;
    std::string value;
    for (;;) {
      if (pos_ >= in_.size()) return false;
      const auto c = static_cast<unsigned char>(in_[pos_]);
      if (c == '"') {
        ++pos_;
        break;
      }
      if (c < 0x20) return false;
      if (c >= 0x80) {
        const std::size_t n = utf8_length();
        if (n == 0) return false;
        value.append(in_, pos_, n);
        pos_ += n;
        continue;
      }
      ++pos_;
      if (c != '\\') {
        value += static_cast<char>(c);
        continue;
      }
      if (pos_ >= in_.size()) return false;
      const char e = in_[pos_++];
      switch (e) {
        case '"':
          value += '"';
          break;
        case '\\':
          value += '\\';
          break;
        case '/':
          value += '/';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'n':
          value += '\n';
          break;
        case 'r':
          value += '\r';
          break;
        case 't':
          value += '\t';
          break;
        case 'u': {
          std::uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xDC00 && cp <= 0xDFFF) return false;  // a lone low surrogate
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            std::uint32_t low = 0;
            if (in_.substr(pos_, 2) != "\\u") return false;
            pos_ += 2;
            if (!hex4(low) || low < 0xDC00 || low > 0xDFFF) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(value, cp);
          break;
        }
        default:
          return false;
      }
    }
    out_ += '"';
    static constexpr char kHex[] = "0123456789abcdef";
    for (const char ch : value) {
      const auto u = static_cast<unsigned char>(ch);
      switch (ch) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\b':
          out_ += "\\b";
          break;
        case '\f':
          out_ += "\\f";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\r':
          out_ += "\\r";
          break;
        case '\t':
          out_ += "\\t";
          break;
        default:
          if (u < 0x20) {
            out_ += "\\u00";
            out_ += kHex[u >> 4];
            out_ += kHex[u & 0xF];
          } else {
            out_ += ch;
          }
      }
    }
    out_ += '"';
    if (decoded) *decoded = std::move(value);
    return true;
  }

  bool digits(std::string_view& run) {
    const std::size_t start = pos_;
    while (pos_ < in_.size() && in_[pos_] >= '0' && in_[pos_] <= '9') ++pos_;
    run = in_.substr(start, pos_ - start);
    return !run.empty();
  }

  // RFC 8259 6. An integer keeps its digits; any other number becomes its exact
  // decimal value in the layout nlohmann's dump() gives a double.
  bool number() {
    const bool negative = in_[pos_] == '-';
    if (negative) ++pos_;
    std::string_view whole, fraction, exponent;
    if (!digits(whole)) return false;
    if (whole.size() > 1 && whole[0] == '0') return false;
    bool real = false;
    if (pos_ < in_.size() && in_[pos_] == '.') {
      ++pos_;
      if (!digits(fraction)) return false;
      real = true;
    }
    bool exponent_negative = false;
    if (pos_ < in_.size() && (in_[pos_] == 'e' || in_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < in_.size() && (in_[pos_] == '+' || in_[pos_] == '-')) {
        exponent_negative = in_[pos_++] == '-';
      }
      if (!digits(exponent)) return false;
      real = true;
    }
    if (!real) {
      if (negative && whole != "0") out_ += '-';  // -0 is the integer 0
      out_ += whole;
      return true;
    }
    // value = D * 10^scale, D the digits without leading or trailing zeros.
    std::string d(whole);
    d += fraction;
    std::int64_t scale = -static_cast<std::int64_t>(fraction.size());
    // An exponent of more than 15 digits cannot be held exactly (clamping it would
    // make two different numbers equal): such a document is compared by its bytes.
    exponent.remove_prefix(std::min(exponent.find_first_not_of('0'), exponent.size()));
    if (exponent.size() > 15) return false;
    std::int64_t e = 0;
    for (const char c : exponent) e = e * 10 + (c - '0');
    scale += exponent_negative ? -e : e;
    const auto first = d.find_first_not_of('0');
    if (negative) out_ += '-';
    if (first == std::string::npos) {
      out_ += "0.0";
      return true;
    }
    d.erase(0, first);
    const auto last = d.find_last_not_of('0');
    scale += static_cast<std::int64_t>(d.size() - last - 1);
    d.erase(last + 1);
    append_decimal(out_, d, scale);
    return true;
  }

  std::string_view in_;
  std::size_t max_depth_;
  std::size_t pos_ = 0;
  std::string out_;
  std::vector<Frame> stack_;
};

}  // namespace

std::optional<std::string> canonicalize_json(std::string_view body, std::size_t max_depth) {
  return Canonicalizer(body, max_depth).run();
}

}  // namespace idemproxy::engine
