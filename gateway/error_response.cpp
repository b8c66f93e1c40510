#include "gateway/error_response.hpp"

#include <nlohmann/json.hpp>

namespace rategate::gateway {

namespace http = boost::beast::http;

http::response<http::string_body> make_error_response(unsigned status, std::string_view code,
                                                      std::string_view message, bool keep_alive,
                                                      unsigned version) {
    http::response<http::string_body> res{static_cast<http::status>(status), version};
    res.set(http::field::server, "rategate");
    res.set(http::field::content_type, "application/json");
    nlohmann::json body = {{"error", code}, {"message", message}};
    // Replace invalid UTF-8 (e.g. echoed paths) rather than throwing.
    res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    res.keep_alive(keep_alive);
    res.prepare_payload();
    return res;
}

}  // namespace rategate::gateway
