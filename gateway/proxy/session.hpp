// One client connection: a coroutine that owns its socket, reads requests in order
// (keep-alive, pipelining), enforces the listener limits and hands each request to the proxy.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace rategate::gateway {

class worker;

/// Serves `socket` until the client closes, a limit or error ends it, or shutdown. A task of
/// the worker's `sessions` group: `partial` cancellation closes it while it is idle (waiting
/// for a request), `terminal` at any point.
/// Counts itself in `w.open_connections` (already incremented by the acceptor).
boost::asio::awaitable<void> run_session(worker& w, boost::asio::ip::tcp::socket socket);

}  // namespace rategate::gateway
