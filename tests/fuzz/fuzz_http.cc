// Bytes as a client sends them, read the way `sqlq serve` reads every
// request (server/http_request.h): Beast's parser with the server's limits,
// the head refused or let through by the policy before the body is read,
// the read errors the server answers, then the API's handling over a real
// SQLite store.

#include <boost/asio/buffer.hpp>

#include "server/http_request.h"
#include "tests/fuzz/fuzz_env.h"

using namespace sqlq;
using namespace sqlq::server;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  fuzz::Env& env = fuzz::TheEnv();
  static const HttpPolicy policy;
  std::string_view in = fuzz::Text(data, size);
  RequestParser parser;
  ConfigureParser(parser, env.limits);
  boost::beast::error_code ec;
  bool checked = false;
  while (!in.empty() && !parser.is_done()) {
    const std::size_t used =
        parser.put(boost::asio::buffer(in.data(), in.size()), ec);
    in.remove_prefix(used);
    if (ec == boost::beast::http::error::need_more) {
      ec = {};
      if (used == 0) break;  // the rest of the input is not enough
    }
    if (ec) {
      (void)ReplyToReadError(ec, env.limits);
      return 0;
    }
    if (parser.is_header_done() && !checked) {
      checked = true;
      const ParsedHead head = ReadHead(parser);
      if (CheckRequest(head.head, policy)) return 0;  // refused
    }
  }
  if (!parser.is_done()) return 0;  // the client stopped halfway
  const bool sqs = ReadHead(parser).sqs;
  const Request req = MakeRequest(parser, sqs, "127.0.0.1");
  (void)env.Handle(req);
  return 0;
}
