#include "limiters/redis/multiplexer.hpp"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

namespace rategate::limiters::redis {

namespace {

class category : public std::error_category {
  public:
    const char* name() const noexcept override { return "rategate.redis"; }
    std::string message(int e) const override {
        switch (static_cast<client_error>(e)) {
            case client_error::connection_lost:
                return "connection to Redis lost";
            case client_error::not_connected:
                return "not connected to Redis";
            case client_error::timeout:
                return "Redis command timed out";
            case client_error::too_many_pending:
                return "too many pending Redis commands";
            case client_error::protocol_error:
                return "Redis protocol error";
            case client_error::handshake_failed:
                return "Redis handshake (AUTH/SELECT/SCRIPT LOAD) failed";
            case client_error::stopped:
                return "Redis client stopped";
            case client_error::server_unavailable:
                return "Redis cannot serve the call now (READONLY, LOADING, MASTERDOWN, "
                       "CLUSTERDOWN, OOM or BUSY)";
        }
        return "unknown Redis client error";
    }
};

reply convert(const redisReply* r) {
    reply out;
    switch (r->type) {
        case REDIS_REPLY_STRING:
            out.type = reply::kind::string;
            break;
        case REDIS_REPLY_STATUS:
            out.type = reply::kind::status;
            break;
        case REDIS_REPLY_ERROR:
            out.type = reply::kind::error;
            break;
        case REDIS_REPLY_INTEGER:
            out.type = reply::kind::integer;
            break;
        case REDIS_REPLY_ARRAY:
            out.type = reply::kind::array;
            break;
        default:
            out.type = reply::kind::nil;
            break;
    }
    if (r->type == REDIS_REPLY_INTEGER) out.integer = r->integer;
    if (r->str) out.str.assign(r->str, r->len);
    if (r->type == REDIS_REPLY_ARRAY) {
        out.elements.reserve(r->elements);
        for (std::size_t i = 0; i < r->elements; ++i)
            out.elements.push_back(convert(r->element[i]));
    }
    return out;
}

// hiredis 0.14 allocates an array's element table as soon as it reads the header, so a corrupt
// "*2000000000" would reserve gigabytes: refuse more elements than any reply of ours carries.
// A null object is the reader's out-of-memory error, so consume() reports protocol_error.
constexpr int max_array_elements = 1 << 20;

redisReplyObjectFunctions* bounded_functions(const redisReplyObjectFunctions* defaults) {
    static void* (*const create_array)(const redisReadTask*, int) = defaults->createArray;
    static redisReplyObjectFunctions functions = [&] {
        auto f = *defaults;
        f.createArray = [](const redisReadTask* task, int elements) -> void* {
            if (elements < 0 || elements > max_array_elements) return nullptr;
            return create_array(task, elements);
        };
        return f;
    }();
    return &functions;
}

template <class Deque>
typename Deque::iterator find_entry(Deque& d, multiplexer::handle h) {
    auto it = std::lower_bound(d.begin(), d.end(), h,
                               [](const auto& e, multiplexer::handle v) { return e.id < v; });
    return (it != d.end() && it->id == h) ? it : d.end();
}

}  // namespace

const std::error_category& client_category() {
    static category c;
    return c;
}

std::error_code make_error_code(client_error e) {
    return {static_cast<int>(e), client_category()};
}

void reply_slot::on_reply(std::error_code ec, reply&& r) {
    if (done_) return;
    done_ = true;
    ec_ = ec;
    value_ = std::move(r);
    notify();
}

multiplexer::multiplexer() {
    reset_reader();
}

multiplexer::~multiplexer() {
    if (reader_) redisReaderFree(reader_);
}

void multiplexer::reset_reader() {
    // A hiredis reader that hit a protocol error stays broken: always start a fresh one.
    if (reader_) redisReaderFree(reader_);
    reader_ = redisReaderCreate();
    if (!reader_) throw std::bad_alloc();
    reader_->fn = bounded_functions(reader_->fn);
}

multiplexer::handle multiplexer::push(std::string encoded, sink_ptr sink, std::size_t replies,
                                      clock::time_point deadline) {
    auto id = next_++;
    waiting_.push_back(entry{id, std::move(sink), replies, std::move(encoded), {}, deadline});
    return id;
}

std::size_t multiplexer::expire(clock::time_point now) {
    // Collected first, completed after: a sink may push again while it is completed.
    std::vector<sink_ptr> expired;
    for (auto& e : in_flight_)
        if (e.sink && e.deadline < now)
            expired.push_back(std::move(e.sink));  // its reply will be read and dropped
    for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (it->deadline < now) {
            if (it->sink) expired.push_back(std::move(it->sink));
            it = waiting_.erase(it);
        } else {
            ++it;
        }
    }
    for (auto& sink : expired)
        sink->on_reply(client_error::timeout, reply{});
    return expired.size();
}

