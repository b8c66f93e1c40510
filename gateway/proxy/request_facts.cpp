#include "gateway/proxy/request_facts.hpp"

#include "gateway/http/text.hpp"

namespace rategate::gateway {

namespace http = boost::beast::http;

request_facts read_request_facts(const http::fields& f) {
    request_facts out;
    bool content_type = false, expect = false, upgrade = false;
    for (const auto& field : f) {
        const std::string_view value = field.value();
        switch (field.name()) {
            case http::field::host:
                if (out.host_count++ == 0) out.host = value;
                break;
            case http::field::content_type:
                if (!content_type) out.content_type = value, content_type = true;
                break;
            case http::field::expect:
                if (!expect) out.expect_continue = h1::iequals(value, "100-continue");
                expect = true;
                break;
            case http::field::upgrade:
                if (!upgrade) out.upgrade_websocket = h1::iequals(value, "websocket");
                upgrade = true;
                break;
            case http::field::connection:
                h1::for_each_element(value, [&out](std::string_view token) {
                    if (h1::iequals(token, "close")) out.connection_close = true;
                    if (h1::iequals(token, "keep-alive")) out.connection_keep_alive = true;
                    if (h1::iequals(token, "upgrade")) out.connection_upgrade = true;
                });
                break;
            case http::field::transfer_encoding: {
                auto comma = value.rfind(',');
                out.chunked = h1::iequals(
                    h1::trim(comma == std::string_view::npos ? value : value.substr(comma + 1)),
                    "chunked");
                break;
            }
            default:
                break;
        }
    }
    return out;
}

}  // namespace rategate::gateway
