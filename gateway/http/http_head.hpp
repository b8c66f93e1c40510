// Serialization of an HTTP/1.1 start line and header fields into one contiguous buffer, so a
// proxied message goes out in one write of [head, body bytes] instead of Beast's serializer's
// many small buffers. Used for bodies that are sized or empty; chunked bodies keep Beast's
// serializer (it re-frames the chunks).
#pragma once

#include <boost/beast/http/message.hpp>
#include <string>

namespace rategate::gateway {

/// Appends "METHOD target HTTP/1.x\r\n", the fields and the empty line to `out`.
void append_request_head(std::string& out, const boost::beast::http::request_header<>& h);

/// Appends "HTTP/1.x status reason\r\n", the fields and the empty line to `out`.
void append_response_head(std::string& out, const boost::beast::http::response_header<>& h);

}  // namespace rategate::gateway