std::string_view multiplexer::prepare_write() {
    write_buffer_.clear();
    staged_ = 0;
    while (!waiting_.empty()) {
        auto& e = waiting_.front();
        write_buffer_ += e.payload;
        e.payload = std::string();
        in_flight_.push_back(std::move(e));
        waiting_.pop_front();
        ++staged_;
    }
    write_commands_ = staged_;
    return write_buffer_;
}

void multiplexer::commit_write(clock::time_point now) {
    // Counted from the write itself: replies read before this completion ran may have retired
    // some (or all) of its entries already.
    if (write_commands_ > 0) {
        ++writes_;
        commands_written_ += std::exchange(write_commands_, 0);
    }
    if (staged_ == 0) return;
    // The staged entries are the newest in flight, unless replies already retired some.
    auto n = std::min(staged_, in_flight_.size());
    for (auto it = in_flight_.end() - static_cast<std::ptrdiff_t>(n); it != in_flight_.end();
         ++it) {
        it->written = true;
        it->written_at = now;
    }
    staged_ = 0;
}

std::error_code multiplexer::consume(const char* data, std::size_t n) {
    if (redisReaderFeed(reader_, data, n) != REDIS_OK) return client_error::protocol_error;
    for (;;) {
        void* raw = nullptr;
        if (redisReaderGetReply(reader_, &raw) != REDIS_OK) return client_error::protocol_error;
        if (!raw) return {};
        std::unique_ptr<redisReply, void (*)(void*)> r(static_cast<redisReply*>(raw),
                                                       freeReplyObject);
        if (in_flight_.empty()) return client_error::protocol_error;  // nobody asked: misaligned
        auto& front = in_flight_.front();
        if (--front.replies > 0) continue;
        auto sink = std::move(front.sink);
        if (staged_ > 0 && in_flight_.size() <= staged_) --staged_;
        in_flight_.pop_front();
        auto value = convert(r.get());
        if (unavailable_.empty() && value.is_unavailable_error()) unavailable_ = value.str;
        if (sink) sink->on_reply({}, std::move(value));
    }
}

bool multiplexer::abandon(handle h) {
    if (auto it = find_entry(waiting_, h); it != waiting_.end()) {
        bool live = it->sink != nullptr;
        waiting_.erase(it);
        return live;
    }
    if (auto it = find_entry(in_flight_, h); it != in_flight_.end())
        return std::exchange(it->sink, nullptr) != nullptr;
    return false;
}

void multiplexer::fail_all(std::error_code ec) {
    // Taken out first: every request is completed once, even if a sink pushes a new one.
    auto in_flight = std::move(in_flight_);
    auto waiting = std::move(waiting_);
    in_flight_.clear();
    waiting_.clear();
    staged_ = 0;
    write_commands_ = 0;
    reset_reader();
    for (auto* d : {&in_flight, &waiting})
        for (auto& e : *d)
            if (auto sink = std::move(e.sink)) sink->on_reply(ec, reply{});
}

std::optional<multiplexer::clock::time_point> multiplexer::oldest_written() const {
    for (const auto& e : in_flight_)
        if (e.written) return e.written_at;
    return std::nullopt;
}

}  // namespace rategate::limiters::redis
