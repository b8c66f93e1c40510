#include "gateway/proxy/tls.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <boost/asio/ssl/context.hpp>
#include <cstring>
#include <stdexcept>
#include <string_view>

namespace rategate::gateway {

namespace ssl = boost::asio::ssl;

namespace {

std::string openssl_error() {
    unsigned long e = ERR_get_error();
    if (!e) return "unknown OpenSSL error";
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    return buf;
}

// ALPN (RFC 7301): the first of the server's protocols that the client offers; a client
// offering none of them gets no ALPN answer. `arg` is the server's list (a static one).
struct alpn_choice {
    bool h2;
};

bool offers(const unsigned char* in, unsigned int inlen, std::string_view proto,
            const unsigned char** out, unsigned char* outlen) {
    for (unsigned i = 0; i < inlen;) {
        unsigned len = in[i];
        if (i + 1 + len > inlen) break;
        if (len == proto.size() && std::memcmp(in + i + 1, proto.data(), len) == 0) {
            *out = in + i + 1;
            *outlen = static_cast<unsigned char>(len);
            return true;
        }
        i += 1 + len;
    }
    return false;
}

int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                unsigned int inlen, void* arg) {
    const bool h2 = static_cast<const alpn_choice*>(arg)->h2;
    if (h2 && offers(in, inlen, "h2", out, outlen)) return SSL_TLSEXT_ERR_OK;
    if (offers(in, inlen, "http/1.1", out, outlen)) return SSL_TLSEXT_ERR_OK;
    return SSL_TLSEXT_ERR_NOACK;
}

}  // namespace

std::shared_ptr<ssl::context> make_server_tls(const config::tls_server_config& cfg, bool h2) {
    auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
    auto* native = ctx->native_handle();
    SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
    SSL_CTX_set_options(native, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    ERR_clear_error();
    if (SSL_CTX_use_certificate_chain_file(native, cfg.cert_file.c_str()) != 1)
        throw std::runtime_error("tls.cert: cannot load \"" + cfg.cert_file +
                                 "\": " + openssl_error());
    if (SSL_CTX_use_PrivateKey_file(native, cfg.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
        throw std::runtime_error("tls.key: cannot load \"" + cfg.key_file +
                                 "\": " + openssl_error());
    if (SSL_CTX_check_private_key(native) != 1)
        throw std::runtime_error("tls: the key \"" + cfg.key_file +
                                 "\" does not match the certificate \"" + cfg.cert_file + "\"");
    static const alpn_choice with_h2{true}, without_h2{false};
    SSL_CTX_set_alpn_select_cb(native, select_alpn,
                               const_cast<alpn_choice*>(h2 ? &with_h2 : &without_h2));
    return ctx;
}

std::shared_ptr<ssl::context> make_client_tls(const config::tls_client_config& cfg) {
    auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
    auto* native = ctx->native_handle();
    SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
    if (!cfg.verify) {
        ctx->set_verify_mode(ssl::verify_none);
        return ctx;
    }
    ctx->set_verify_mode(ssl::verify_peer);
    ERR_clear_error();
    if (cfg.ca_file) {
        if (SSL_CTX_load_verify_locations(native, cfg.ca_file->c_str(), nullptr) != 1)
            throw std::runtime_error("tls.ca: cannot load \"" + *cfg.ca_file +
                                     "\": " + openssl_error());
    } else if (SSL_CTX_set_default_verify_paths(native) != 1) {
        throw std::runtime_error("tls: cannot load the system certificate store: " +
                                 openssl_error());
    }
    return ctx;
}

}  // namespace rategate::gateway
