#include "gateway/limiting/outcome.hpp"

#include <string>

#include "gateway/admin/metrics.hpp"
#include "gateway/http/error_response.hpp"

namespace rategate::gateway::limiting {

namespace http = boost::beast::http;

const char* to_string(verdict v) {
    switch (v) {
        case verdict::allowed:
            return "allowed";
        case verdict::delayed:
            return "delayed";
        case verdict::shadow_limited:
            return "shadow_limited";
        case verdict::limited:
            return "limited";
        case verdict::denied:
            return "denied";
        case verdict::invalid_identity:
            return "invalid_identity";
        case verdict::error:
            return "error";
    }
    return "-";
}

std::optional<rate_headers> headers_of(const outcome& o) {
    const auto& d = o.decision;
    if (!o.header || d.header_layer < 0) return std::nullopt;
    return describe_layer(*o.header, d.rule, d.remaining, d.reset_us);
}

std::string_view log_layer(const outcome& o) {
    if (!o.forward && o.decider) return o.decider->limiter->name;
    if (o.header) return o.header->limiter->name;
    return "-";
}

http::response<http::string_body> refusal_response(const outcome& o,
                                                   const config::route_config& route,
                                                   bool keep_alive, unsigned version, bool head) {
    http::response<http::string_body> res;
    switch (o.what) {
        case verdict::limited: {
            res = make_limited_response(static_cast<unsigned>(route.on_limit_status),
                                        route.on_limit_message, o.decider->limiter->name,
                                        o.decision.retry_us, keep_alive, version);
            if (auto h = headers_of(o)) apply_rate_headers(res, route.headers, *h, false);
            break;
        }
        case verdict::denied:
            res = make_error_response(
                403, "forbidden",
                "request lacks the key of limiter \"" + o.decider->limiter->name + "\"", keep_alive,
                version);
            break;
        case verdict::invalid_identity:
            // SPEC §2: an identity over 256 bytes is a 400, never a key.
            res = make_error_response(400, "invalid_identity",
                                      "the key of limiter \"" + o.decider->limiter->name +
                                          "\" is longer than " +
                                          std::to_string(limiters::max_identity_bytes) + " bytes",
                                      keep_alive, version);
            break;
        default:
            res =
                make_error_response(503, "limiter_unavailable",
                                    "rate-limit backend (Redis) unavailable", keep_alive, version);
    }
    if (head) omit_body(res);
    return res;
}

void count(const outcome& o, std::span<const limiters::policy::layer* const> layers,
           loop_metrics& m) {
    using lo = limiter_outcome;
    auto add = [&](const limiters::policy::layer* l, lo x) {
        m.limiter_decisions[l->index][static_cast<std::size_t>(x)].add();
    };
    if (o.what == verdict::denied) return add(o.decider, lo::denied);
    if (o.what == verdict::invalid_identity) return;  // no layer decided anything
    for (std::size_t i = 0; i < layers.size(); ++i) {
        const auto* l = layers[i];
        if (o.what == verdict::error)
            add(l, lo::error);
        else if (l->spec.shadow)
            add(l, (o.decision.shadow_mask >> i) & 1u ? lo::shadow_limited : lo::allowed);
        else if (o.what == verdict::limited) {
            if (l == o.decider) add(l, lo::limited);
        } else
            add(l, o.decision.wait_us > 0 && l->spec.delay_us > 0 ? lo::delayed : lo::allowed);
    }
    if (o.cached) m.limiter_cache_hits[o.decider->index].add();
}

}  // namespace rategate::gateway::limiting
