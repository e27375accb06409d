#include "idemproxy/engine/policy.hpp"

#include <gtest/gtest.h>

#include "idemproxy/engine/grpc_status.hpp"

using namespace idemproxy::engine;

namespace {
RoutePolicy route(std::string name, std::string prefix) {
  RoutePolicy p;
  p.name = std::move(name);
  p.path_prefix = std::move(prefix);
  return p;
}
}  // namespace

TEST(RouteTable, FirstMatchWins) {
  RouteTable t(
      {route("specific", "/v1/orders/refunds"), route("orders", "/v1/orders"), route("all", "/")});
  EXPECT_EQ(t.match("/v1/orders/refunds")->name, "specific");
  EXPECT_EQ(t.match("/v1/orders/7")->name, "orders");
  EXPECT_EQ(t.match("/v2/anything")->name, "all");
}

TEST(RouteTable, PrefixesMatchWholeSegments) {
  RouteTable t({route("orders", "/v1/orders")});
  EXPECT_NE(t.match("/v1/orders"), nullptr);
  EXPECT_NE(t.match("/v1/orders/"), nullptr);
  EXPECT_NE(t.match("/v1/orders/7/items"), nullptr);
  EXPECT_EQ(t.match("/v1/ordersx"), nullptr);
  EXPECT_EQ(t.match("/v1/order"), nullptr);
}

TEST(RouteTable, QueryIsIgnoredForMatching) {
  RouteTable t({route("orders", "/v1/orders")});
  EXPECT_NE(t.match("/v1/orders?expand=items"), nullptr);
  EXPECT_EQ(t.match("/v1?x=/v1/orders"), nullptr);
}

TEST(RouteTable, NoMatchMeansPassThrough) {
  RouteTable t({route("orders", "/v1/orders")});
  EXPECT_EQ(t.match("/status"), nullptr);
}

TEST(RoutePolicy, MethodsAreCovered) {
  RoutePolicy p;
  EXPECT_TRUE(p.covers_method("POST"));
  EXPECT_TRUE(p.covers_method("PATCH"));
  EXPECT_FALSE(p.covers_method("GET"));
}

TEST(RoutePolicy, DefaultStoreStatusIs2xxAnd4xx) {
  RoutePolicy p;
  EXPECT_TRUE(p.stores_status(200));
  EXPECT_TRUE(p.stores_status(201));
  EXPECT_TRUE(p.stores_status(404));
  EXPECT_FALSE(p.stores_status(500));
  EXPECT_FALSE(p.stores_status(503));
  EXPECT_FALSE(p.stores_status(302));
}

TEST(RoutePolicy, RetryableStatusesAreNeverStored) {
  RoutePolicy p;
  p.store_status = {{100, 599}};
  for (int s : {408, 409, 425, 429}) EXPECT_FALSE(p.stores_status(s)) << s;
  EXPECT_TRUE(p.stores_status(500));
}

TEST(RoutePolicy, GrpcStatusesThatSayTryAgainAreNeverStored) {
  RoutePolicy p;
  for (int code : {0, 3, 5, 6, 7, 9, 11, 12, 16}) EXPECT_TRUE(p.stores_grpc_status(code)) << code;
  for (int code : {1, 2, 4, 8, 10, 13, 14, 15}) EXPECT_FALSE(p.stores_grpc_status(code)) << code;
  p.store_grpc_status = {0, 14};  // a list that names UNAVAILABLE still never stores it
  EXPECT_FALSE(p.stores_grpc_status(14));
  EXPECT_FALSE(p.stores_grpc_status(5));
}

TEST(GrpcStatus, NamesAndContentTypes) {
  EXPECT_EQ(grpc_status_code("NOT_FOUND"), 5);
  EXPECT_EQ(grpc_status_code("UNAUTHENTICATED"), 16);
  EXPECT_FALSE(grpc_status_code("not_found"));
  EXPECT_EQ(grpc_status_name(14), "UNAVAILABLE");
  EXPECT_EQ(grpc_status_name(17), "");
  EXPECT_TRUE(is_grpc_content_type("application/grpc"));
  EXPECT_TRUE(is_grpc_content_type("application/grpc+proto"));
  EXPECT_TRUE(is_grpc_content_type("Application/GRPC+json"));
  EXPECT_FALSE(is_grpc_content_type("application/grpc-web"));
  EXPECT_FALSE(is_grpc_content_type("application/json"));
}

TEST(GrpcStatus, Timeouts) {
  EXPECT_EQ(parse_grpc_timeout("1S"), idemproxy::Duration{1000});
  EXPECT_EQ(parse_grpc_timeout("250m"), idemproxy::Duration{250});
  EXPECT_EQ(parse_grpc_timeout("2M"), idemproxy::Duration{120000});
  EXPECT_EQ(parse_grpc_timeout("100u"),
            idemproxy::Duration{1});  // rounded up: never a zero deadline
  EXPECT_EQ(parse_grpc_timeout("99999999H"), std::chrono::hours{99999999});
  EXPECT_FALSE(parse_grpc_timeout("123456789S"));  // more than 8 digits
  EXPECT_FALSE(parse_grpc_timeout("1s"));
  EXPECT_FALSE(parse_grpc_timeout("S"));
  EXPECT_FALSE(parse_grpc_timeout("-1S"));
}

TEST(RoutePolicy, DenyListIsCaseInsensitive) {
  RoutePolicy p;
  EXPECT_TRUE(p.denies_header("set-cookie"));
  EXPECT_TRUE(p.denies_header("Set-Cookie"));
  EXPECT_FALSE(p.denies_header("Content-Type"));
}

TEST(StatusRange, Parses) {
  StatusRange r;
  ASSERT_TRUE(parse_status_range("2xx", r));
  EXPECT_EQ(r.low, 200);
  EXPECT_EQ(r.high, 299);
  ASSERT_TRUE(parse_status_range("201", r));
  EXPECT_EQ(r.low, 201);
  EXPECT_EQ(r.high, 201);
  EXPECT_FALSE(parse_status_range("6xx", r));
  EXPECT_FALSE(parse_status_range("2x", r));
  EXPECT_FALSE(parse_status_range("abc", r));
}
