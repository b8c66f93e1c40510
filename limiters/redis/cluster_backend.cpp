#include "limiters/redis/cluster_backend.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <limits>
#include <optional>
#include <unordered_map>

#include "limiters/redis/chain_codec.hpp"
#include "limiters/redis/cluster.hpp"
#include "limiters/redis/cluster_slots.hpp"
#include "limiters/redis/group_commit.hpp"
#include "limiters/redis/refund.hpp"

namespace rategate::limiters {

namespace net = boost::asio;

chain_decision combine_parts(const std::vector<part_decision>& parts) {
    chain_decision out;
    auto position = [](const part_decision& p, int local) {
        return local < 0 ? -1 : (*p.positions)[static_cast<std::size_t>(local)];
    };
    out.allowed = true;
    for (const auto& p : parts)
        out.allowed = out.allowed && p.decision.allowed;
    const part_decision* chosen = nullptr;
    int chosen_at = -1;
    if (!out.allowed) {
        bool all_wait = true;
        double wait = 0;
        for (const auto& p : parts) {
            const auto& d = p.decision;
            if (d.allowed) continue;
            int at = position(p, d.decider);
            if (!chosen || d.retry_us > chosen->decision.retry_us ||
                (d.retry_us == chosen->decision.retry_us && at < chosen_at)) {
                chosen = &p;
                chosen_at = at;
            }
            if (d.wait_us > 0)
                wait = std::max(wait, d.wait_us);
            else
                all_wait = false;
        }
        out.decider = chosen_at;
        out.retry_us = chosen->decision.retry_us;
        out.wait_us = all_wait ? wait : 0;
        out.header_layer = chosen_at;
        out.remaining = chosen->decision.remaining;
        out.reset_us = chosen->decision.reset_us;
        out.rule = chosen->decision.rule;
    } else {
        for (const auto& p : parts) {
            const auto& d = p.decision;
            out.wait_us = std::max(out.wait_us, d.wait_us);
            if (d.header_layer < 0) continue;
            int at = position(p, d.header_layer);
            if (!chosen || d.remaining < chosen->decision.remaining ||
                (d.remaining == chosen->decision.remaining && at < chosen_at)) {
                chosen = &p;
                chosen_at = at;
            }
        }
        out.header_layer = chosen_at;
        if (chosen) {
            out.remaining = chosen->decision.remaining;
            out.reset_us = chosen->decision.reset_us;
            out.rule = chosen->decision.rule;
        }
    }
    for (const auto& p : parts)
        for (std::size_t l = 0; l < p.positions->size(); ++l)
            if (p.decision.shadow_mask & (1u << l)) out.shadow_mask |= 1u << (*p.positions)[l];
    return out;
}

std::vector<lease_grant> combine_grants(std::vector<placed_grant> parts) {
    std::stable_sort(parts.begin(), parts.end(),
                     [](const auto& a, const auto& b) { return a.position < b.position; });
    std::vector<lease_grant> out;
    out.reserve(parts.size());
    for (const auto& p : parts)
        out.push_back(p.grant);
    return out;
}

namespace {

// One refund call; owns everything it sends (the request it undoes is answered already).
net::awaitable<void> send_refund(redis::cluster& store, std::uint16_t slot,
                                 std::vector<std::string> keys, std::string args) {
    // Where the part consumed, as far as the map knows. A retry goes only to that master: a
    // replica promoted meanwhile may never have received the consumption, and a refund there
    // would give back what was never taken.
    auto consumed_on = store.master_address(slot);
    std::vector<std::string_view> key_views(keys.begin(), keys.end());
    std::vector<std::string_view> arg_views{args};
    // Retried only when the refund certainly did not run (so it can never count twice): no
    // connection to the slot's master, or a refusal Redis gives before running a script. A
    // failover meanwhile takes a few seconds: retries spread over about 6 s.
    auto ran_not = [](const redis::result& r) {
        if (r.ec == redis::client_error::not_connected) return true;
        auto code = r.value.is_error() ? r.value.error_code() : std::string_view();
        return code == "CLUSTERDOWN" || code == "READONLY" || code == "LOADING" ||
               code == "MASTERDOWN" || code == "TRYAGAIN";
    };
    auto r = co_await store.eval(slot, 1, key_views, arg_views);
    auto pause = std::chrono::milliseconds(100);
    for (int attempt = 0; attempt < 6 && ran_not(r); ++attempt) {
        net::steady_timer t(co_await net::this_coro::executor, pause);
        co_await t.async_wait(net::as_tuple(net::use_awaitable));
        pause *= 2;
        if (store.master_address(slot) != consumed_on) break;  // failed over: not retried
        r = co_await store.eval(slot, 1, key_views, arg_views);
    }
    if (r.ec || r.value.is_error()) {
        ++store.counts().refund_failures;
        spdlog::warn(
            "refund of {} layer(s) in slot {} failed ({}): their quota stays taken until "
            "it expires",
            keys.size(), slot, r.ec ? r.ec.message() : r.value.str);
    }
}

}  // namespace

// decide() queues and suspends; a flush posted behind the current handlers splits the queued
// chains by slot and sends, per slot, the parts in chunks of max_batch; when a request's last
// part is answered, its parts are combined (and refunded when rejected) and it resumes.
struct cluster_backend::impl : std::enable_shared_from_this<impl> {
    struct part {
        std::uint16_t slot = 0;
        std::vector<layer_ref> own;  // the part's layers, when the chain spans slots
        const std::vector<layer_ref>* refs = nullptr;
        std::vector<int> positions;  // empty when the part is the whole chain
        std::error_code ec;
        chain_decision decision;
        std::vector<lease_grant> grants;  // one per leased layer of the part, part order
        double now = 0;                   // the script's clock at the call (µs): when it consumed
        double sent = 0;  // the local clock just before the call (µs): the script ran after it
    };
    struct pending {
        const std::vector<layer_ref>* refs;
        double cost;
        const clock* at;
        std::vector<part> parts;
        std::size_t outstanding = 0;
        answer result;
        std::optional<net::any_completion_handler<void()>> handler;
    };

