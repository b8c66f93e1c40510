#include "limiters/redis/cluster.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <map>
#include <optional>

#include "limiters/redis/cluster_slots.hpp"

namespace rategate::limiters::redis {

namespace net = boost::asio;
using clock = std::chrono::steady_clock;
using namespace net::experimental::awaitable_operators;

namespace {
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

std::string name_of(const endpoint& e) {
    return e.host + ":" + std::to_string(e.port);
}

// True while `c` is still on its first way up: connecting or handshaking, with no failed
// attempt yet (a failed one names an error).
bool still_coming_up(const connection& c) {
    auto p = c.current_phase();
    return (p == connection::phase::idle || p == connection::phase::connecting ||
            p == connection::phase::handshaking) &&
           c.last_error().empty();
}

// Waits until the new connection `c` is ready or has failed a connect, or `deadline` passes.
net::awaitable<void> until_ready(connection& c, clock::time_point deadline) {
    while (still_coming_up(c) && clock::now() < deadline)
        co_await c.wait_change(deadline);
}
}  // namespace

struct cluster::impl : std::enable_shared_from_this<impl> {
    struct node {
        endpoint where;
        std::unique_ptr<connection> conn;
    };

    net::any_io_executor ex;
    cluster_settings settings;
    std::vector<script> scripts;
    std::optional<slot_map> map;
    std::uint64_t map_version = 0;
    std::map<std::string, node> nodes;  // data connections, by host:port
    std::vector<node*> owners;          // per map master
    std::vector<std::unique_ptr<connection>> retired;
    connection::counters retired_total;  // of the retired connections dropped since

    static void add(connection::counters& out, const connection::counters& s) {
        out.commands += s.commands;
        out.errors += s.errors;
        out.timeouts += s.timeouts;
        out.reconnects += s.reconnects;
        out.noscript_retries += s.noscript_retries;
        out.writes += s.writes;
        out.commands_written += s.commands_written;
        out.unavailable += s.unavailable;
        out.rechecks += s.rechecks;
    }
    net::steady_timer wake;
    net::steady_timer ready_changed;  ///< never expires: the waits wait on it; cancel() wakes
    std::uint64_t changes = 0;        ///< notify_change() calls
    bool refresh_wanted = true;
    bool started = false;
    bool stopping = false;
    clock::time_point last_refresh{};
    std::string map_error;
    tally counts;

    impl(net::any_io_executor e, cluster_settings s, std::vector<script> sc)
        : ex(std::move(e)),
          settings(std::move(s)),
          scripts(std::move(sc)),
          wake(ex),
          ready_changed(ex, clock::time_point::max()) {}

    connection_settings settings_for(const endpoint& e) const {
        auto s = settings.node;
        s.host = e.host;
        s.port = e.port;
        s.sentinel.reset();
        s.db = 0;
        return s;
    }

    node& node_at(const endpoint& e) {
        auto name = name_of(e);
        auto it = nodes.find(name);
        if (it != nodes.end()) return it->second;
        auto c = std::make_unique<connection>(ex, settings_for(e), scripts);
        // A master's connection changing may change ready(): wake wait_ready().
        c->on_change([w = weak_from_this()] {
            if (auto self = w.lock()) self->notify_change();
        });
        if (started && !stopping) c->start();
        return nodes.emplace(name, node{e, std::move(c)}).first->second;
    }

    void want_refresh() {
        if (refresh_wanted) return;
        refresh_wanted = true;
        wake.cancel();
    }

    // Re-reads the map now and then, and soon (at most every 50 ms) when a call asked for it.
    net::awaitable<void> refresher() {
        auto self = shared_from_this();
        while (!stopping) {
            if (refresh_wanted || clock::now() - last_refresh >= settings.refresh_interval) {
                refresh_wanted = false;
                last_refresh = clock::now();
                co_await refresh();
            }
            if (stopping) break;
            auto next = refresh_wanted ? last_refresh + std::chrono::milliseconds(50)
                                       : last_refresh + settings.refresh_interval;
            if (!map || !map->complete())
                next = std::min(next, last_refresh + std::chrono::milliseconds(100));
            wake.expires_at(next);
            co_await wake.async_wait(use_nothrow);
        }
    }

