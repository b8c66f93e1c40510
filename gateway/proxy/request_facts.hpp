// What the HTTP/1.1 request path reads from a request's fields, gathered in one walk over the
// field list by Beast's field codes, instead of a lookup per name (each a red-black tree
// search with case-insensitive compares) in the session, the admission and the forwarder.
#pragma once

#include <boost/beast/http/fields.hpp>
#include <cstddef>
#include <string_view>

namespace rategate::gateway {

/// Facts of one request head. Views into the fields, valid until they change.
struct request_facts {
    std::string_view host;               ///< the first Host line's value
    std::size_t host_count = 0;          ///< Host lines
    std::string_view content_type;       ///< the first Content-Type line's value
    bool expect_continue = false;        ///< Expect: 100-continue
    bool upgrade_websocket = false;      ///< the first Upgrade line is `websocket`
    bool connection_close = false;       ///< a Connection line names `close`
    bool connection_keep_alive = false;  ///< a Connection line names `keep-alive`
    bool connection_upgrade = false;     ///< a Connection line names `upgrade`
    bool chunked = false;  ///< the last coding of the Transfer-Encoding line is `chunked`

    /// The client asked to keep the connection (RFC 9112 §9.3): HTTP/1.1 unless `close`,
    /// HTTP/1.0 only with `keep-alive` (what Beast's keep_alive() says).
    bool keep_alive(unsigned version) const {
        return version >= 11 ? !connection_close : connection_keep_alive;
    }
};

/// One walk over `f` (tokens compared without regard to case, list elements OWS-trimmed).
request_facts read_request_facts(const boost::beast::http::fields& f);

}  // namespace rategate::gateway
