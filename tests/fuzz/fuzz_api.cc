// JSON bodies (and query strings) into the API's calls: the first byte
// picks an endpoint, the rest is its body (for a GET, its query string),
// handled over a real SQLite store holding a queue, a ring and a rotation.

#include "tests/fuzz/fuzz_env.h"

using namespace sqlq;
using namespace sqlq::server;

namespace {

struct Endpoint {
  const char* method;
  const char* target;
};

constexpr Endpoint kEndpoints[] = {
    {"POST", "/v1/queues/q2"},
    {"PATCH", "/v1/queues/q"},
    {"POST", "/v1/queues/q/messages"},
    {"POST", "/v1/queues/q/claim"},
    {"POST", "/v1/queues/q/ack"},
    {"POST", "/v1/queues/q/nack"},
    {"POST", "/v1/queues/q/extend"},
    {"POST", "/v1/queues/q/messages/delete"},
    {"POST", "/v1/queues/q/messages/cancel"},
    {"POST", "/v1/queues/q/messages/redrive"},
    {"POST", "/v1/queues/q/dead/redrive"},
    {"GET", "/v1/queues/q/messages?"},
    {"GET", "/v1/queues/q/messages/count?"},
    {"GET", "/v1/queues/q/dead?"},
    {"GET", "/v1/queues/q/archive?"},
    {"GET", "/v1/queues/q/history?"},
    {"POST", "/v1/rings/r2"},
    {"POST", "/v1/rings/r/groups/g"},
    {"GET", "/v1/rings/r/groups/g?"},
    {"POST", "/v1/rotations/t2"},
    {"POST", "/v1/rotations/t/items"},
    {"POST", "/v1/rotations/t/next"},
    {"POST", "/v1/schedules/s"},
    {"GET", "/v1/queues?"},
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size == 0) return 0;
  fuzz::Env& env = fuzz::TheEnv();
  const Endpoint& e = kEndpoints[data[0] % std::size(kEndpoints)];
  const std::string rest(fuzz::Text(data + 1, size - 1));
  Request req{.method = e.method, .target = e.target};
  if (req.method == "GET") {
    req.target += rest;
  } else {
    req.body = rest;
  }
  (void)env.api->Handle(req);
  return 0;
}