    net::any_io_executor ex;
    redis::cluster& store;
    bool redis_clock;
    call_observer observer;
    std::vector<pending*> queue;
    bool flush_posted = false;

    impl(net::any_io_executor e, redis::cluster& c, bool clock, call_observer o)
        : ex(std::move(e)), store(c), redis_clock(clock), observer(std::move(o)) {}

    static void split_by_slot(pending& p) {
        const auto& refs = *p.refs;
        thread_local std::vector<std::uint16_t> slots;  // each layer's, computed once
        slots.clear();
        for (const auto& r : refs)
            slots.push_back(redis::key_slot(r.key));
        if (std::all_of(slots.begin(), slots.end(), [&](auto s) { return s == slots[0]; })) {
            p.parts.resize(1);
            p.parts[0].slot = slots.empty() ? 0 : slots[0];
            p.parts[0].refs = p.refs;
            return;
        }
        for (std::size_t l = 0; l < refs.size(); ++l) {
            part* into = nullptr;
            for (auto& q : p.parts)
                if (q.slot == slots[l]) into = &q;
            if (!into) {
                into = &p.parts.emplace_back();
                into->slot = slots[l];
            }
            into->own.push_back(refs[l]);
            into->positions.push_back(static_cast<int>(l));
        }
        for (auto& q : p.parts)
            q.refs = &q.own;
    }

    using item = std::pair<pending*, part*>;

    // Group commit per master (group_commit.hpp), as the single-server backend per connection.
    std::unordered_map<std::size_t, redis::group_commit<item>> masters;  // by index in `routed`
    std::uint64_t routed = 0;  // the version of the map the masters' queues follow

