#include "limiters/redis/deployment.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <string>

#include "limiters/redis/cluster.hpp"
#include "limiters/redis/cluster_backend.hpp"
#include "limiters/redis/connection.hpp"
#include "limiters/redis/redis_backend.hpp"
#include "limiters/redis/redis_chain.hpp"
#include "limiters/redis/refund.hpp"

namespace rategate::limiters::redis {

deployment make_deployment(const boost::asio::any_io_executor& ex,
                           const config::redis_config* cfg) {
    deployment d;
    if (!cfg) return d;
    if (cfg->cluster) {
        cluster_settings cs;
        for (const auto& n : cfg->cluster->nodes)
            cs.seeds.push_back({n.host, n.port});
        cs.node = connection_settings_of(*cfg);
        d.cluster = std::make_unique<cluster>(
            ex, std::move(cs),
            std::vector<script>{{"chain", std::string(chain_script())},
                                {"refund", std::string(refund_script())},
                                {"chain (cross-slot)", cross_slot_chain_script()},
                                {"refund (cross-slot)", cross_slot_refund_script()},
                                {"give back", std::string(give_back_script())}});
        return d;
    }
    for (int i = 0; i < cfg->connections_per_thread; ++i)
        d.connections.push_back(std::make_unique<connection>(
            ex, connection_settings_of(*cfg),
            std::vector<script>{{"chain", std::string(chain_script())},
                                {"give back", std::string(give_back_script())}}));
    return d;
}

std::unique_ptr<backend> make_backend(const boost::asio::any_io_executor& ex,
                                      std::vector<std::unique_ptr<connection>>& connections,
                                      redis::cluster* cluster, bool redis_clock,
                                      call_observer observer) {
    if (cluster)
        return std::make_unique<cluster_backend>(ex, *cluster, redis_clock, std::move(observer));
    if (!connections.empty())
        return std::make_unique<redis_backend>(ex, connections, redis_clock, std::move(observer));
    return nullptr;
}

}  // namespace rategate::limiters::redis
