#include "gateway/http2/client.hpp"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cstring>

#include "gateway/proxy/upstream_pool.hpp"

namespace rategate::gateway::http2 {

namespace net = boost::asio;
using std::chrono::milliseconds;

namespace {

constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);
constexpr std::uint32_t streams_before_settings = 100;  // RFC 9113 §6.5.2's suggested floor

std::string_view view(const std::uint8_t* p, std::size_t n) {
    return {reinterpret_cast<const char*>(p), n};
}

}  // namespace

net::awaitable<bool> wake_signal::wait(milliseconds timeout) {
    timer_.expires_after(timeout);
    auto [ec] = co_await timer_.async_wait(use_nothrow);
    co_return ec == net::error::operation_aborted;
}

// ---- nghttp2 callbacks ----

struct client_connection::callbacks {
    static client_connection& conn(void* self) { return *static_cast<client_connection*>(self); }

    static int on_header(nghttp2_session*, const nghttp2_frame* f, const std::uint8_t* name,
                         std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                         std::uint8_t, void* self) {
        if (f->hd.type != NGHTTP2_HEADERS) return 0;
        auto* s = conn(self).find(f->hd.stream_id);
        if (!s) return 0;
        auto n = view(name, namelen);
        auto v = view(value, valuelen);
        s->head_bytes_ += namelen + valuelen + 32;  // RFC 9113 §6.5.2's measure
        if (s->head_bytes_ > conn(self).settings_.max_header_bytes) {
            s->bad_head_ = true;
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // resets the stream
        }
        if (s->head_done_) {
            // A HEADERS block after the final head: trailers (RFC 9113 §8.1), no pseudo-fields.
            if (!n.empty() && n.front() != ':') s->trailers_.insert(n, v);
            return 0;
        }
        if (n == ":status") {
            unsigned st = 0;
            for (char ch : v)
                st = st * 10 + static_cast<unsigned>(ch - '0');  // nghttp2 checked: 3 digits
            s->status_ = st;
        } else if (!n.empty() && n.front() != ':') {
            s->headers_.insert(n, v);
        }
        return 0;
    }

    static int on_frame_recv(nghttp2_session*, const nghttp2_frame* f, void* self) {
        auto& c = conn(self);
        switch (f->hd.type) {
            case NGHTTP2_SETTINGS:
                if (!(f->hd.flags & NGHTTP2_FLAG_ACK)) {
                    c.settings_received_ = true;
                    c.settings_ready_.notify();
                }
                return 0;
            case NGHTTP2_GOAWAY:
                c.goaway_ = true;
                return 0;
            case NGHTTP2_HEADERS:
            case NGHTTP2_DATA:
                break;
            default:
                return 0;
        }
        auto* s = c.find(f->hd.stream_id);
        if (!s) return 0;
        if (f->hd.type == NGHTTP2_HEADERS && !s->head_done_) {
            if (s->status_ >= 100 && s->status_ < 200) {
                // Interim (RFC 9110 §15.2): we answered Expect ourselves; wait for the final.
                s->headers_.clear();
                s->status_ = 0;
                s->head_bytes_ = 0;
            } else {
                s->head_done_ = true;
                s->head_bytes_ = 0;
            }
        }
        if (f->hd.flags & NGHTTP2_FLAG_END_STREAM) s->remote_end_ = true;
        s->wake_.notify();
        return 0;
    }

    static int on_data_chunk(nghttp2_session* session, std::uint8_t, std::int32_t id,
                             const std::uint8_t* data, std::size_t len, void* self) {
        auto* s = conn(self).find(id);
        if (!s) {
            // Nobody reads it any more: give the window back at once.
            nghttp2_session_consume(session, id, len);
            return 0;
        }
        s->body_.append(reinterpret_cast<const char*>(data), len);
        s->unconsumed_ += len;
        s->wake_.notify();
        return 0;
    }