    void flush() {
        flush_posted = false;
        auto batch = std::move(queue);
        queue.clear();
        std::vector<item> fresh;
        for (auto* p : batch) {
            split_by_slot(*p);
            if (p->parts.size() > 1) ++store.counts().split_chains;
            p->outstanding = p->parts.size();
            for (auto& q : p->parts)
                fresh.push_back({p, &q});
        }
        // The map changed: what still waits is routed again, by the new map.
        if (store.map_version() != routed) {
            for (auto& [m, q] : masters) {
                auto waiting = q.take_all();
                fresh.insert(fresh.end(), waiting.begin(), waiting.end());
            }
            masters.clear();
            routed = store.map_version();
        }
        std::unordered_map<std::uint16_t, std::vector<item>> masterless;
        for (auto& it : fresh) {
            if (auto m = store.master_of(it.second->slot))
                masters.try_emplace(*m, max_batch).first->second.push(it);
            else
                masterless[it.second->slot].push_back(it);
        }
        // A slot without a master in the map goes alone: its call fails, or follows the
        // cluster's redirection.
        for (auto& [slot, items] : masterless)
            for (std::size_t i = 0; i < items.size(); i += max_batch)
                net::co_spawn(ex, send(slot, slice(items, i)), net::detached);
        pump();
    }

    static std::vector<item> slice(const std::vector<item>& items, std::size_t from) {
        auto end = std::min(items.size(), from + max_batch);
        return {items.begin() + static_cast<std::ptrdiff_t>(from),
                items.begin() + static_cast<std::ptrdiff_t>(end)};
    }

    // Sends the next call to every idle master with parts waiting.
    void pump() {
        for (auto& [m, q] : masters)
            if (auto chunk = q.take(); !chunk.empty())
                net::co_spawn(ex, send_to_master(m, routed, std::move(chunk)), net::detached);
    }

    // A flush behind the handlers queued now; a backend gone by then (a reload dropped it)
    // is not touched.
    void post_flush() {
        if (flush_posted) return;
        flush_posted = true;
        net::post(ex, [w = weak_from_this()] {
            if (auto self = w.lock()) self->flush();
        });
    }

    void master_done(std::size_t m, std::uint64_t version) {
        if (version == routed) {
            auto it = masters.find(m);
            if (it != masters.end()) it->second.done();
        }
        post_flush();
    }

    // The parts of several slots of one master in one call of the cross-slot chain script
    // (script 2). When the call certainly did not run — the map changed before it was sent,
    // the master refused it before running (READONLY, CLUSTERDOWN, ...), or a key turned out
    // not to be the master's any more (the script fails before it writes) — the parts go
    // slot by slot instead, where redirections are followed.
    net::awaitable<void> send_to_master(std::size_t master, std::uint64_t version,
                                        std::vector<std::pair<pending*, part*>> chunk) {
        // However this ends (an exception included), the master takes its next call.
        struct done_guard {
            impl* self;
            std::size_t master;
            std::uint64_t version;
            ~done_guard() { self->master_done(master, version); }
        } guard{this, master, version};
        auto batch = encode(chunk);
        std::vector<std::string_view> args(batch.args.begin(), batch.args.end());
        args.insert(args.end(), batch.keys.begin(), batch.keys.end());
        double sent = chunk.front().first->at->now_us();
        auto started = std::chrono::steady_clock::now();
        auto r = co_await store.eval_on_master(master, version, 2, args);
        bool not_run =
            r.ec == redis::client_error::not_connected ||
            r.ec == redis::client_error::server_unavailable ||
            (!r.ec && r.value.is_error() && r.value.str.find("non local key") != std::string::npos);
        if (not_run) {
            std::unordered_map<std::uint16_t, std::vector<item>> by_slot;
            for (auto& it : chunk)
                by_slot[it.second->slot].push_back(it);
            for (auto& [slot, items] : by_slot)
                net::co_spawn(ex, send(slot, std::move(items)), net::detached);
        } else {
            deliver(chunk, r, started, sent);
        }
    }

    // The chain script's arguments for the chunk's parts (keys viewed in the parts).
    chain_batch encode(const std::vector<item>& chunk) const {
        std::vector<std::pair<const std::vector<layer_ref>*, double>> reqs;
        reqs.reserve(chunk.size());
        for (const auto& [p, q] : chunk)
            reqs.push_back({q->refs, p->cost});
        return encode_batch(reqs, redis_clock ? -1 : chunk.front().first->at->now_us());
    }

