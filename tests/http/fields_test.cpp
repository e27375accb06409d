// Field rules at a hop's boundary: what strip_hop_by_hop removes of a head (RFC 9110
// 7.6.1), in one walk over its fields, and what it keeps, in order.
#include "http/fields.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

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

}  // namespace
}  // namespace idemproxy::http
