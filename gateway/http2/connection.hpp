// One HTTP/2 connection on the listener (RFC 9113, SPEC §3 "HTTP/2"): nghttp2's server session
// fed and drained as bytes over the session's stream (plain or TLS), each stream a request run
// as its own coroutine through the same admission and upstream pool as HTTP/1.1.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <string>
#include <string_view>

namespace rategate::gateway {
class worker;
struct timed_socket;
}  // namespace rategate::gateway

namespace rategate::gateway::http2 {

/// The connection preface of a client (RFC 9113 §3.4), which h2c with prior knowledge starts
/// with.
inline constexpr std::string_view client_preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Serves `client` as HTTP/2 until either side ends the connection: `preread` holds the bytes
/// already read from it (the preface, or part of it, and whatever followed). Sends the
/// SETTINGS of `http2` (max_concurrent_streams, initial_window_size for streams and the
/// connection) and limits.max_header_bytes as SETTINGS_MAX_HEADER_LIST_SIZE. A worker stop
/// sends GOAWAY and finishes the streams in flight; a terminal cancellation ends them at once.
/// Does not close the socket.
boost::asio::awaitable<void> serve(worker& w, timed_socket& client, std::string_view preread,
                                   const std::string& peer);

}  // namespace rategate::gateway::http2
