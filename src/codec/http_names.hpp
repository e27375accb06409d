#pragma once
// What the codecs take from the HTTP layer below them, by the names their code uses.
// Written once here, so that each file of codec/ reads as if in one namespace.
#include "http/arena.hpp"
#include "http/beast.hpp"
#include "http/chunk.hpp"
#include "http/client_connection.hpp"
#include "http/exchange.hpp"
#include "http/fields.hpp"
#include "http/head_bytes.hpp"
#include "http/parse_buffered.hpp"
#include "http/request_target.hpp"
#include "http/settings.hpp"
#include "http/signal.hpp"

namespace idemproxy::codec {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using http::allowed_in_trailers;
using http::append_field;
using http::Arena;
using http::BodyPiece;
using http::Chunk;
using http::ClientConnection;
using http::connection_specific;
using http::Decimal;
using http::ExtraField;
using http::Fields;
using http::FieldsAllocator;
using http::Framing;
using http::HeadBytes;
using http::HeadError;
using http::KeptStrings;
using http::parse_buffered;
using http::PreparedAnswer;
using http::Protocol;
using http::RequestFacts;
using http::RequestHeader;
using http::RequestParser;
using http::ResponseHeader;
using http::Service;
using http::Settings;
using http::Signal;
using http::tcp;
using http::Trailers;
using http::use_nothrow;
using http::valid_authority;

}  // namespace idemproxy::codec
