#include "limiters/redis_chain.hpp"

#include "limiters/embedded_scripts.hpp"

namespace rategate::limiters {

std::string_view chain_script() {
    return embedded_script_source("chain.lua");
}

}  // namespace rategate::limiters
