// The relay of one HTTP message from one socket to another (Beast's relay() shape), for both
// directions of a proxied exchange (gateway/proxy/forward.cpp): the head goes out first, then
// the body one buffer at a time as it arrives, so neither side's body is ever held whole.
#pragma once

#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>
#include <cstdint>
#include <string>

#include "gateway/runtime/deadline.hpp"

namespace rategate::gateway {

/// How one relayed message ended.
struct relay_result {
    boost::system::error_code read;   ///< failure on the side the message came from
    boost::system::error_code write;  ///< failure on the side it went to
    std::uint64_t body_bytes = 0;
};

/// Streams the message held by parser `p` from `in` to `out`, one buffer of `buf_size` bytes at
/// a time (Beast's relay() shape). With a serializer `sr` the message is written through it
/// (chunked bodies are re-framed); without one the body is sized or empty and goes out byte for
/// byte after the serialized `head`, which rides the first write. Each read and write has its
/// timeout (a timed-out side reports `timed_out`).
template <bool is_request>
boost::asio::awaitable<relay_result> relay(
    timed_socket& in, boost::beast::flat_buffer& in_buf,
    boost::beast::http::parser<is_request, boost::beast::http::buffer_body>& p, timed_socket& out,
    boost::beast::http::serializer<is_request, boost::beast::http::buffer_body>* sr,
    const std::string* head, std::chrono::milliseconds read_timeout,
    std::chrono::milliseconds write_timeout, char* buf, std::size_t buf_size) {
    relay_result r;
    auto& body = p.get().body();
    bool head_sent = false;
    for (;;) {
        std::size_t produced = 0;
        if (!p.is_done()) {
            body.data = buf;
            body.size = buf_size;
            in.timer.expires_after(read_timeout);
            auto [ec, n] = co_await boost::beast::http::async_read_some(
                in, in_buf, p, boost::asio::as_tuple(boost::asio::use_awaitable));
            if (ec == boost::beast::http::error::need_buffer) ec = {};
            if (ec && in.timer.expired()) ec = boost::asio::error::timed_out;
            if (ec) {
                r.read = ec;
                co_return r;
            }
            produced = buf_size - body.size;
            // Nothing to forward yet (e.g. a chunk header): read on rather than emit an empty
            // chunk.
            if (produced == 0 && !p.is_done()) continue;
            r.body_bytes += produced;
        }
        out.timer.expires_after(write_timeout);
        boost::system::error_code wec;
        if (sr) {
            body.data = produced ? buf : nullptr;
            body.size = produced;
            body.more = !p.is_done();
            auto [ec, wn] = co_await boost::beast::http::async_write(
                out, *sr, boost::asio::as_tuple(boost::asio::use_awaitable));
            wec = ec == boost::beast::http::error::need_buffer ? boost::system::error_code{} : ec;
        } else {
            std::array<boost::asio::const_buffer, 2> pieces{
                head_sent ? boost::asio::const_buffer() : boost::asio::buffer(*head),
                boost::asio::buffer(buf, produced)};
            auto [ec, wn] = co_await boost::asio::async_write(
                out, pieces, boost::asio::as_tuple(boost::asio::use_awaitable));
            wec = ec;
            head_sent = true;
        }
        if (wec && out.timer.expired()) wec = boost::asio::error::timed_out;
        if (wec) {
            r.write = wec;
            co_return r;
        }
        if (sr ? (sr->is_done() || (p.is_done() && !body.more)) : p.is_done()) co_return r;
    }
}

}  // namespace rategate::gateway
