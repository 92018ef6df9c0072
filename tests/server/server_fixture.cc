// The HTTP half of the server tests' Client (server_fixture.h): one
// keep-alive connection through Boost.Beast, kept out of the header so that
// each test file compiles without Beast.

#include "tests/server/server_fixture.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace sqlq::server_test {

struct Client::Connection {
  boost::asio::io_context ioc;
  boost::beast::tcp_stream stream{ioc};
  bool connected = false;

  void Connect(int port) {
    boost::asio::ip::tcp::endpoint ep(
        boost::asio::ip::make_address("127.0.0.1"),
        static_cast<unsigned short>(port));
    boost::beast::error_code ec;
    stream.expires_after(std::chrono::seconds(10));
    stream.connect(ep, ec);
    connected = !ec;
  }
  void Close() {
    connected = false;
    stream.close();
  }
};

Client::Client(int port, std::string token)
    : port_(port),
      token_(std::move(token)),
      conn_(std::make_unique<Connection>()) {}

Client::~Client() = default;

Response Client::Call(const std::string& method, const std::string& target,
                      const std::string& body, std::chrono::seconds timeout) {
  namespace http = boost::beast::http;
  Connection& c = *conn_;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!c.connected) c.Connect(port_);
    http::request<http::string_body> req(http::string_to_verb(method), target,
                                         11);
    req.set(http::field::host, "127.0.0.1");
    if (!token_.empty()) {
      req.set(http::field::authorization, "Bearer " + token_);
    }
    if (!body.empty()) {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
    }
    req.prepare_payload();
    req.keep_alive(true);
    boost::beast::error_code ec;
    c.stream.expires_after(timeout);
    http::write(c.stream, req, ec);
    if (ec) {
      c.Close();
      continue;  // the server closed an idle connection: reconnect once
    }
    boost::beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(256 << 20);
    // A reply to HEAD has no body, whatever its Content-Length says.
    parser.skip(method == "HEAD");
    http::read(c.stream, buf, parser, ec);
    if (ec) {
      c.Close();
      if (attempt == 0 && ec == http::error::end_of_stream) continue;
      Response r;
      r.status = -1;
      r.body = ec.message();
      return r;
    }
    auto& res = parser.get();
    Response r;
    r.status = static_cast<int>(res.result_int());
    r.body = res.body();
    for (auto& f : res) {
      r.headers[Lower(std::string(f.name_string()))] = std::string(f.value());
    }
    r.json = Json::parse(r.body, nullptr, false);
    if (r.json.is_discarded()) r.json = nullptr;
    if (!res.keep_alive()) c.Close();
    return r;
  }
  Response r;
  r.status = -1;
  r.body = "cannot connect";
  return r;
}

}  // namespace sqlq::server_test
