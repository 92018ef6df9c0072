// The SQS endpoint's wire formats: the first byte picks the protocol (the
// query protocol's form body, or the JSON protocol with one of the actions
// in X-Amz-Target, of every action the endpoint answers), the rest is the
// body, handled over a real SQLite store.

#include "server/sqs.h"
#include "tests/fuzz/fuzz_env.h"

using namespace sqlq;
using namespace sqlq::server;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size == 0) return 0;
  fuzz::Env& env = fuzz::TheEnv();
  Request req{.method = "POST",
              .target = "/",
              .body = std::string(fuzz::Text(data + 1, size - 1))};
  req.sqs = true;
  req.headers.emplace_back("host", "127.0.0.1");
  if (data[0] % 2 == 0) {
    req.headers.emplace_back("content-type",
                             "application/x-www-form-urlencoded");
  } else {
    req.headers.emplace_back("content-type", "application/x-amz-json-1.0");
    const auto actions = SqsApi::Actions();
    req.headers.emplace_back(
        "x-amz-target",
        "AmazonSQS." + std::string(actions[(data[0] / 2) % actions.size()]));
  }
  (void)env.Handle(req);
  return 0;
}
