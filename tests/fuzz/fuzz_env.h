// What the fuzz targets share: a real SQLite store in a fresh directory and
// the server's two front doors over it (the native API and the SQS
// endpoint), built once per process (libFuzzer calls a target's function
// many times in one process).

#ifndef SQLQ_TESTS_FUZZ_FUZZ_ENV_H_
#define SQLQ_TESTS_FUZZ_FUZZ_ENV_H_

#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "server/api.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/queue_cache.h"
#include "server/sqs.h"
#include "sqlq/store.h"

namespace sqlq::fuzz {

// A new directory for a target's files, in memory when /dev/shm is there
// (a store's syncs then cost nothing).
inline std::string ScratchDir(const char* prefix) {
  const std::filesystem::path base =
      std::filesystem::is_directory("/dev/shm")
          ? "/dev/shm"
          : std::filesystem::temp_directory_path();
  std::string tmpl = (base / (std::string(prefix) + "XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
  return tmpl;
}

struct Env {
  Env() {
    dir = ScratchDir("sqlq-fuzz-");
    auto s = Store::Open("sqlite:" + dir + "/q.db");
    if (!s.ok()) {
      std::fprintf(stderr, "cannot open the store: %s\n",
                   s.status().ToString().c_str());
      std::abort();
    }
    store = std::move(*s);
    // Small limits: the fuzzer's inputs are small, and large bodies are
    // the limits' own tests.
    limits.max_body_bytes = 64 << 10;
    limits.max_batch = 100;
    queues = std::make_unique<server::QueueCache>(*store);
    api = std::make_unique<server::Api>(
        *store, limits, auth, metrics,
        server::Api::ServerGauges{
            .read = [] { return server::Metrics::Gauges{}; },
            .shutting_down = [] { return false; }},
        false, server::Overview::Options{},
        server::Api::Shared{failures, *queues});
    sqs = std::make_unique<server::SqsApi>(*store, limits, auth, failures,
                                           *queues);
    // Something for the requests to find.
    (void)store->CreateQueue("q", {});
    (void)store->CreateRing("r", {});
    (void)store->CreateRotation("t", {});
  }
  std::string dir;
  std::unique_ptr<Store> store;
  server::Limits limits;
  server::Auth auth = server::Auth::AllowAll();
  server::Metrics metrics;
  server::AuthFailures failures{10, std::chrono::seconds(6)};
  std::unique_ptr<server::QueueCache> queues;
  std::unique_ptr<server::Api> api;
  std::unique_ptr<server::SqsApi> sqs;

  // The request handled by the front door the server would hand it to.
  server::Outcome Handle(const server::Request& req) {
    return req.sqs ? sqs->Handle(req) : api->Handle(req);
  }
};

inline Env& TheEnv() {
  // Kept to the end of the process (the fuzzer exits from its own threads);
  // only the directory is removed then.
  static Env* env = [] {
    Env* e = new Env();
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(TheEnv().dir, ec);
    });
    return e;
  }();
  return *env;
}

inline std::string_view Text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace sqlq::fuzz

#endif  // SQLQ_TESTS_FUZZ_FUZZ_ENV_H_
