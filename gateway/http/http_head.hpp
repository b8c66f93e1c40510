// Serialization of a Beast message head (start line and fields) into one contiguous buffer, so
// it goes out in one write with its body instead of Beast's serializer's many small buffers:
// the gateway's own responses (errors, refusals) and the heads the HTTP/2 paths build. The
// HTTP/1.1 proxy path writes its heads without a field container (gateway/proxy/header_rewrite).
#pragma once

#include <boost/beast/http/message.hpp>
#include <string>

namespace rategate::gateway {

/// Appends "METHOD target HTTP/1.x\r\n", the fields and the empty line to `out`.
void append_request_head(std::string& out, const boost::beast::http::request_header<>& h);

/// Appends "HTTP/1.x status reason\r\n", the fields and the empty line to `out`.
void append_response_head(std::string& out, const boost::beast::http::response_header<>& h);

}  // namespace rategate::gateway
