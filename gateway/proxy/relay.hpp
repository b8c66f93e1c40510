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
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "gateway/runtime/deadline.hpp"

namespace rategate::gateway {

/// The readable bytes of `b` as text (views the buffer: valid until it changes).
inline std::string_view buffer_view(const boost::beast::flat_buffer& b) {
    auto d = b.data();
    return {static_cast<const char*>(d.data()), d.size()};
}

/// How one relayed message ended.
struct relay_result {
    boost::system::error_code read;   ///< failure on the side the message came from
    boost::system::error_code write;  ///< failure on the side it went to
    std::uint64_t body_bytes = 0;
};

namespace detail {

/// The line opening one chunk of `size` bytes (RFC 9112 §7.1): hex digits, CRLF.
inline std::string_view chunk_size_line(std::size_t size, char (&out)[20]) {
    static constexpr char hex[] = "0123456789abcdef";
    char* end = out + sizeof out;
    char* p = end;
    *--p = '\n';
    *--p = '\r';
    do {
        *--p = hex[size & 0xf];
        size >>= 4;
    } while (size);
    return {p, static_cast<std::size_t>(end - p)};
}

/// Offers `pieces` to a plain socket's kernel buffer at once, as nginx writes (a
/// non-blocking send: no operation queued on the event loop). True when that settled the
/// write: every byte went out, or `ec` holds a failure. False when bytes are left (`pieces` now
/// holds them) or the socket is TLS: write_rest() sends them.
template <std::size_t N>
bool write_now(timed_socket& out, std::array<boost::asio::const_buffer, N>& pieces,
               boost::system::error_code& ec) {
    if (out.tls) return false;
    if (!out.socket.non_blocking()) out.socket.non_blocking(true, ec);
    std::size_t sent = ec ? 0 : out.socket.write_some(pieces, ec);
    if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) ec = {};
    if (ec) return true;
    std::size_t left = 0;
    for (auto& piece : pieces) {
        auto taken = std::min(sent, piece.size());
        piece += taken;
        sent -= taken;
        left += piece.size();
    }
    return left == 0;
}

/// Writes what is left of `pieces` under the deadline (a timed-out side reports `timed_out`).
template <std::size_t N>
boost::asio::awaitable<boost::system::error_code> write_rest(
    timed_socket& out, std::array<boost::asio::const_buffer, N>& pieces,
    std::chrono::milliseconds timeout) {
    out.timer.expires_after(timeout);
    auto [ec, n] = co_await boost::asio::async_write(
        out, pieces, boost::asio::as_tuple(boost::asio::use_awaitable));
    if (ec && out.timer.expired()) ec = boost::asio::error::timed_out;
    co_return ec;
}

}  // namespace detail

/// Streams the body held by parser `p` (its head already parsed) from `in` to `out`, one buffer
/// of `buf_size` bytes at a time (Beast's relay() shape), after the serialized `head`, which
/// rides the first write. A response's head goes alone before any read that has to wait for
/// the upstream (what `in_buf` holds gave no body bytes): the client sees the status as soon as
/// the upstream sent it, whenever the body comes (server-sent events, long polls). With
/// `chunked_out` each piece goes out as one chunk and the body ends with the last chunk (no
/// trailers); otherwise the body is sized or close-delimited and goes out byte for byte. Each
/// read and write has its timeout (a timed-out side reports `timed_out`).
template <bool is_request>
boost::asio::awaitable<relay_result> relay(
    timed_socket& in, boost::beast::flat_buffer& in_buf,
    boost::beast::http::parser<is_request, boost::beast::http::buffer_body>& p, timed_socket& out,
    const std::string& head, bool chunked_out, std::chrono::milliseconds read_timeout,
    std::chrono::milliseconds write_timeout, char* buf, std::size_t buf_size) {
    relay_result r;
    auto& body = p.get().body();
    bool head_sent = false, buffer_tried = false;
    for (;;) {
        std::size_t produced = 0;
        // A response's head alone, before a read that would wait for the upstream.
        const bool head_alone =
            !is_request && !head_sent && !p.is_done() && (in_buf.size() == 0 || buffer_tried);
        if (!head_alone && !p.is_done()) {
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
            buffer_tried = true;
            if (produced == 0 && !p.is_done()) continue;
            r.body_bytes += produced;
        }
        char size_line[20];
        static constexpr std::string_view crlf = "\r\n", last_chunk = "0\r\n\r\n";
        std::array<boost::asio::const_buffer, 5> pieces{head_sent ? boost::asio::const_buffer()
                                                                  : boost::asio::buffer(head)};
        pieces[2] = boost::asio::buffer(buf, produced);
        if (chunked_out && produced) {
            pieces[1] = boost::asio::buffer(detail::chunk_size_line(produced, size_line));
            pieces[3] = boost::asio::buffer(crlf);
        }
        if (chunked_out && p.is_done()) pieces[4] = boost::asio::buffer(last_chunk);
        head_sent = true;
        boost::system::error_code wec;
        if (!detail::write_now(out, pieces, wec))
            wec = co_await detail::write_rest(out, pieces, write_timeout);
        if (wec) {
            r.write = wec;
            co_return r;
        }
        if (p.is_done()) co_return r;
    }
}

/// Relays a body of exactly `length` bytes from `in` to `out` after `head` (both ride the
/// first write with whatever of the body `in_buf` already holds); no parser. Bytes past the
/// body stay in `in_buf`. Same timeouts and errors as relay(); a close before the end is a
/// `partial_message` read error.
inline boost::asio::awaitable<relay_result> relay_sized(
    timed_socket& in, boost::beast::flat_buffer& in_buf, timed_socket& out, const std::string& head,
    std::uint64_t length, std::chrono::milliseconds read_timeout,
    std::chrono::milliseconds write_timeout, char* buf, std::size_t buf_size) {
    relay_result r;
    auto held = std::min<std::uint64_t>(length, in_buf.size());
    std::array<boost::asio::const_buffer, 2> first{boost::asio::buffer(head),
                                                   boost::asio::buffer(in_buf.data().data(), held)};
    boost::system::error_code wec;
    if (!detail::write_now(out, first, wec))
        wec = co_await detail::write_rest(out, first, write_timeout);
    in_buf.consume(held);
    r.body_bytes = held;
    if (wec) {
        r.write = wec;
        co_return r;
    }
    while (r.body_bytes < length) {
        in.timer.expires_after(read_timeout);
        auto want = std::min<std::uint64_t>(buf_size, length - r.body_bytes);
        auto [ec, n] = co_await in.async_read_some(
            boost::asio::buffer(buf, want), boost::asio::as_tuple(boost::asio::use_awaitable));
        if (ec == boost::asio::error::eof) ec = boost::beast::http::error::partial_message;
        if (ec && in.timer.expired()) ec = boost::asio::error::timed_out;
        if (ec) {
            r.read = ec;
            co_return r;
        }
        r.body_bytes += n;
        std::array<boost::asio::const_buffer, 1> piece{boost::asio::buffer(buf, n)};
        if (!detail::write_now(out, piece, wec))
            wec = co_await detail::write_rest(out, piece, write_timeout);
        if (wec) {
            r.write = wec;
            co_return r;
        }
    }
    co_return r;
}

}  // namespace rategate::gateway
