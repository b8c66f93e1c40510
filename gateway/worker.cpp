#include "gateway/worker.hpp"

namespace rategate::gateway {

worker::worker(std::shared_ptr<const config::config> c, std::atomic<std::size_t>& open,
               const limiters::policy& policy, limiters::local_store& local)
    : cfg(std::move(c)),
      routes(*cfg),
      metrics(cfg->routes.size(), cfg->limiters.size(), cfg->upstreams.size()),
      limits(std::make_unique<limit_checker>(ioc.get_executor(), *cfg, policy, local, metrics)),
      open_connections(open) {
    std::size_t index = 0;
    for (const auto& [name, u] : cfg->upstreams) {
        auto pool = std::make_unique<upstream_pool>(ioc.get_executor(), sweeper, u);
        pool->index = index++;
        pools_.emplace(name, std::move(pool));
    }
}

void worker::publish_metrics() {
    limits->publish(metrics);
    std::int64_t idle = 0;
    for (const auto& [name, p] : pools_)
        idle += static_cast<std::int64_t>(p->idle_count());
    metrics.upstream_idle.store(idle, std::memory_order_relaxed);
}

worker::~worker() = default;

std::unique_ptr<char[]> worker::take_buffer() {
    if (free_buffers_.empty()) return std::make_unique<char[]>(relay_buffer_size);
    auto b = std::move(free_buffers_.back());
    free_buffers_.pop_back();
    return b;
}

void worker::give_buffer(std::unique_ptr<char[]> b) {
    if (free_buffers_.size() < 64) free_buffers_.push_back(std::move(b));
}

void worker::begin_shutdown() {
    stopping = true;
    if (acceptor) {
        boost::system::error_code ignored;
        acceptor->close(ignored);
    }
    for (auto& s : sessions)
        if (s.idle) s.socket->cancel();
    for (auto& [name, p] : pools_)
        p->close_idle();
    sweeper.stop();
    limits->stop();
}

}  // namespace rategate::gateway
