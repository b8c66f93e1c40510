// A small upstream server for the demo, the tests and docker-compose.
//   GET|POST /anything      echo: JSON with method, path, query, headers, body (first 64 KiB),
//   body_bytes /slow?ms=N              wait N ms, then echo /bytes?n=N[&chunked=1]  N bytes of 'x',
//   sized (Content-Length) or chunked, streamed /status/N               status N with a small JSON
//   body /headers?set=K:V        echo, with response header K: V added (repeatable) /eof?n=N N
//   bytes delimited by closing the connection (no Content-Length)
// Every echo carries "upstream" (the --name) and "connection" (a per-process connection number).
// GET /count answers {"requests": N}: every request served before it but /count itself (tests
// count what a gateway forwarded).
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/program_options.hpp>
#include <boost/url/parse.hpp>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace po = boost::program_options;
using tcp = net::ip::tcp;
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

namespace {

std::string name_of_instance;
std::atomic<std::uint64_t> connection_counter{0};
std::atomic<std::uint64_t> request_counter{0};  // every request but GET /count

struct request_info {
    http::request<http::empty_body> header;
    std::string body;
    std::uint64_t body_bytes = 0;
};

net::awaitable<bool> read_request(beast::tcp_stream& s, beast::flat_buffer& buf,
                                  request_info& out) {
    http::request_parser<http::buffer_body> p;
    p.body_limit(boost::none);
    s.expires_after(std::chrono::seconds(60));
    auto [ec, n] = co_await http::async_read_header(s, buf, p, use_nothrow);
    if (ec) co_return false;
    char chunk[65536];
    while (!p.is_done()) {
        p.get().body().data = chunk;
        p.get().body().size = sizeof chunk;
        s.expires_after(std::chrono::seconds(60));
        auto [rec, rn] = co_await http::async_read_some(s, buf, p, use_nothrow);
        if (rec && rec != http::error::need_buffer) co_return false;
        auto got = sizeof chunk - p.get().body().size;
        out.body_bytes += got;
        if (out.body.size() < 65536)
            out.body.append(chunk, std::min<std::size_t>(got, 65536 - out.body.size()));
    }
    auto& m = p.get();
    out.header.method_string(m.method_string());
    out.header.target(m.target());
    out.header.version(m.version());
    for (const auto& f : m)
        out.header.insert(f.name_string(), f.value());
    co_return true;
}

nlohmann::json echo_json(const request_info& r, std::uint64_t connection) {
    nlohmann::json headers = nlohmann::json::object();
    for (const auto& f : r.header) {
        std::string name(f.name_string());
        std::transform(name.begin(), name.end(), name.begin(), ::tolower);
        if (headers.contains(name))
            headers[name] = headers[name].get<std::string>() + ", " + std::string(f.value());
        else
            headers[name] = std::string(f.value());
    }
    auto url = boost::urls::parse_origin_form(r.header.target());
    return {{"method", std::string(r.header.method_string())},
            {"target", std::string(r.header.target())},
            {"path", url ? std::string(url->path()) : std::string(r.header.target())},
            {"query", url ? std::string(url->query()) : ""},
            {"headers", headers},
            {"body", r.body},
            {"body_bytes", r.body_bytes},
            {"upstream", name_of_instance},
            {"connection", connection}};
}

std::string param(const boost::urls::url_view& u, std::string_view key, std::string fallback = "") {
    auto it = u.params().find(key);
    return it == u.params().end() ? fallback : std::string((*it).value);
}

net::awaitable<bool> send_bytes(beast::tcp_stream& s, bool keep_alive, unsigned version,
                                std::uint64_t n, bool chunked, bool eof_delimited) {
    http::response<http::buffer_body> res{http::status::ok, version};
    res.set(http::field::content_type, "application/octet-stream");
    if (eof_delimited)
        keep_alive = false;
    else if (chunked)
        res.chunked(true);
    else
        res.content_length(n);
    res.keep_alive(keep_alive);
    if (eof_delimited) res.erase(http::field::content_length);
    http::response_serializer<http::buffer_body> sr{res};
    std::string block(65536, 'x');
    std::uint64_t left = n;
    do {
        auto take = static_cast<std::size_t>(std::min<std::uint64_t>(left, block.size()));
        res.body().data = take ? block.data() : nullptr;
        res.body().size = take;
        left -= take;
        res.body().more = left > 0;
        s.expires_after(std::chrono::seconds(60));
        auto [ec, w] = co_await http::async_write(s, sr, use_nothrow);
        if (ec && ec != http::error::need_buffer) co_return false;
    } while (!sr.is_done());
    co_return keep_alive;
}

net::awaitable<void> session(tcp::socket socket) {
    beast::tcp_stream s(std::move(socket));
    beast::flat_buffer buf;
    const auto connection = ++connection_counter;
    for (;;) {
        request_info r;
        if (!co_await read_request(s, buf, r)) break;
        auto url = boost::urls::parse_origin_form(r.header.target());
        std::string path = url ? std::string(url->path()) : "/";
        bool keep = r.header.keep_alive();
        unsigned version = r.header.version();
        if (path != "/count") ++request_counter;
        if (path == "/bytes" || path == "/eof") {
            std::uint64_t n = std::strtoull(param(*url, "n", "0").c_str(), nullptr, 10);
            bool ok = co_await send_bytes(s, keep, version, n, param(*url, "chunked") == "1",
                                          path == "/eof");
            if (!ok) break;
            continue;
        }
        unsigned status = 200;
        if (path.rfind("/status/", 0) == 0)
            status = static_cast<unsigned>(std::atoi(path.c_str() + 8));
        if (status < 100 || status > 599) status = 400;
        if (path == "/slow") {
            net::steady_timer t(s.get_executor(),
                                std::chrono::milliseconds(
                                    std::strtoll(param(*url, "ms", "0").c_str(), nullptr, 10)));
            co_await t.async_wait(use_nothrow);
        }
        http::response<http::string_body> res{static_cast<http::status>(status), version};
        res.set(http::field::content_type, "application/json");
        if (path == "/headers" && url)
            for (auto p : url->params())
                if (p.key == "set") {
                    auto colon = p.value.find(':');
                    if (colon != std::string::npos)
                        res.insert(p.value.substr(0, colon), p.value.substr(colon + 1));
                }
        if (path == "/count")
            res.body() = nlohmann::json{{"requests", request_counter.load()}}.dump();
        else if (status != 204 && status != 304 && status >= 200)
            res.body() = echo_json(r, connection).dump();
        res.keep_alive(keep);
        res.prepare_payload();
        s.expires_after(std::chrono::seconds(60));
        auto [ec, n] = co_await http::async_write(s, res, use_nothrow);
        if (ec || !keep) break;
    }
    boost::system::error_code ignored;
    s.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

net::awaitable<void> listen(tcp::acceptor& acceptor) {
    for (;;) {
        auto [ec, socket] = co_await acceptor.async_accept(use_nothrow);
        if (ec) continue;
        boost::system::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        // A session that throws (bad query, peer reset) ends alone; the server keeps serving.
        net::co_spawn(acceptor.get_executor(), session(std::move(socket)),
                      [](std::exception_ptr) {});
    }
}

}  // namespace

int main(int argc, char** argv) {
    po::options_description opts("demo_upstream options");
    opts.add_options()("help,h", "show help")(
        "listen", po::value<std::string>()->default_value("127.0.0.1:9001"), "address:port")(
        "name", po::value<std::string>()->default_value(""), "instance name echoed in responses")(
        "threads", po::value<int>()->default_value(1), "event loops");
    po::variables_map vm;
    try {
        po::store(po::parse_command_line(argc, argv, opts), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        std::cerr << e.what() << "\n" << opts;
        return 2;
    }
    if (vm.count("help")) {
        std::cout << opts;
        return 0;
    }
    auto listen_at = vm["listen"].as<std::string>();
    name_of_instance =
        vm["name"].as<std::string>().empty() ? listen_at : vm["name"].as<std::string>();
    auto colon = listen_at.rfind(':');
    tcp::endpoint ep{net::ip::make_address(listen_at.substr(0, colon)),
                     static_cast<unsigned short>(std::stoi(listen_at.substr(colon + 1)))};
    int threads = std::max(1, vm["threads"].as<int>());
    net::io_context ioc;
    tcp::acceptor acceptor(ioc);
    acceptor.open(ep.protocol());
    acceptor.set_option(net::socket_base::reuse_address(true));
    acceptor.bind(ep);
    acceptor.listen();
    net::co_spawn(ioc, listen(acceptor), net::detached);
    net::signal_set signals(ioc, SIGINT, SIGTERM);
    signals.async_wait([&](auto, int) { ioc.stop(); });
    std::vector<std::thread> pool;
    for (int i = 1; i < threads; ++i)
        pool.emplace_back([&] { ioc.run(); });
    ioc.run();
    for (auto& t : pool)
        t.join();
}
