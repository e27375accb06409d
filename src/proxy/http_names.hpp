#pragma once
// What the proxy takes from the HTTP layer below it, by the names its code uses.
// Written once here, so that each file of proxy/ reads as if in one namespace.
#include "http/beast.hpp"
#include "http/chunk.hpp"
#include "http/exchange.hpp"
#include "http/fields.hpp"
#include "http/head_bytes.hpp"
#include "http/problem.hpp"
#include "http/request_target.hpp"
#include "http/settings.hpp"
#include "http/signal.hpp"
#include "http/trace_context.hpp"

namespace idemproxy::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using http::append_codings_but_chunked;
using http::BodyPiece;
using http::Chunk;
using http::Decimal;
using http::Exchange;
using http::ExtraField;
using http::ExtraFields;
using http::Fields;
using http::FieldsAllocator;
using http::Framing;
using http::grpc_refusal;
using http::HeadBytes;
using http::HeadError;
using http::normalize_target;
using http::parse_traceparent;
using http::Peer;
using http::PreparedAnswer;
using http::problem_catalog;
using http::problem_response;
using http::ProblemKind;
using http::Protocol;
using http::ProxyError;
using http::PublishedPolicy;
using http::random_hex;
using http::refusal_error;
using http::RequestHeader;
using http::RequestTarget;
using http::ResponseHeader;
using http::route_status;
using http::same_name;
using http::Service;
using http::Settings;
using http::Signal;
using http::start_trace;
using http::StartedTrace;
using http::StringRequest;
using http::StringResponse;
using http::strip_hop_by_hop;
using http::TraceParent;
using http::Trailers;
using http::trim_ows;
using http::use_nothrow;

}  // namespace idemproxy::proxy
