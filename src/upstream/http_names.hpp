#pragma once
// What the upstream layer takes from the HTTP layer below it, by the names its code
// uses. Written once here, so that each file of upstream/ reads as if in one namespace.
#include "http/beast.hpp"
#include "http/chunk.hpp"
#include "http/exchange.hpp"
#include "http/fields.hpp"
#include "http/head_bytes.hpp"
#include "http/parse_buffered.hpp"
#include "http/signal.hpp"
#include "http/stream.hpp"
#include "http/tls.hpp"

namespace idemproxy::upstream {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ssl = boost::asio::ssl;
using http::ArenaAllocator;
using http::Chunk;
using http::connection_specific;
using http::ExtraFields;
using http::FieldsAllocator;
using http::Framing;
using http::HeadBytes;
using http::make_upstream_tls;
using http::offer_upstream_alpn;
using http::parse_buffered;
using http::prepare_upstream_tls;
using http::RequestHeader;
using http::ResponseHeader;
using http::ResponseParser;
using http::Signal;
using http::Stream;
using http::tcp;
using http::Trailers;
using http::use_nothrow;

}  // namespace idemproxy::upstream