    net::awaitable<void> send(std::uint16_t slot, std::vector<item> chunk) {
        auto batch = encode(chunk);
        std::vector<std::string_view> args(batch.args.begin(), batch.args.end());
        double sent = chunk.front().first->at->now_us();
        auto started = std::chrono::steady_clock::now();
        auto r = co_await store.eval(slot, 0, batch.keys, args);
        deliver(chunk, r, started, sent);
    }

    // Hands a chain script call's reply (or failure), sent at local `sent` µs, to the parts.
    void deliver(std::vector<std::pair<pending*, part*>>& chunk, const redis::result& r,
                 std::chrono::steady_clock::time_point started, double sent) {
        double latency =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started)
                .count();
        std::vector<chain_decision> decisions;
        std::vector<lease_grant> grants;
        std::vector<std::size_t> leased(chunk.size(), 0);  // lease records per part
        for (std::size_t i = 0; i < chunk.size(); ++i)
            for (const auto& l : *chunk[i].second->refs)
                if (l.lease.want > 0) ++leased[i];
        double script_now = 0;
        std::error_code ec = r.ec;
        if (!ec &&
            (r.value.is_error() ||
             !decode_batch(r.value, decisions, nullptr, &script_now, &leased, &grants) ||
             decisions.size() != chunk.size() ||
             !fits_batch(
                 decisions, [&](std::size_t i) -> const auto& { return *chunk[i].second->refs; },
                 leased, grants))) {
            if (r.value.is_error()) spdlog::error("limiter script failed: {}", r.value.str);
            ec = make_error_code(redis::client_error::protocol_error);
        }
        if (observer) observer(chunk.size(), latency, static_cast<bool>(ec));
        for (std::size_t i = 0, g = 0; i < chunk.size(); ++i) {
            auto& [p, q] = chunk[i];
            q->ec = ec;
            if (!ec) {
                q->decision = decisions[i];
                q->now = script_now;
                q->sent = sent;
                q->grants.assign(grants.begin() + static_cast<std::ptrdiff_t>(g),
                                 grants.begin() + static_cast<std::ptrdiff_t>(g + leased[i]));
                g += leased[i];
            }
            if (--p->outstanding == 0) finish(*p);
        }
    }

    // Combines a request's parts, sends the refunds its rejection needs, and resumes it.
    // Offset: TIME minus a local time read before the script ran (see redis_backend.cpp).
    void finish(pending& p) {
        auto& a = p.result;
        if (p.parts.size() == 1) {
            a.ec = p.parts[0].ec;
            a.decision = p.parts[0].decision;
            a.decided_at_us = p.parts[0].now;
            a.clock_offset_us = redis_clock ? p.parts[0].now - p.parts[0].sent : 0;
            if (!a.ec) a.grants = std::move(p.parts[0].grants);
        } else {
            std::vector<part_decision> decided;
            std::vector<placed_grant> grants;
            double earliest = std::numeric_limits<double>::infinity(), first_sent = earliest;
            for (const auto& q : p.parts) {
                if (q.ec && !a.ec) a.ec = q.ec;
                decided.push_back({q.decision, &q.positions});
                for (std::size_t l = 0, g = 0; l < q.refs->size() && g < q.grants.size(); ++l)
                    if ((*q.refs)[l].lease.want > 0)
                        grants.push_back({q.positions[l], q.grants[g++]});
                // Leases expire by the earliest of the parts' clocks: never later than the
                // master that granted them would have them expire.
                if (!q.ec) {
                    earliest = std::min(earliest, q.now);
                    first_sent = std::min(first_sent, q.sent);  // before every part's script
                }
            }
            if (!a.ec) {
                a.decision = combine_parts(decided);
                a.grants = combine_grants(std::move(grants));
                a.decided_at_us = earliest;
                a.clock_offset_us = redis_clock ? earliest - first_sent : 0;
            }
            if (a.ec || !a.decision.allowed) refund(p, static_cast<bool>(a.ec));
        }
        if (p.handler) {
            net::post(ex, [h = std::move(*p.handler)]() mutable { std::move(h)(); });
            p.handler.reset();
        }
    }

