// The state of one event loop (one per thread): its io_context, acceptor, route table,
// upstream pools, and the task groups that own its coroutines (client sessions; the accept
// loop and tickers). Nothing here is shared with other threads except the immutable config
// and the process-wide connection counter.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "config/config.hpp"
#include "gateway/admin/metrics.hpp"
#include "gateway/http/router.hpp"
#include "gateway/identity/client_ip.hpp"
#include "gateway/identity/jwt_verifier.hpp"
#include "gateway/identity/token_cache.hpp"
#include "gateway/limiting/pipeline.hpp"
#include "gateway/proxy/upstream_pool.hpp"
#include "gateway/runtime/deadline.hpp"
#include "gateway/runtime/task_group.hpp"
#include "limiters/redis/connection.hpp"

namespace rategate::limiters::redis {
class cluster;
}

namespace boost::asio::ssl {
class context;
}

namespace rategate::gateway {

class worker;

/// Everything that follows the config: swapped whole on reload. A request takes a snapshot at
/// its start and finishes on it; new requests see the new one.
struct runtime {
    std::shared_ptr<const config::config> cfg;
    std::shared_ptr<const limiters::policy> policy;
    route_table routes;
    std::shared_ptr<loop_metrics> metrics;       ///< read by the admin endpoint
    std::unique_ptr<limiters::backend> store;    ///< this loop's Redis backend (none: in-process)
    std::unique_ptr<limiting::pipeline> limits;  ///< this loop's limiting pipeline
    std::map<std::string, std::shared_ptr<upstream_pool>>
        pools;                                          ///< kept across reloads when unchanged
    std::map<std::string, std::size_t> upstream_index;  ///< metrics position by name
    std::shared_ptr<boost::asio::ssl::context> tls;     ///< HTTPS on listen, when configured
    std::unique_ptr<identity::jwt_verifier> jwt;        ///< identity.user.jwt, when configured
    std::unique_ptr<identity::token_cache> jwt_cache;   ///< this loop's verified tokens
    identity::settings client_ip;  ///< how the client address is found (points into cfg)
    /// Set by the reload that replaces this runtime (worker::install): what its counters held
    /// then, which the next runtime's metrics started from, and the worker whose runtime in
    /// force takes what they count after it (requests still in flight here).
    std::unique_ptr<const loop_metrics> carried;
    worker* replaced_on = nullptr;

    runtime(std::shared_ptr<const config::config> c, std::shared_ptr<const limiters::policy> p);
    /// On the loop's thread, when the last request on it has ended: a replaced runtime folds
    /// what its counters took since the reload into the runtime in force (SPEC §5).
    ~runtime();
    runtime(const runtime&) = delete;
    runtime& operator=(const runtime&) = delete;
    /// The pool of upstream `name` (validated to exist by the config loader).
    upstream_pool& pool(const std::string& name) { return *pools.at(name); }
    std::size_t route_index(const config::route_config& r) const {
        return static_cast<std::size_t>(&r - cfg->routes.data());
    }
};

/// A worker's event loop: an io_context that can also destroy, on the owner's thread, every
/// handler and suspended coroutine still queued on it, while what they refer to still exists.
class event_loop : public boost::asio::io_context {
  public:
    using io_context::io_context;
    /// Destroys every pending operation and coroutine frame now. The loop must not be running
    /// and is unusable afterwards (only its destruction remains).
    void discard_pending() { shutdown(); }
};

class worker {
  public:
    /// `open_connections` counts client connections across all workers (max_connections).
    worker(std::shared_ptr<const config::config> cfg, std::atomic<std::size_t>& open_connections,
           std::shared_ptr<const limiters::policy> policy, limiters::local_store& local);
    ~worker();