    static int on_stream_close(nghttp2_session*, std::int32_t id, std::uint32_t code, void* self) {
        auto& c = conn(self);
        if (c.open_streams_ > 0) --c.open_streams_;
        if (auto* s = c.find(id)) {
            s->closed_ = true;
            if (code == NGHTTP2_REFUSED_STREAM) s->refused_ = true;
            if (!s->remote_end_ || code != NGHTTP2_NO_ERROR) {
                if (s->bad_head_)
                    s->fail("upstream sent a response head over " +
                            std::to_string(c.settings_.max_header_bytes) + " bytes");
                else
                    s->fail(std::string("upstream reset the stream (") +
                            nghttp2_http2_strerror(code) + ")");
            }
            s->wake_.notify();
            s->wake_write_.notify();
        }
        if (c.closing_ && c.open_streams_ == 0) c.wake_writer_.notify();
        return 0;
    }

    static ssize_t read_body(nghttp2_session*, std::int32_t id, std::uint8_t* buf,
                             std::size_t length, std::uint32_t* flags, nghttp2_data_source*,
                             void* self) {
        auto* s = conn(self).find(id);
        if (!s) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // abandoned: reset it
        auto avail = s->out_.size() - s->out_pos_;
        if (avail == 0) {
            if (s->out_end_) {
                *flags |= NGHTTP2_DATA_FLAG_EOF;
                return 0;
            }
            s->deferred_ = true;
            return NGHTTP2_ERR_DEFERRED;
        }
        auto n = std::min(avail, length);
        std::memcpy(buf, s->out_.data() + s->out_pos_, n);
        s->out_pos_ += n;
        if (s->out_pos_ == s->out_.size()) {
            if (s->out_end_) *flags |= NGHTTP2_DATA_FLAG_EOF;
            s->wake_write_.notify();
        }
        return static_cast<ssize_t>(n);
    }
};

// ---- client_stream ----

client_stream::~client_stream() {
    cancel();
    conn_->forget(id_, unconsumed_);
}

void client_stream::fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
}

void client_stream::cancel() {
    if (id_ < 0 || closed_ || cancelled_) return;
    cancelled_ = true;
    fail("cancelled");
    wake_.notify();  // whoever waits on the exchange sees it end
    wake_write_.notify();
    conn_->reset(id_);
}

void client_stream::consumed(std::size_t n) {
    n = std::min(n, unconsumed_);
    unconsumed_ -= n;
    conn_->consume(id_, n);
}

net::awaitable<bool> client_stream::write(std::string_view data, bool end, milliseconds timeout) {
    if (!error_.empty() || closed_) co_return false;
    if (out_pos_ == out_.size()) {
        out_.clear();
        out_pos_ = 0;
    }
    out_.append(data);
    out_end_ = end;
    conn_->resume(*this);
    while (out_pos_ < out_.size()) {
        if (!error_.empty() || closed_) co_return false;
        bool woken = co_await wake_write_.wait(timeout);
        if (!woken) {
            timed_out_ = true;
            conn_->retire_if_silent(timeout);
            fail("upstream did not take the request body in time");
            cancel();
            co_return false;
        }
    }
    co_return error_.empty();
}

net::awaitable<bool> client_stream::read_head(milliseconds timeout) {
    // One deadline for the final head: interim (1xx) heads wake this wait but do not extend
    // it (an upstream sending them forever held the request past response_timeout).
    const auto until = std::chrono::steady_clock::now() + timeout;
    // (g++ 12: a co_await kept out of conditions, and no coroutine ending in `for (;;)`.)
    while (!head_done_) {
        if (!error_.empty() || closed_) {
            fail("upstream closed the stream without a response");
            co_return false;
        }
        const auto left = std::chrono::ceil<milliseconds>(until - std::chrono::steady_clock::now());
        bool woken = false;
        if (left.count() > 0) woken = co_await wake_.wait(left);
        if (!woken) {
            timed_out_ = true;
            conn_->retire_if_silent(timeout);
            fail("upstream did not respond in time");
            cancel();
            co_return false;
        }
    }
    co_return true;
}

