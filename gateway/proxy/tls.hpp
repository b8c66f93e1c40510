// TLS contexts (SPEC §3 "TLS", Boost.Asio SSL over OpenSSL): one for HTTPS on `listen` and one
// per upstream with `tls`. A context is built once per config (re)load and shared read-only by
// the connections made with it; a connection keeps the context it started with.
#pragma once

#include <memory>
#include <string>

#include "config/config.hpp"

namespace boost::asio::ssl {
class context;
}

namespace rategate::gateway {

/// The server context: TLS 1.2 and 1.3, the certificate chain and key of `cfg`, ALPN `h2`
/// (when `h2`: http2.enabled) before `http/1.1` (RFC 7301; a client offering none of them
/// gets no ALPN answer). Throws
/// std::runtime_error naming the file when the certificate or key cannot be loaded or do not
/// match each other.
std::shared_ptr<boost::asio::ssl::context> make_server_tls(const config::tls_server_config& cfg,
                                                           bool h2);

/// A client context for an upstream: TLS 1.2 and 1.3; with `verify` (the default) the peer's
/// certificate chain is checked against `ca_file` (or the system store). Throws
/// std::runtime_error naming the file when the CA file cannot be loaded.
std::shared_ptr<boost::asio::ssl::context> make_client_tls(const config::tls_client_config& cfg);

}  // namespace rategate::gateway