    // Undoes every part that consumed: each layer of an admitted part, but a shadow layer
    // that would have rejected (it consumed nothing) and a leased layer, whose grant is the
    // loop's lease whatever the request's decision (SPEC §2 `sync`). `failed`: the request got
    // no answer, so its grants reach no lease: they are undone too (the permits each took).
    // The refunds are queued per master and sent together by a flush posted now, ahead of the
    // waiter that finish() posts next: each refund call starts (and is queued on its master's
    // connection) before any later request of this loop can be decided.
    void refund(const pending& p, bool failed) {
        for (const auto& q : p.parts) {
            if (q.ec) continue;
            auto master = store.master_of(q.slot);
            for (std::size_t l = 0, g = 0; l < q.refs->size(); ++l) {
                const auto& ref = (*q.refs)[l];
                double cost = p.cost;
                if (ref.lease.want > 0) {
                    // Its grant (whatever the part decided: a lease is taken regardless).
                    cost = g < q.grants.size() ? q.grants[g++].granted : 0;
                    if (!failed || cost <= 0) continue;
                } else if (!q.decision.allowed || (q.decision.shadow_mask & (1u << l))) {
                    continue;
                }
                queued_refunds.push_back({master, q.slot, ref.key, algorithm_code(ref.spec->algo),
                                          ref.spec->rules, cost, q.now});
            }
        }
        if (queued_refunds.empty() || refunds_posted) return;
        refunds_posted = true;
        refunds_version = store.map_version();
        net::post(ex, [w = weak_from_this()] {
            if (auto self = w.lock()) self->flush_refunds();
        });
    }

    struct queued_refund {
        std::optional<std::size_t> master;
        std::uint16_t slot;
        std::string key;
        int algorithm;
        std::vector<rule_params> rules;
        double cost;
        double consumed_at;
    };
    std::vector<queued_refund> queued_refunds;
    bool refunds_posted = false;
    std::uint64_t refunds_version = 0;

    // One call of the cross-slot refund script per master (script 3), up to 256 keys each;
    // slot by slot when the map changed meanwhile or a slot had no master.
    void flush_refunds() {
        refunds_posted = false;
        auto all = std::move(queued_refunds);
        queued_refunds.clear();
        bool same_map = refunds_version == store.map_version();
        std::unordered_map<std::size_t, std::vector<queued_refund>> by_master;
        std::unordered_map<std::uint16_t, std::vector<queued_refund>> by_slot;
        for (auto& r : all) {
            if (same_map && r.master)
                by_master[*r.master].push_back(std::move(r));
            else
                by_slot[r.slot].push_back(std::move(r));
        }
        for (auto& [slot, rs] : by_slot)
            spawn_slot_refund(slot, std::move(rs));
        for (auto& [master, rs] : by_master)
            for (std::size_t i = 0; i < rs.size(); i += 256) {
                std::vector<queued_refund> chunk(
                    std::make_move_iterator(rs.begin() + static_cast<std::ptrdiff_t>(i)),
                    std::make_move_iterator(
                        rs.begin() + static_cast<std::ptrdiff_t>(std::min(rs.size(), i + 256))));
                ++store.counts().refunds;
                store.counts().refunded_layers += chunk.size();
                net::co_spawn(ex,
                              send_master_refund(store, master, refunds_version, std::move(chunk)),
                              net::detached);
            }
    }

    void spawn_slot_refund(std::uint16_t slot, std::vector<queued_refund> rs) {
        net::co_spawn(ex, slot_refund(store, slot, std::move(rs)), net::detached);
    }

    // One slot's refunds in one call of the refund script (send_refund: with its retries).
    static net::awaitable<void> slot_refund(redis::cluster& store, std::uint16_t slot,
                                            std::vector<queued_refund> rs) {
        std::vector<refund_item> items;
        std::vector<std::string> keys;
        for (const auto& r : rs) {
            keys.push_back(r.key);
            items.push_back({r.key, r.algorithm, r.rules, r.cost, r.consumed_at});
        }
        ++store.counts().refunds;
        store.counts().refunded_layers += keys.size();
        auto args = encode_refund_args(items);
        co_await send_refund(store, slot, std::move(keys), std::move(args));
    }