net::awaitable<bool> client_stream::read_body(std::string& out, milliseconds timeout) {
    while (body_.empty() && !remote_end_) {
        if (!error_.empty() || closed_) {
            fail("upstream closed the stream mid-body");
            co_return false;
        }
        bool woken = co_await wake_.wait(timeout);
        if (!woken) {
            timed_out_ = true;
            conn_->retire_if_silent(timeout);
            fail("upstream stalled mid-body");
            cancel();
            co_return false;
        }
    }
    out.append(body_);
    body_.clear();
    co_return true;
}

// ---- client_connection ----

client_connection::client_connection(std::unique_ptr<upstream_connection> io,
                                     const client_settings& s)
    : io_(std::move(io)),
      settings_(s),
      wake_writer_(io_->io.get_executor()),
      settings_ready_(io_->io.get_executor()) {
    nghttp2_session_callbacks* cb = nullptr;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(cb, &callbacks::on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &callbacks::on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &callbacks::on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, &callbacks::on_stream_close);
    nghttp2_option* opt = nullptr;
    nghttp2_option_new(&opt);
    // Window updates follow what the caller forwarded, not what arrived (back-pressure).
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_peer_max_concurrent_streams(opt, streams_before_settings);
    nghttp2_session_client_new2(&session_, cb, this, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, settings_.stream_window},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE,
         static_cast<std::uint32_t>(settings_.max_header_bytes)},
    };
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, iv, std::size(iv));
    nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0,
                                          static_cast<std::int32_t>(settings_.connection_window));
}

client_connection::~client_connection() {
    nghttp2_session_del(session_);
}

void client_connection::start() {
    io_->io.timer.expires_never();
    auto ex = io_->io.get_executor();
    net::co_spawn(ex, reader(shared_from_this()), net::detached);
    net::co_spawn(ex, writer(shared_from_this()), net::detached);
}

net::awaitable<bool> client_connection::wait_settings(milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (!settings_received_ && !dead_) {
        auto left = std::chrono::ceil<milliseconds>(until - std::chrono::steady_clock::now());
        if (left.count() <= 0) co_return false;
        co_await settings_ready_.wait(left);
    }
    co_return settings_received_ && !dead_;
}

bool client_connection::takes_streams() const {
    return !settings_received_ || nghttp2_session_get_remote_settings(
                                      session_, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS) > 0;
}

