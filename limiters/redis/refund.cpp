#include "limiters/redis/refund.hpp"

#include <cstring>

#include "limiters/embedded_scripts.hpp"

namespace rategate::limiters {

std::string_view refund_script() {
    return embedded_script_source("lua/refund/refund.lua");
}

std::string cross_slot_refund_script() {
    return prefixed_script("lua/cluster/cross_slot_refund.lua", refund_script());
}

std::string_view give_back_script() {
    return embedded_script_source("lua/give_back/give_back.lua");
}

std::string encode_give_back_args(const std::vector<lease_return>& items) {
    std::vector<refund_item> as_refunds;
    for (const auto& r : items)
        as_refunds.push_back(refund_item_of({r.key, r.spec}, r.permits, r.granted_at_us));
    return encode_refund_args(as_refunds);
}

refund_item refund_item_of(const layer_ref& layer, double cost, double consumed_at_us) {
    return {layer.key, algorithm_code(layer.spec->algo), layer.spec->rules, cost, consumed_at_us};
}

namespace {
// The script unpacks these with Lua's struct library ('d') in native byte order.
void put_double(std::string& out, double v) {
    char b[sizeof v];
    std::memcpy(b, &v, sizeof v);
    out.append(b, sizeof v);
}
}  // namespace

std::string encode_refund_args(const std::vector<refund_item>& items) {
    std::string out;
    std::size_t n = 0;
    for (const auto& it : items)
        n += 4 + 4 * it.rules.size();
    out.reserve(n * sizeof(double));
    for (const auto& it : items) {
        put_double(out, it.algorithm);
        put_double(out, static_cast<double>(it.rules.size()));
        for (const auto& r : it.rules)
            for (double v : r)
                put_double(out, v);
        put_double(out, it.cost);
        put_double(out, it.consumed_at_us);
    }
    return out;
}

}  // namespace rategate::limiters
