// The HTTP/2 codec's header list: names lowered (RFC 9113 §8.2.1) for every byte a
// name may hold, values as given, fields new on every message never indexed (RFC 7541
// §6.2.3), and fields that outlast the submission taken by view.
#include <gtest/gtest.h>

#include <string>

#include "codec/http2/nv.hpp"

namespace idemproxy::codec::http2 {
namespace {

std::string name_of(const nghttp2_nv& nv) {
  return {reinterpret_cast<const char*>(nv.name), nv.namelen};
}
std::string value_of(const nghttp2_nv& nv) {
  return {reinterpret_cast<const char*>(nv.value), nv.valuelen};
}

// Every byte value at every offset of names of several lengths: only 'A' to 'Z' change.
TEST(NvList, LowersExactlyTheAsciiUpperCaseLettersOfAName) {
  for (std::size_t length : {1U, 7U, 8U, 9U, 23U}) {
    for (int b = 0; b < 256; ++b) {
      for (std::size_t at = 0; at < length; ++at) {
        std::string name(length, 'Q');
        name[at] = static_cast<char>(b);
        std::string want = name;
        for (char& c : want) {
          if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        }
        NvList list;
        list.add(name, "Value As Given");
        ASSERT_EQ(name_of(list.data()[0]), want) << "byte " << b << " at " << at;
        ASSERT_EQ(value_of(list.data()[0]), "Value As Given");
      }
    }
  }
}

TEST(NvList, FieldsNewOnEveryMessageAreNeverIndexed) {
  NvList list;
  list.add("X-Request-Id", "0123456789abcdef0123456789abcdef");
  list.add("Content-Type", "application/json");
  list.add("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  list.add("Idempotency-Key", "order-1");
  list.add_lasting("date", "Thu, 03 Dec 2026 16:34:34 GMT");
  const nghttp2_nv* nv = list.data();
  ASSERT_EQ(list.size(), 5U);
  EXPECT_EQ(nv[0].flags, NGHTTP2_NV_FLAG_NO_INDEX);
  EXPECT_EQ(nv[1].flags, NGHTTP2_NV_FLAG_NONE);
  EXPECT_EQ(nv[2].flags, NGHTTP2_NV_FLAG_NO_INDEX);
  EXPECT_EQ(nv[3].flags, NGHTTP2_NV_FLAG_NO_INDEX);
  EXPECT_EQ(nv[4].flags, NGHTTP2_NV_FLAG_NONE);
}

// A lasting field with a lower-case name is viewed where it lies; one with an upper-case
// letter is copied lowered. Copies made before and after a view, past the list's first
// room, keep their order and bytes.
TEST(NvList, ALastingLowerCaseFieldIsViewedAndTheRestCopiedInOrder) {
  const std::string kept_name = "content-type", kept_value = "application/grpc";
  const std::string mixed = "Idempotent-Replayed";
  NvList list;
  const std::string big(700, 'v');  // past the first room: the copies move
  list.add("A-First", big);
  list.add_lasting(kept_name, kept_value);
  list.add_lasting(mixed, "true");
  list.add("Z-Last", big);
  const nghttp2_nv* nv = list.data();
  ASSERT_EQ(list.size(), 4U);
  EXPECT_EQ(name_of(nv[0]), "a-first");
  EXPECT_EQ(value_of(nv[0]), big);
  EXPECT_EQ(reinterpret_cast<const char*>(nv[1].name), kept_name.data());
  EXPECT_EQ(reinterpret_cast<const char*>(nv[1].value), kept_value.data());
  EXPECT_EQ(name_of(nv[2]), "idempotent-replayed");
  EXPECT_NE(reinterpret_cast<const char*>(nv[2].name), mixed.data());
  EXPECT_EQ(value_of(nv[2]), "true");
  EXPECT_EQ(name_of(nv[3]), "z-last");
  EXPECT_EQ(value_of(nv[3]), big);
  list.clear();  // the room is kept for the next head
  list.add("Next", "1");
  EXPECT_EQ(name_of(list.data()[0]), "next");
}

}  // namespace
}  // namespace idemproxy::codec::http2