bool client_connection::available() const {
    if (dead_ || goaway_ || closing_) return false;
    auto limit =
        nghttp2_session_get_remote_settings(session_, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
    if (!settings_received_) limit = std::min(limit, streams_before_settings);
    return open_streams_ < limit;
}

std::shared_ptr<client_stream> client_connection::submit(
    const std::vector<std::pair<std::string, std::string>>& head, bool has_body, std::string& why) {
    if (dead_) {
        why = dead_reason_.empty() ? "connection closed" : dead_reason_;
        return nullptr;
    }
    std::vector<nghttp2_nv> nv;
    nv.reserve(head.size());
    for (const auto& [n, v] : head)
        nv.push_back({reinterpret_cast<std::uint8_t*>(const_cast<char*>(n.data())),
                      reinterpret_cast<std::uint8_t*>(const_cast<char*>(v.data())), n.size(),
                      v.size(), NGHTTP2_NV_FLAG_NONE});
    auto s = std::make_shared<client_stream>(shared_from_this(), io_->io.get_executor());
    nghttp2_data_provider body{};
    body.read_callback = &callbacks::read_body;
    auto id = nghttp2_submit_request(session_, nullptr, nv.data(), nv.size(),
                                     has_body ? &body : nullptr, nullptr);
    if (id < 0) {
        why = std::string("cannot open a stream: ") + nghttp2_strerror(id);
        // Stream ids run out after 2^30 requests (RFC 9113 §5.1.1): a new connection then.
        if (id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE) close_when_idle();
        return nullptr;
    }
    s->id_ = id;
    streams_[id] = s.get();
    ++open_streams_;
    wake_writer_.notify();
    return s;
}

void client_connection::forget(std::int32_t id, std::size_t unconsumed) {
    if (id < 0) return;
    streams_.erase(id);
    if (unconsumed && !dead_) {
        nghttp2_session_consume(session_, id, unconsumed);
        wake_writer_.notify();
    }
    if (closing_ && open_streams_ == 0) wake_writer_.notify();
}

void client_connection::resume(client_stream& s) {
    if (dead_) return;
    if (s.deferred_) {
        s.deferred_ = false;
        nghttp2_session_resume_data(session_, s.id_);
    }
    wake_writer_.notify();
}

void client_connection::consume(std::int32_t id, std::size_t n) {
    if (n == 0 || dead_) return;
    nghttp2_session_consume(session_, id, n);
    wake_writer_.notify();
}

void client_connection::reset(std::int32_t id) {
    if (dead_) return;
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    wake_writer_.notify();
}

void client_connection::retire_if_silent(milliseconds waited) {
    if (std::chrono::steady_clock::now() - last_read_ >= waited) close_when_idle();
}

void client_connection::close_when_idle() {
    closing_ = true;
    wake_writer_.notify();
}

void client_connection::fail_all(const std::string& why) {
    if (dead_) return;
    dead_ = true;
    dead_reason_ = why;
    settings_ready_.notify();
    for (auto& [id, s] : streams_) {
        s->fail(why);
        s->wake_.notify();
        s->wake_write_.notify();
    }
    shut();
}

void client_connection::shut() {
    boost::system::error_code ignored;
    io_->io.socket.close(ignored);
    wake_writer_.notify();
}

net::awaitable<void> client_connection::reader(std::shared_ptr<client_connection> self) {
    std::vector<char> buf(16 * 1024);
    while (!dead_) {
        auto [ec, n] = co_await io_->io.async_read_some(net::buffer(buf), use_nothrow);
        if (ec) {
            fail_all(ec == net::error::eof ? "upstream closed the connection"
                                           : "upstream connection failed: " + ec.message());
            break;
        }
        last_read_ = std::chrono::steady_clock::now();
        auto rv =
            nghttp2_session_mem_recv(session_, reinterpret_cast<std::uint8_t*>(buf.data()), n);
        if (rv < 0) {
            fail_all(std::string("upstream broke HTTP/2: ") +
                     nghttp2_strerror(static_cast<int>(rv)));
            break;
        }
        wake_writer_.notify();
    }
}

net::awaitable<void> client_connection::writer(std::shared_ptr<client_connection> self) {
    std::string out;
    while (!dead_) {
        out.clear();
        while (out.size() < 64 * 1024) {
            const std::uint8_t* data = nullptr;
            auto n = nghttp2_session_mem_send(session_, &data);
            if (n < 0) {
                fail_all(std::string("HTTP/2 session failed: ") +
                         nghttp2_strerror(static_cast<int>(n)));
                co_return;
            }
            if (n == 0) break;
            out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
        }
        if (!out.empty()) {
            auto [ec, n] = co_await net::async_write(io_->io, net::buffer(out), use_nothrow);
            if (ec) {
                fail_all("upstream connection failed: " + ec.message());
                co_return;
            }
            continue;
        }
        if (closing_ && open_streams_ == 0 && !goaway_sent_) {
            goaway_sent_ = true;
            nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
            continue;
        }
        if (goaway_sent_ ||
            (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_))) {
            fail_all("connection closed");
            co_return;
        }
        co_await wake_writer_.wait(std::chrono::hours(24));
    }
}

}  // namespace rategate::gateway::http2