    // Refunds of one master in one call; when it certainly did not run (the map changed
    // before it was sent, or the master refused it before running), slot by slot instead.
    // Owns what it sends: the requests are answered by then; it touches only the cluster
    // (the worker's, which outlives every backend).
    static net::awaitable<void> send_master_refund(redis::cluster& store, std::size_t master,
                                                   std::uint64_t version,
                                                   std::vector<queued_refund> rs) {
        std::vector<refund_item> items;
        for (const auto& r : rs)
            items.push_back({r.key, r.algorithm, r.rules, r.cost, r.consumed_at});
        auto packed = encode_refund_args(items);
        std::vector<std::string_view> args{packed};
        for (const auto& r : rs)
            args.push_back(r.key);
        auto r = co_await store.eval_on_master(master, version, 3, args);
        if (r.ec == redis::client_error::not_connected ||
            r.ec == redis::client_error::server_unavailable) {
            --store.counts().refunds;  // counted again per slot
            store.counts().refunded_layers -= rs.size();
            std::unordered_map<std::uint16_t, std::vector<queued_refund>> by_slot;
            for (auto& q : rs)
                by_slot[q.slot].push_back(std::move(q));
            for (auto& [slot, qs] : by_slot)
                co_await slot_refund(store, slot, std::move(qs));
            co_return;
        }
        if (r.ec || r.value.is_error()) {
            ++store.counts().refund_failures;
            spdlog::warn(
                "refund of {} layer(s) on one master failed ({}): their quota stays "
                "taken until it expires",
                rs.size(), r.ec ? r.ec.message() : r.value.str);
        }
    }
};

cluster_backend::cluster_backend(const net::any_io_executor& ex, redis::cluster& store,
                                 bool redis_clock, call_observer observer)
    : impl_(std::make_shared<impl>(ex, store, redis_clock, std::move(observer))) {}

cluster_backend::~cluster_backend() = default;

net::awaitable<backend::answer> cluster_backend::decide(const std::vector<layer_ref>& refs,
                                                        double cost, const clock& at,
                                                        bool /*want_state*/) {
    impl::pending p{&refs, cost, &at, {}, 0, {}, {}};
    auto& i = *impl_;
    i.queue.push_back(&p);
    i.post_flush();
    co_await net::async_initiate<const net::use_awaitable_t<>&, void()>(
        [&p](auto handler) { p.handler.emplace(std::move(handler)); }, net::use_awaitable);
    co_return std::move(p.result);
}

namespace {
// One slot's give-back call; touches only the cluster (which outlives every backend).
net::awaitable<std::error_code> give_back_slot(redis::cluster& store, std::uint16_t slot,
                                               std::vector<lease_return> items) {
    std::vector<std::string_view> keys;
    for (const auto& r : items)
        keys.push_back(r.key);
    std::string packed = encode_give_back_args(items);
    std::vector<std::string_view> args{packed};
    auto r = co_await store.eval(slot, 4, keys, args);
    if (!r.ec && r.value.is_error()) {
        spdlog::warn("lease give-back in slot {} failed: {}", slot, r.value.str);
        co_return make_error_code(redis::client_error::protocol_error);
    }
    co_return r.ec;
}
}  // namespace

net::awaitable<std::error_code> cluster_backend::give_back(std::vector<lease_return> items) {
    auto& store = impl_->store;
    std::unordered_map<std::uint16_t, std::vector<lease_return>> by_slot;
    for (auto& r : items)
        by_slot[redis::key_slot(r.key)].push_back(std::move(r));
    // Leased layers are global or route scoped: a few keys, so the slots go one after another.
    std::error_code first;
    for (auto& [slot, rs] : by_slot) {
        std::error_code ec = co_await give_back_slot(store, slot, std::move(rs));
        if (ec && !first) first = ec;
    }
    co_return first;
}

bool cluster_backend::ready() const {
    return impl_->store.ready();
}

std::uint64_t cluster_backend::epoch() const {
    return impl_->store.epoch();
}

}  // namespace rategate::limiters