    // CLUSTER SLOTS from a master we are connected to, else from each seed and known master
    // in turn over a short-lived connection (which any node may answer, replica or not).
    net::awaitable<void> refresh() {
        std::string tried;
        std::vector<node*> up;
        for (auto& [name, n] : nodes)
            if (n.conn->current_phase() == connection::phase::ready) up.push_back(&n);
        for (auto* n : up) {
            auto where = n->where;
            auto r = co_await n->conn->exec(command("CLUSTER", "SLOTS"));
            if (stopping) co_return;
            if (apply(r, where, tried)) co_return;
        }
        std::vector<endpoint> candidates = settings.seeds;
        if (map)
            for (const auto& m : map->masters())
                if (std::find(candidates.begin(), candidates.end(), m.addr) == candidates.end())
                    candidates.push_back(m.addr);
        for (const auto& e : candidates) {
            if (stopping) co_return;
            auto s = settings_for(e);
            s.require_master = false;
            s.backoff_min = s.connect_timeout;  // one try: the next candidate is asked instead
            connection probe(ex, s, {});
            probe.start();
            co_await until_ready(probe, clock::now() + s.connect_timeout);
            if (stopping) co_return;
            if (probe.current_phase() != connection::phase::ready) {
                tried += (tried.empty() ? "" : "; ") + name_of(e) + ": " +
                         (probe.last_error().empty() ? "no answer" : probe.last_error());
                continue;
            }
            auto r = co_await probe.exec(command("CLUSTER", "SLOTS"));
            if (apply(r, e, tried)) co_return;
        }
        map_error = "no node gave the cluster's slot map (" + tried + ")";
    }

    bool apply(const result& r, const endpoint& asked, std::string& tried) {
        std::optional<slot_map> next;
        if (!r.ec) next = parse_cluster_slots(r.value, asked);
        if (!next || next->masters().empty()) {
            tried +=
                (tried.empty() ? "" : "; ") + name_of(asked) + ": " +
                (r.ec                 ? r.ec.message()
                 : r.value.is_error() ? r.value.str
                                      : std::string("an unreadable or empty CLUSTER SLOTS reply"));
            return false;
        }
        bool changed = !map || map->masters() != next->masters();
        if (!changed)
            for (std::uint16_t s = 0; s < slot_count && !changed; ++s)
                changed = map->owner(s) != next->owner(s);
        map_error = next->complete() ? "" : "the cluster does not serve every slot";
        ++counts.map_reads;
        if (!changed) return true;
        std::vector<node*> next_owners;
        for (const auto& m : next->masters())
            next_owners.push_back(&node_at(m.addr));
        // Connections to nodes that serve no slot now drain; they are dropped once closed.
        for (auto it = nodes.begin(); it != nodes.end();) {
            bool kept = false;
            for (auto* o : next_owners)
                kept = kept || o == &it->second;
            if (kept) {
                ++it;
                continue;
            }
            it->second.conn->stop();
            retired.push_back(std::move(it->second.conn));
            it = nodes.erase(it);
        }
        std::erase_if(retired, [this](const std::unique_ptr<connection>& c) {
            if (c->current_phase() != connection::phase::closed) return false;
            add(retired_total, c->stats());  // its counts stay in stats(): counters never fall
            return true;
        });
        owners = std::move(next_owners);
        map = std::move(next);
        ++map_version;
        notify_change();
        return true;
    }

    net::awaitable<result> eval(std::uint16_t slot, std::size_t index,
                                const std::vector<std::string_view>& keys,
                                const std::vector<std::string_view>& args) {
        auto self = shared_from_this();
        auto deadline = clock::now() + settings.node.command_timeout;
        std::optional<endpoint> redirected;
        bool asking = false;
        result r;
        for (int attempt = 0; attempt < 6; ++attempt) {
            if (stopping) co_return result{make_error_code(client_error::stopped), {}};
            node* n = nullptr;
            if (redirected) {
                n = &node_at(*redirected);
            } else {
                auto owner = map ? map->owner(slot) : std::nullopt;
                if (!owner) {
                    want_refresh();
                    co_return result{make_error_code(client_error::not_connected), {}};
                }
                n = owners[*owner];
            }
            // A node first met through a redirection connects now: wait for it a moment. It is
            // looked up again after every wait (a map read may have dropped it meanwhile).
            auto where = n->where;
            auto name = name_of(where);
            auto it = nodes.find(name);
            // A node that failed a connect (it names an error) is not waited for: the call
            // fails at once, for the route's on_redis_error.
            while (it != nodes.end() && clock::now() < deadline &&
                   it->second.conn->last_error().empty() &&
                   (it->second.conn->current_phase() == connection::phase::connecting ||
                    it->second.conn->current_phase() == connection::phase::handshaking)) {
                co_await it->second.conn->wait_change(deadline);
                it = nodes.find(name);
            }
            if (it == nodes.end()) {
                want_refresh();
                co_return result{make_error_code(client_error::not_connected), {}};
            }
            r = co_await it->second.conn->eval(index, keys, args, asking);
            asking = false;
            if (r.ec) {
                if (r.ec != client_error::timeout) want_refresh();
                co_return r;
            }
            if (!r.value.is_error()) co_return r;
            if (auto to = parse_redirect(r.value, where)) {
                redirected = to->to;
                if (to->k == redirect::moved) {
                    ++counts.moved;
                    want_refresh();
                } else {
                    ++counts.ask;
                    asking = true;
                }
                continue;
            }
            if (is_tryagain(r.value) && clock::now() < deadline) {
                // Again from the slot's owner: an ASK target answers a call without ASKING
                // with MOVED back, so the redirection is learned anew.
                ++counts.tryagain;
                redirected.reset();
                net::steady_timer t(ex, std::chrono::milliseconds(2 << std::min(attempt, 3)));
                co_await t.async_wait(use_nothrow);
                continue;
            }
            co_return r;
        }
        co_return r;
    }

