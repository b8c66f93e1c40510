#include "gateway/proxy/admission.hpp"

#include <boost/beast/core/string.hpp>

#include "gateway/admin/access_log.hpp"
#include "gateway/http/error_response.hpp"
#include "gateway/http/request_normaliser.hpp"
#include "gateway/limiting/identity.hpp"
#include "gateway/limiting/pipeline.hpp"
#include "gateway/proxy/request_facts.hpp"
#include "gateway/runtime/worker.hpp"

namespace rategate::gateway {

namespace net = boost::asio;
namespace http = boost::beast::http;

bool is_grpc_content_type(std::string_view ct) {
    constexpr std::string_view grpc = "application/grpc";
    if (ct.size() < grpc.size() || !boost::beast::iequals(ct.substr(0, grpc.size()), grpc))
        return false;
    auto rest = ct.substr(grpc.size());
    return rest.empty() || rest.front() == '+' || rest.front() == ';';
}

request_scope::~request_scope() {
    if (rec.status == 0) return;  // nothing was answered: the client went away
    double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started)
            .count();
    std::size_t r = route ? rt.route_index(*route) : rt.cfg->routes.size();
    rt.metrics->request(r, rec.status, protocol);
    rt.metrics->request_latency.at(r).observe_us(us);
    if (route && rec.upstream_us >= 0)
        rt.metrics->upstream_latency[rt.upstream_index.at(route->upstream)].observe_us(
            rec.upstream_us);
    if (access_log_enabled())
        write_access_log({peer, route ? std::string_view(route->name) : std::string_view(), method,
                          path, rec.status, rec.bytes_in, rec.bytes_out, us / 1000.0,
                          rec.limit_outcome, rec.limit_layer, rec.upstream, rec.request_id});
}

admission admit_head(runtime& rt, http::request_header<>& req, const admission_input& in,
                     request_scope& scope) {
    admission a;
    auto refuse = [&](http::response<http::string_body> res) {
        if (in.head) omit_body(res);
        a.refusal = std::move(res);
    };
    // Routing, limiting and forwarding all see the normalised request (SPEC §3).
    request_facts read_here;
    if (!in.facts) read_here = read_request_facts(req);
    const request_facts& facts = in.facts ? *in.facts : read_here;
    const h1::request_line line{req.method_string(), req.target(), req.version(), facts.host_count,
                                facts.host};
    auto normalised = h1::normalise_request(line, in.host_memo);
    if (normalised.error) {
        const auto& e = *normalised.error;
        refuse(make_error_response(e.status, e.code, e.message, false, in.reply_version()));
        a.close = true;
        return a;
    }
    const auto& nreq = *normalised.request;
    if (access_log_enabled()) {
        scope.method.assign(req.method_string());
        scope.path = nreq.path;
    }
    // Rewritten only when normalising changed them: most requests pass through untouched.
    if (!nreq.host.empty() && facts.host != nreq.host) req.set(http::field::host, nreq.host);
    if (!nreq.is_origin_form_of(req.target())) req.target(nreq.origin_form(nreq.path));
    // SPEC §3 "gRPC": gRPC needs HTTP/2 (its trailers and streams).
    if (in.protocol == wire_protocol::http1 && is_grpc_content_type(facts.content_type)) {
        auto res = make_error_response(426, "upgrade_required", "gRPC requires HTTP/2",
                                       in.keep_alive(), in.reply_version());
        res.set(http::field::upgrade, "h2");
        refuse(std::move(res));
        return a;
    }
    const auto* route =
        rt.routes.match(req.method_string(), nreq.path, nreq.host, in.tls ? 443 : 80);
    if (!route) {
        std::string message = "no route for " + std::string(req.method_string()) + " " + nreq.path;
        refuse(make_error_response(404, "not_found", message, in.keep_alive(), in.reply_version()));
        return a;
    }
    a.route = route;
    scope.route = route;
    // A presented bearer token is verified on every route; a failing one is never
    // forwarded (SPEC §2 "User", RFC 6750 §3).
    if (rt.jwt_cache) {
        auto now_s = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
        const auto& header = rt.cfg->identity.jwt->header;
        if (req.count(header) > 1) {
            // A singleton field (RFC 9110 §11.6.2): verified on one line, the upstream could
            // read the other.
            refuse(make_error_response(400, "bad_request", "repeated " + header + " header",
                                       in.keep_alive(), in.reply_version()));
            return a;
        }
        auto auth = req.find(header);
        auto verdict = rt.jwt_cache->verify(
            auth == req.end() ? std::string_view{} : std::string_view(auth->value()), now_s);
        if (verdict.what == identity::jwt_result::kind::invalid) {
            auto res =
                make_error_response(401, "invalid_token", "invalid bearer token: " + verdict.reason,
                                    in.keep_alive(), in.reply_version());
            res.set(http::field::www_authenticate, "Bearer error=\"invalid_token\"");
            refuse(std::move(res));
            return a;
        }
        if (verdict.what == identity::jwt_result::kind::valid && !verdict.user.empty())
            a.jwt_user = std::move(verdict.user);
    }
    return a;
}

net::awaitable<void> check_limits(runtime& rt, http::request_header<>& req,
                                  const admission_input& in, request_scope& scope, admission& a) {
    const auto* route = a.route;
    auto route_index = rt.route_index(*route);
    auto who = limiting::assemble_identity(*rt.cfg, rt.client_ip, *rt.policy, route_index, req,
                                           in.peer_ip, a.jwt_user);
    if (!who.repeated.empty()) {
        scope.rec.limit_outcome = "invalid_identity";
        auto res = make_error_response(400, "invalid_identity",
                                       "repeated " + std::string(who.repeated) +
                                           " header: a limiter's identity is one field line",
                                       in.keep_alive(), in.reply_version());
        if (in.head) omit_body(res);
        a.refusal = std::move(res);
        co_return;
    }
    auto out = co_await rt.limits->check(route_index, who.view(), static_cast<double>(route->cost));
    scope.rec.limit_outcome = limiting::to_string(out.what);
    scope.rec.limit_layer = limiting::log_layer(out);
    if (!out.forward) {
        a.limited = out.what == limiting::verdict::limited;
        // HEAD's body is dropped by refusal_response itself.
        a.refusal =
            limiting::refusal_response(out, *route, in.keep_alive(), in.reply_version(), in.head);
        co_return;
    }
    a.rate = limiting::headers_of(out);
}

net::awaitable<admission> admit(runtime& rt, http::request_header<>& req, const admission_input& in,
                                request_scope& scope) {
    auto a = admit_head(rt, req, in, scope);
    if (a.limits_pending()) co_await check_limits(rt, req, in, scope, a);
    co_return a;
}

}  // namespace rategate::gateway
