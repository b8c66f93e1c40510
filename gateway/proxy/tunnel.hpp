// The two-way byte tunnel of an upgraded connection (SPEC §3 WebSocket, RFC 6455 §1.7; the
// "transfer(a, b) || transfer(b, a)" shape of Asio's examples): both directions at once,
// back-pressure each way (a direction reads only after its last write finished), closed when
// either side closes or no byte has passed either way for `idle`.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <chrono>
#include <cstdint>

namespace rategate::gateway {

struct timed_socket;

/// Bytes relayed by a tunnel, each way.
struct tunnel_bytes {
    std::uint64_t client_to_upstream = 0;
    std::uint64_t upstream_to_client = 0;
};

/// Relays bytes between `client` and `upstream` until either side closes, fails, or `idle`
/// passes with no byte either way. Bytes already read into `client_pending` /
/// `upstream_pending` go first. `buf_up` and `buf_down` are scratch buffers of `size` bytes.
boost::asio::awaitable<tunnel_bytes> run_tunnel(timed_socket& client,
                                                boost::beast::flat_buffer& client_pending,
                                                timed_socket& upstream,
                                                boost::beast::flat_buffer& upstream_pending,
                                                std::chrono::milliseconds idle, char* buf_up,
                                                char* buf_down, std::size_t size);

}  // namespace rategate::gateway