    net::awaitable<bool> wait_change(clock::time_point deadline) {
        auto self = shared_from_this();
        auto seen = changes;
        net::steady_timer until(ex, deadline);
        co_await (ready_changed.async_wait(use_nothrow) || until.async_wait(use_nothrow));
        co_return changes != seen;
    }

    void notify_change() {
        ++changes;
        ready_changed.cancel();
    }

    net::awaitable<bool> wait_ready(clock::time_point deadline) {
        auto self = shared_from_this();
        for (;;) {
            if (ready()) co_return true;
            if (stopping || clock::now() >= deadline) co_return false;
            co_await wait_change(deadline);
        }
    }

    bool ready() const {
        if (!map || !map->complete()) return false;
        for (const auto* o : owners)
            if (o->conn->state() == connection::health::down) return false;
        return true;
    }
};

cluster::cluster(net::any_io_executor ex, cluster_settings settings, std::vector<script> scripts)
    : impl_(std::make_shared<impl>(std::move(ex), std::move(settings), std::move(scripts))) {}

cluster::~cluster() {
    close();
}

void cluster::start() {
    if (impl_->started) return;
    impl_->started = true;
    for (auto& [name, n] : impl_->nodes)
        n.conn->start();
    net::co_spawn(impl_->ex, impl_->refresher(), net::detached);
}

void cluster::stop() {
    impl_->stopping = true;
    impl_->wake.cancel();
    impl_->notify_change();
    for (auto& [name, n] : impl_->nodes)
        n.conn->stop();
}

void cluster::close() {
    impl_->stopping = true;
    impl_->wake.cancel();
    impl_->notify_change();
    for (auto& [name, n] : impl_->nodes)
        n.conn->close();
    for (auto& c : impl_->retired)
        c->close();
}

net::awaitable<result> cluster::eval(std::uint16_t slot, std::size_t index,
                                     const std::vector<std::string_view>& keys,
                                     const std::vector<std::string_view>& args) {
    auto i = impl_;
    co_return co_await i->eval(slot, index, keys, args);
}

std::optional<std::size_t> cluster::master_of(std::uint16_t slot) const {
    if (!impl_->map) return std::nullopt;
    return impl_->map->owner(slot);
}

std::uint64_t cluster::map_version() const {
    return impl_->map_version;
}

net::awaitable<result> cluster::eval_on_master(std::size_t master, std::uint64_t version,
                                               std::size_t index,
                                               const std::vector<std::string_view>& args) {
    auto i = impl_;
    if (i->stopping) co_return result{make_error_code(client_error::stopped), {}};
    if (version != i->map_version || master >= i->owners.size())
        co_return result{make_error_code(client_error::not_connected), {}};
    auto r = co_await i->owners[master]->conn->eval(index, {}, args);
    if (r.ec && r.ec != client_error::timeout) i->want_refresh();
    co_return r;
}

net::awaitable<bool> cluster::wait_ready(std::chrono::steady_clock::time_point deadline) {
    auto i = impl_;
    co_return co_await i->wait_ready(deadline);
}

net::awaitable<bool> cluster::wait_change(std::chrono::steady_clock::time_point deadline) {
    auto i = impl_;
    co_return co_await i->wait_change(deadline);
}

bool cluster::ready() const {
    return impl_->ready();
}

std::uint64_t cluster::epoch() const {
    std::uint64_t sum = impl_->map_version;
    for (const auto& [name, n] : impl_->nodes)
        sum += n.conn->generation();
    return sum;
}

connection::counters cluster::stats() const {
    connection::counters out = impl_->retired_total;
    for (const auto& [name, n] : impl_->nodes)
        impl::add(out, n.conn->stats());
    for (const auto& c : impl_->retired)
        impl::add(out, c->stats());
    return out;
}

std::optional<std::string> cluster::master_address(std::uint16_t slot) const {
    auto m = master_of(slot);
    if (!m) return std::nullopt;
    return name_of(impl_->owners[*m]->where);
}

std::string cluster::last_error() const {
    const auto& i = *impl_;
    if (!i.map) return i.map_error.empty() ? "reading the slot map" : i.map_error;
    if (!i.map_error.empty()) return i.map_error;
    for (const auto* o : i.owners)
        if (o->conn->state() == connection::health::down)
            return "master " + name_of(o->where) + ": " +
                   (o->conn->last_error().empty() ? "connecting" : o->conn->last_error());
    return {};
}

std::vector<cluster::master_status> cluster::masters() const {
    std::vector<master_status> out;
    for (const auto* o : impl_->owners)
        out.push_back({name_of(o->where), o->conn->state() != connection::health::down,
                       o->conn->last_error()});
    return out;
}

const cluster::tally& cluster::counts() const {
    return impl_->counts;
}

cluster::tally& cluster::counts() {
    return impl_->counts;
}

}  // namespace rategate::limiters::redis
