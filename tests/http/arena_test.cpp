// A connection's arena (arena.hpp): freed blocks are taken again, large ones go to the
// heap, and nothing that may outlive the connection keeps pointing into it. Under the
// sanitizer build, a copy left pointing into a destroyed arena is a use after free.
#include "http/arena.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "http/beast.hpp"

using namespace idemproxy::http;

TEST(Arena, FreedBlocksAreTakenAgainAndLargeOnesGoToTheHeap) {
  Arena arena;
  void* a = arena.allocate(100);
  void* b = arena.allocate(100);
  void* c = arena.allocate(40);
  EXPECT_NE(a, b);
  EXPECT_EQ(arena.blocks(), 1U);
  arena.deallocate(b, 100);
  arena.deallocate(a, 100);
  arena.deallocate(c, 40);
  // The same size class hands back what was freed, the last freed first.
  EXPECT_EQ(arena.allocate(97), a);
  EXPECT_EQ(arena.allocate(128), b);
  EXPECT_EQ(arena.allocate(33), c);
  void* large = arena.allocate(Arena::kLargest + 1);  // not carved from a block
  arena.deallocate(large, Arena::kLargest + 1);
  EXPECT_EQ(arena.blocks(), 1U);
  for (int i = 0; i < 40; ++i) arena.allocate(Arena::kLargest);  // past one block
  EXPECT_GT(arena.blocks(), 1U);
}

TEST(Arena, CopiesAndMovesIntoOtherFieldsNeverPointIntoIt) {
  auto arena = std::make_unique<Arena>();
  std::string copied_value;
  Fields copy;
  Fields moved_into;
  {
    Fields in_arena{FieldsAllocator{arena.get()}};
    in_arena.set("X-Request-Id", std::string(40, 'a'));
    in_arena.set(bhttp::field::content_type, "application/json");
    EXPECT_EQ(arena->blocks(), 1U);

    Fields copied(in_arena);  // a copy may outlive the connection: on the heap
    EXPECT_EQ(copied.get_allocator().arena(), nullptr);
    copy = copied;
    moved_into = std::move(in_arena);  // another allocator: the fields are copied over
    EXPECT_EQ(moved_into.get_allocator().arena(), nullptr);
  }
  arena.reset();  // the connection is gone
  EXPECT_EQ(copy["X-Request-Id"], std::string(40, 'a'));
  EXPECT_EQ(moved_into["X-Request-Id"], std::string(40, 'a'));
  EXPECT_EQ(moved_into[bhttp::field::content_type], "application/json");
}

TEST(Arena, AParserMadeWithItKeepsTheRequestsFieldsThere) {
  Arena arena;
  const std::string head =
      "GET /v1/orders/12345678901234567890 HTTP/1.1\r\nHost: shop.example\r\n"
      "Accept: application/json\r\n\r\n";
  for (int round = 0; round < 3; ++round) {
    RequestParser<bhttp::empty_body> p(std::piecewise_construct, std::make_tuple(),
                                       std::make_tuple(FieldsAllocator{&arena}));
    beast::error_code ec;
    p.put(asio::buffer(head), ec);
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(p.get().target(), "/v1/orders/12345678901234567890");
    EXPECT_EQ(p.get()[bhttp::field::host], "shop.example");
    EXPECT_EQ(p.get().get_allocator().arena(), &arena);
  }
  EXPECT_EQ(arena.blocks(), 1U);  // each round took the previous round's blocks again
}
