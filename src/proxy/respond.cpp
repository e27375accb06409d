// Answers the proxy gives itself: the upstream's, forwarded whole, and problems.
#include "proxy/context.hpp"

namespace idemproxy::proxy {

bool covered(const RequestContext& ctx) {
  const auto* route = ctx.route;
  return route != nullptr && route->enabled && route->covers_method(ctx.method);
}

void refuse_key(RequestContext& ctx, const engine::KeyVerdict& verdict, ProblemKind unusable,
                std::string why) {
  if (verdict.outcome != ops::Outcome::missing_key) {
    ctx.fail(unusable, std::move(why), verdict.outcome);
    return;
  }
  const auto& route = *ctx.route;
  std::string detail = "route " + route.name + " requires an " + route.header + " header";
  if (!route.key_json_pointer.empty()) {
    detail += " or a key at " + route.key_json_pointer + " in the JSON body";
  }
  ctx.fail(ProblemKind::missing_key, std::move(detail), verdict.outcome);
}

std::string_view policy_link(const RequestContext& ctx) {
  if (ctx.grpc || !covered(ctx)) return {};
  return ctx.settings.policy.link;
}

asio::awaitable<bool> send_answer(RequestContext& ctx, ResponseHeader& head, std::string_view body,
                                  Trailers trailers) {
  if (!ctx.request_id.empty()) head.set("X-Request-Id", ctx.request_id);
  ctx.status = head.result_int();
  const bool sent = co_await ctx.ex.send(head, body, trailers);
  co_return sent;
}

asio::awaitable<bool> send_problem(RequestContext& ctx) {
  if (ctx.route != nullptr) ctx.error->status = route_status(*ctx.route, ctx.error->kind);
  auto res = ctx.grpc ? grpc_refusal(*ctx.error) : problem_response(*ctx.error);
  if (const auto link = policy_link(ctx); !link.empty()) res.set(bhttp::field::link, link);
  const std::string_view body = res.body();
  const Trailers none;
  const bool sent = co_await send_answer(ctx, res.base(), body, none);
  co_return sent;
}

}  // namespace idemproxy::proxy
