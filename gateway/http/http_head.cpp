#include "gateway/http/http_head.hpp"

#include <charconv>

namespace rategate::gateway {

namespace {
void append_fields(std::string& out, const boost::beast::http::fields& f) {
    for (const auto& field : f) {
        out += field.name_string();
        out += ": ";
        out += field.value();
        out += "\r\n";
    }
    out += "\r\n";
}
}  // namespace

void append_request_head(std::string& out, const boost::beast::http::request_header<>& h) {
    out += h.method_string();
    out += ' ';
    out += h.target();
    out += h.version() == 10 ? " HTTP/1.0\r\n" : " HTTP/1.1\r\n";
    append_fields(out, h);
}

void append_response_head(std::string& out, const boost::beast::http::response_header<>& h) {
    out += h.version() == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
    char code[4];
    auto [end, ec] = std::to_chars(code, code + sizeof code, h.result_int());
    out.append(code, end);
    out += ' ';
    out += h.reason();
    out += "\r\n";
    append_fields(out, h);
}

}  // namespace rategate::gateway
