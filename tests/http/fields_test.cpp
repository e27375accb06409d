// Field rules at a hop's boundary: what strip_hop_by_hop removes of a head (RFC 9110
// 7.6.1), in one walk over its fields, and what it keeps, in order.
#include "http/fields.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "http/extra_fields.hpp"
#include "idemproxy/engine/engine.hpp"

namespace idemproxy::http {
namespace {

using Lines = std::vector<std::pair<std::string, std::string>>;

Lines lines(const Fields& fields) {
  Lines out;
  for (const auto& f : fields) out.emplace_back(f.name_string(), f.value());
  return out;
}

Fields fields_of(const Lines& given) {
  Fields f;
  for (const auto& [name, value] : given) f.insert(name, value);
  return f;
}

TEST(StripHopByHop, EveryConnectionHeaderIsANameBeastKnowsAndNoOtherIsOne) {
  for (const auto name : engine::kConnectionHeaders) {
    EXPECT_NE(bhttp::string_to_field(name), bhttp::field::unknown) << name;
    EXPECT_TRUE(is_connection_field(bhttp::string_to_field(name))) << name;
  }
  for (const auto other :
       {bhttp::field::host, bhttp::field::content_length, bhttp::field::transfer_encoding,
        bhttp::field::cookie, bhttp::field::unknown}) {
    EXPECT_FALSE(is_connection_field(other)) << bhttp::to_string(other);
  }
}

TEST(StripHopByHop, RemovesTheConnectionHeadersAndWhatConnectionNamesKeepingTheRestInOrder) {
  Fields f = fields_of({{"Host", "shop.example"},
                        {"Connection", "close, X-Secret"},
                        {"X-Secret", "1"},
                        {"KEEP-ALIVE", "timeout=5"},
                        {"Content-Length", "3"},
                        {"connection", " Cookie ,content-length, host"},  // framing, Host stay
                        {"x-secret", "2"},
                        {"TE", "x"},
                        {"Trailer", "x"},
                        {"Upgrade", "x"},
                        {"Proxy-Connection", "x"},
                        {"Proxy-Authenticate", "x"},
                        {"Proxy-Authorization", "x"},
                        {"Cookie", "a=b"},
                        {"X-Kept", "y"},
                        {"X-Secret-Not", "z"}});  // a longer name is another name
  strip_hop_by_hop(f);
  const Lines kept = {
      {"Host", "shop.example"}, {"Content-Length", "3"}, {"X-Kept", "y"}, {"X-Secret-Not", "z"}};
  EXPECT_EQ(lines(f), kept);
}

TEST(StripHopByHop, AHeadWithoutConnectionLosesOnlyTheConnectionHeaders) {
  Fields f = fields_of({{"te", "trailers"},
                        {"Content-Type", "application/grpc"},
                        {"upgrade", "h2c"},
                        {"X-Request-Id", "r"}});
  strip_hop_by_hop(f);
  const Lines kept = {{"Content-Type", "application/grpc"}, {"X-Request-Id", "r"}};
  EXPECT_EQ(lines(f), kept);
}

// ExtraFields: added in order, found and erased by name in any case; a copied value
// stays where it was written, in the object's own bytes or, once they are used, a
// string of its own, however many follow.
TEST(ExtraFields, KeepEveryCopiedValueInPlaceAndFindAndEraseByAnyCaseOfTheName) {
  ExtraFields extra;
  const std::string peer = "192.0.2.7";
  extra.add("X-Forwarded-For", peer);
  std::vector<std::string> copied;
  for (int i = 0; i < 12; ++i) {
    std::string value(static_cast<std::size_t>(10 + i * 7), static_cast<char>('a' + i));
    extra.add_copy("X-Copy", value);
    copied.push_back(value);
    value.assign(value.size(), '!');  // the copy does not view the caller's string
  }
  std::vector<std::string> seen;
  for (const auto& f : extra)
    if (f.name == "X-Copy") seen.emplace_back(f.value);
  EXPECT_EQ(seen, copied);
  ASSERT_NE(extra.find("x-forwarded-for"), nullptr);
  EXPECT_EQ(*extra.find("x-forwarded-for"), "192.0.2.7");
  EXPECT_EQ(extra.find("X-Forwarded-Host"), nullptr);
  extra.erase("x-copy");
  EXPECT_EQ(extra.find("X-Copy"), nullptr);
  ASSERT_NE(extra.begin(), extra.end());
  EXPECT_EQ(extra.begin()->name, "X-Forwarded-For");
  EXPECT_EQ(std::next(extra.begin()), extra.end());
}

// Decimal: a number's digits, none for the default, twenty for the largest.
TEST(Decimal, WritesANumbersDigits) {
  EXPECT_EQ(Decimal().view(), "");
  EXPECT_EQ(Decimal(0).view(), "0");
  EXPECT_EQ(Decimal(1048576).view(), "1048576");
  EXPECT_EQ(Decimal(18446744073709551615ULL).view(), "18446744073709551615");
}

}  // namespace
}  // namespace idemproxy::http