    // One thread per loop; the reactor needs no locking (posts from other threads still lock).
    event_loop ioc{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
    /// The client sessions: `partial` cancellation closes the idle ones, `terminal` all.
    task_group sessions{ioc.get_executor(), "session"};
    /// The accept loop and the tickers (deadline sweeper, metrics publisher): stopped with
    /// `terminal` once the sessions have ended.
    task_group tickers{ioc.get_executor(), "ticker"};
    deadline_sweeper sweeper;  ///< before the pools and sessions that register with it
    std::vector<std::unique_ptr<limiters::redis::connection>> redis;  ///< survive reloads
    /// With `redis.cluster` (then `redis` is empty): the slot map and a connection per master.
    std::unique_ptr<limiters::redis::cluster> cluster;
    /// Every Redis connection of the loop (or the cluster's every master) is up.
    bool redis_up() const;
    /// Why not ("" when up).
    std::string redis_error() const;
    /// The runtime in force. Replaced only on this loop's thread (install); other threads read
    /// it through snapshot() or hold(), under `rt_mutex_` — the request path takes no lock.
    std::shared_ptr<runtime> rt;
    std::atomic<std::size_t>& open_connections;
    std::optional<boost::asio::ip::tcp::acceptor> acceptor;
    bool stopping = false;  ///< stop() was called: no new requests on a connection

    /// Builds a runtime for `cfg` (reusing unchanged upstream pools and the Redis connections)
    /// and makes it current. Runs on this worker's thread.
    void install(std::shared_ptr<const config::config> cfg,
                 std::shared_ptr<const limiters::policy> policy);
    /// The config and metrics in force, for other threads (admin). Never the runtime itself:
    /// a runtime must be destroyed on its own loop's thread.
    std::pair<std::shared_ptr<const config::config>, std::shared_ptr<const loop_metrics>> snapshot()
        const;
    /// snapshot(), and a lock that holds off this loop's next install while the caller reads
    /// the metrics (a scrape: a few ms): what the replaced runtime counts after an install is
    /// out of sight until it ends and folds in, so no read may straddle one.
    std::tuple<std::unique_lock<std::mutex>, std::shared_ptr<const config::config>,
               std::shared_ptr<const loop_metrics>>
    hold() const;

    /// A relay buffer of relay_buffer_size bytes from this thread's free list.
    std::unique_ptr<char[]> take_buffer();
    void give_buffer(std::unique_ptr<char[]> b);
    static constexpr std::size_t relay_buffer_size = 64 * 1024;

    /// Starts the Redis connections, if configured, and spawns the accept loop and the tickers
    /// (deadline sweeper, metrics publisher) into `tickers`. Before the loop runs.
    void start();
    /// Graceful stop (README "Shutdown"), on this worker's thread: stops accepting, closes idle
    /// upstream connections, and cancels the sessions with `partial` — idle keep-alive
    /// sessions close at once, busy ones after their current response — then awaits them.
    /// Only then do the Redis connections stop (draining), so in-flight requests still get
    /// their limiter decisions from Redis; then the tickers are cancelled and awaited. The
    /// loop's run() returns once the Redis connections have closed too.
    void stop();
    /// The drain deadline passed: cancels every session with `terminal` (each unwinds from
    /// what it awaits) and closes the Redis connections (pending decisions complete at once
    /// with `stopped`). stop()'s awaiting then goes on. Runs on this worker's thread.
    void cancel_in_flight();
    /// After this worker's thread has ended: runs what is ready, then destroys whatever is
    /// still pending on the loop while the worker is intact (not in its members' destructors).
    /// Idempotent; the destructor calls it too.
    void tear_down();

    /// Copies what the Redis connections and pools count into the metrics (every 250 ms).
    void publish_metrics();
    /// Publishes the Redis state (/readyz, the health gauge) and counters and logs what
    /// changed: called by the connections' change signal as it happens, and with the metrics.
    void publish_redis_state();

    std::size_t index = 0;  ///< position among the event loops, for logs

  private:
    boost::asio::awaitable<void> drain();
    /// Logs a Redis connection going down, coming up, or moving to another server (failover).
    void log_redis_changes();
    /// What log_redis_changes saw last, per connection.
    struct redis_seen {
        bool up = false;
        std::string address;
        std::uint64_t generation = 0;  ///< connection::generation()
    };
    std::vector<redis_seen> redis_seen_;
    bool cluster_seen_up_ = false;

    limiters::local_store& local_;
    bool torn_down_ = false;
    mutable std::mutex rt_mutex_;
    std::vector<std::unique_ptr<char[]>> free_buffers_;
};

/// A relay buffer (worker::relay_buffer_size bytes) taken from a loop's free list for a
/// scope and given back when the scope ends, whichever way it ends.
class relay_buffer {
  public:
    explicit relay_buffer(worker& w) : w_(w), b_(w.take_buffer()) {}
    ~relay_buffer() { w_.give_buffer(std::move(b_)); }
    relay_buffer(const relay_buffer&) = delete;
    relay_buffer& operator=(const relay_buffer&) = delete;
    char* get() const { return b_.get(); }

  private:
    worker& w_;
    std::unique_ptr<char[]> b_;
};

}  // namespace rategate::gateway
