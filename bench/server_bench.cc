#include "bench/server_bench.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/stats.h"
#include "sqlq/status.h"
#include "wire/duration.h"
#include "wire/printer.h"

namespace sqlq::bench {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Json = nlohmann::ordered_json;

// ---- the systems under test ----

// One connection to a queue of the system under test. Not thread-safe: one
// per thread.
class Conn {
 public:
  virtual ~Conn() = default;
  // Sends the payloads as one batch; returns once they are durable.
  virtual Status Send(const std::vector<std::string>& payloads) = 0;
  // Claims up to `max`, waiting up to `wait_ms` for the first, acks them,
  // and returns their payloads (empty when the wait ran out).
  virtual Result<std::vector<std::string>> ClaimAndAck(int max,
                                                       int wait_ms) = 0;
  // A single-job worker's step: finishes `done` (the handle of the message
  // the last step returned; empty for none) and claims one more, waiting up
  // to wait_ms. Returns the claimed payload and its handle, or nothing.
  struct Job {
    std::string payload, handle;
  };
  virtual Result<std::optional<Job>> Work(const std::string& done,
                                          int wait_ms) = 0;
  // Consumers waiting on the queue right now.
  virtual Result<long> Waiting() = 0;
  // Messages still in the queue (ready, delayed or leased).
  virtual Result<long> Left() = 0;
};

// One system: how to make a fresh queue for a run, connect to it, and drop
// it again.
class System {
 public:
  virtual ~System() = default;
  virtual std::string name() const = 0;
  virtual Status Create(const std::string& queue) = 0;
  virtual Result<std::unique_ptr<Conn>> Connect(const std::string& queue) = 0;
  virtual void Drop(const std::string& queue) = 0;
  // For http-idle: the bytes of one cheap request, and whether `got` holds
  // its whole reply.
  virtual std::string Probe() const = 0;
  virtual bool ProbeDone(const std::string& got) const = 0;
  virtual int port() const = 0;
  virtual int pid() const = 0;
};

// -- sqlq serve over HTTP/1.1 keep-alive --

// The values of `key` ("payload":") in a reply, up to the next quote: the
// payloads are digits and 'x' and the receipts base64url or digits and
// '-', so a scan finds them without a JSON parser (which would take CPU
// from the server on a small machine).
std::vector<std::string> Strings(const std::string& text,
                                 std::string_view key) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while ((at = text.find(key, at)) != std::string::npos) {
    at += key.size();
    auto end = text.find('"', at);
    if (end == std::string::npos) break;
    out.emplace_back(text, at, end - at);
    at = end;
  }
  return out;
}

// HTTP requests the bench's connections made (their replies read), for
// the server's CPU time per request.
std::atomic<long> g_requests{0};

class HttpConn final : public Conn {
 public:
  HttpConn(int port, std::string token, std::string queue)
      : port_(port),
        token_(std::move(token)),
        queue_(std::move(queue)),
        stream_(ioc_) {}

  Status Open() {
    beast::error_code ec;
    stream_.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"),
                                            static_cast<unsigned short>(port_)),
                    ec);
    if (ec) {
      return Status::Unavailable(fmt::format(
          "cannot connect to 127.0.0.1:{}: {}", port_, ec.message()));
    }
    stream_.socket().set_option(asio::ip::tcp::no_delay(true), ec);
    return Status::Ok();
  }

  // One request and its reply, on this keep-alive connection. `headers`
  // replace the defaults (a JSON body, the bearer token).
  Result<std::string> Call(
      http::verb verb, const std::string& target, std::string body, int expect,
      const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    http::request<http::string_body> req(verb, target, 11);
    req.set(http::field::host, "127.0.0.1");
    if (!token_.empty()) {
      req.set(http::field::authorization, "Bearer " + token_);
    }
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    for (const auto& [name, value] : headers) req.set(name, value);
    req.body() = std::move(body);
    req.keep_alive(true);
    req.prepare_payload();
    beast::error_code ec;
    http::write(stream_, req, ec);
    if (ec) {
      return Status::Unavailable(
          fmt::format("{} {}: {}", req.method_string(), target, ec.message()));
    }
    http::response_parser<http::string_body> parser;
    parser.body_limit(256 << 20);
    http::read(stream_, buffer_, parser, ec);
    if (ec) {
      return Status::Unavailable(
          fmt::format("{} {}: {}", req.method_string(), target, ec.message()));
    }
    ++g_requests;
    auto& res = parser.get();
    if (static_cast<int>(res.result_int()) != expect) {
      return Status::Internal(fmt::format("{} {}: HTTP {}: {}",
                                          req.method_string(), target,
                                          res.result_int(), res.body()));
    }
    return std::move(res.body());
  }

  Status Send(const std::vector<std::string>& payloads) override {
    std::string body = R"({"messages":[)";
    for (std::size_t i = 0; i < payloads.size(); ++i) {
      if (i) body += ',';
      body += R"({"payload":")";
      body += payloads[i];
      body += "\"}";
    }
    body += "]}";
    return Call(http::verb::post, "/v1/queues/" + queue_ + "/messages",
                std::move(body), 200)
        .status();
  }

  Result<std::vector<std::string>> ClaimAndAck(int max, int wait_ms) override {
    auto r = Call(http::verb::post, "/v1/queues/" + queue_ + "/claim",
                  fmt::format(R"({{"max":{},"lease_ms":60000,"wait_ms":{}}})",
                              max, wait_ms),
                  200);
    if (!r.ok()) return r.status();
    std::vector<std::string> payloads = Strings(*r, R"("payload":")");
    std::vector<std::string> receipts = Strings(*r, R"("receipt":")");
    if (payloads.size() != receipts.size()) {
      return Status::Internal("claim reply: payloads and receipts differ");
    }
    if (receipts.empty()) return payloads;
    std::string body = R"({"receipts":[)";
    for (std::size_t i = 0; i < receipts.size(); ++i) {
      if (i) body += ',';
      body += '"';
      body += receipts[i];
      body += '"';
    }
    body += "]}";
    auto a = Call(http::verb::post, "/v1/queues/" + queue_ + "/ack",
                  std::move(body), 200);
    if (!a.ok()) return a.status();
    if (a->find(fmt::format(R"("acked":{})", receipts.size())) ==
        std::string::npos) {
      return Status::Internal("ack: not every receipt was acked: " + *a);
    }
    return payloads;
  }

  // One request: the claim names the receipt it is done with ("ack"),
  // acked in the claim's transaction.
  Result<std::optional<Job>> Work(const std::string& done,
                                  int wait_ms) override {
    std::string body =
        done.empty()
            ? fmt::format(R"({{"max":1,"lease_ms":60000,"wait_ms":{}}})",
                          wait_ms)
            : fmt::format(
                  R"({{"max":1,"lease_ms":60000,"wait_ms":{},"ack":"{}"}})",
                  wait_ms, done);
    auto r = Call(http::verb::post, "/v1/queues/" + queue_ + "/claim",
                  std::move(body), 200);
    if (!r.ok()) return r.status();
    std::vector<std::string> payloads = Strings(*r, R"("payload":")");
    std::vector<std::string> receipts = Strings(*r, R"("receipt":")");
    if (payloads.size() != receipts.size() || payloads.size() > 1) {
      return Status::Internal("claim reply: not one payload and receipt");
    }
    if (payloads.empty()) return std::optional<Job>();
    return std::optional<Job>(
        Job{std::move(payloads[0]), std::move(receipts[0])});
  }

  Result<long> Waiting() override {
    auto r = Call(http::verb::get, "/metrics", "", 200);
    if (!r.ok()) return r.status();
    constexpr std::string_view kGauge = "\nsqlq_server_waiting_consumers ";
    auto at = r->find(kGauge);
    if (at == std::string::npos) {
      return Status::Internal("/metrics has no waiting consumers gauge");
    }
    return std::strtol(r->c_str() + at + kGauge.size(), nullptr, 10);
  }

  Result<long> Left() override {
    auto r = Call(http::verb::get, "/v1/queues/" + queue_, "", 200);
    if (!r.ok()) return r.status();
    auto j = nlohmann::json::parse(*r, nullptr, false);
    if (j.is_discarded() || !j.contains("stats")) {
      return Status::Internal("queue stats: unexpected reply " + *r);
    }
    const auto& s = j["stats"];
    return s.value("ready", 0L) + s.value("delayed", 0L) +
           s.value("leased", 0L);
  }

 private:
  int port_;
  std::string token_;
  std::string queue_;
  asio::io_context ioc_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
};

class HttpSystem final : public System {
 public:
  HttpSystem(int port, std::string token, int pid)
      : port_(port), token_(std::move(token)), pid_(pid) {}
  std::string name() const override { return "sqlq"; }
  Status Create(const std::string& queue) override {
    HttpConn c(port_, token_, queue);
    Status s = c.Open();
    if (!s.ok()) return s;
    (void)c.Call(http::verb::delete_, "/v1/queues/" + queue, "", 200);
    return c
        .Call(http::verb::post, "/v1/queues/" + queue, R"({"lease_ms":300000})",
              201)
        .status();
  }
  Result<std::unique_ptr<Conn>> Connect(const std::string& queue) override {
    auto c = std::make_unique<HttpConn>(port_, token_, queue);
    Status s = c->Open();
    if (!s.ok()) return s;
    return std::unique_ptr<Conn>(std::move(c));
  }
  void Drop(const std::string& queue) override {
    HttpConn c(port_, token_, queue);
    if (c.Open().ok()) {
      (void)c.Call(http::verb::delete_, "/v1/queues/" + queue, "", 200);
    }
  }
  std::string Probe() const override {
    return "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  }
  bool ProbeDone(const std::string& got) const override {
    auto end = got.find("\r\n\r\n");
    if (end == std::string::npos) return false;
    auto cl = got.find("Content-Length: ");
    if (cl == std::string::npos || cl > end) return true;
    long n = std::strtol(got.c_str() + cl + 16, nullptr, 10);
    return got.size() >= end + 4 + static_cast<std::size_t>(n);
  }
  int port() const override { return port_; }
  int pid() const override { return pid_; }

 private:
  int port_;
  std::string token_;
  int pid_;
};

// -- sqlq serve's SQS endpoint, JSON protocol --

// The SQS operations the workloads use, over an HttpConn: SendMessageBatch
// (10 at most per request), ReceiveMessage and DeleteMessageBatch.
class SqsConn final : public Conn {
 public:
  // `token`: the bearer token for /metrics (Waiting), when the server has
  // a token file.
  SqsConn(int port, std::string token, std::string key, std::string queue)
      : http_(port, std::move(token), queue),
        key_(std::move(key)),
        url_(fmt::format("http://127.0.0.1:{}/000000000000/{}", port, queue)) {}

  Status Open() { return http_.Open(); }

  // One operation: its JSON reply.
  Result<std::string> Op(std::string_view action, const Json& input) {
    return Post(action, input.dump());
  }
  Result<std::string> Post(std::string_view action, std::string body) {
    const std::string target = "AmazonSQS." + std::string(action);
    std::vector<std::pair<std::string, std::string>> headers = {
        {"Content-Type", kContentType}, {"X-Amz-Target", target}};
    if (!key_.empty()) Sign(body, target, headers);
    return http_.Call(http::verb::post, "/", std::move(body), 200, headers);
  }

  // The bodies are written as the native client writes its own, by hand
  // (the payloads need no escaping), so that both clients cost the same
  // on the cores they share with the server.
  Status Send(const std::vector<std::string>& payloads) override {
    for (std::size_t at = 0; at < payloads.size(); at += kMaxBatch) {
      std::vector<std::string> bodies;
      for (std::size_t i = at; i < std::min(payloads.size(), at + kMaxBatch);
           ++i) {
        bodies.push_back(payloads[i]);
      }
      Status s = Batch("SendMessageBatch", "MessageBody", bodies);
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  Result<std::vector<std::string>> ClaimAndAck(int max, int wait_ms) override {
    auto got = Receive(max, wait_ms);
    if (!got.ok()) return got.status();
    auto& [bodies, handles] = *got;
    if (handles.empty()) return bodies;
    Status s = Batch("DeleteMessageBatch", "ReceiptHandle", handles);
    if (!s.ok()) return s;
    return bodies;
  }

  // SQS has no "delete and receive": a DeleteMessage, then a receive.
  Result<std::optional<Job>> Work(const std::string& done,
                                  int wait_ms) override {
    if (!done.empty()) {
      auto d =
          Op("DeleteMessage", {{"QueueUrl", url_}, {"ReceiptHandle", done}});
      if (!d.ok()) return d.status();
    }
    auto got = Receive(1, wait_ms);
    if (!got.ok()) return got.status();
    auto& [bodies, handles] = *got;
    if (bodies.size() > 1) {
      return Status::Internal("ReceiveMessage: more than one message");
    }
    if (bodies.empty()) return std::optional<Job>();
    return std::optional<Job>(Job{std::move(bodies[0]), std::move(handles[0])});
  }

  Result<long> Waiting() override { return http_.Waiting(); }

  Result<long> Left() override {
    auto r =
        Op("GetQueueAttributes", {{"QueueUrl", url_},
                                  {"AttributeNames",
                                   {"ApproximateNumberOfMessages",
                                    "ApproximateNumberOfMessagesNotVisible",
                                    "ApproximateNumberOfMessagesDelayed"}}});
    if (!r.ok()) return r.status();
    auto j = Json::parse(*r, nullptr, false);
    if (j.is_discarded() || !j.contains("Attributes")) {
      return Status::Internal("GetQueueAttributes: unexpected reply " + *r);
    }
    long left = 0;
    for (const auto& [name, v] : j["Attributes"].items()) {
      left += std::strtol(v.get<std::string>().c_str(), nullptr, 10);
    }
    return left;
  }

 private:
  static constexpr std::size_t kMaxBatch = 10;

  // A batch operation on the queue, entry i being {"Id": "i", field:
  // values[i]}; any entry that failed fails it.
  Status Batch(std::string_view action, std::string_view field,
               const std::vector<std::string>& values) {
    std::string body = R"({"QueueUrl":")" + url_ + R"(","Entries":[)";
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (i) body += ',';
      body += fmt::format(R"({{"Id":"{}","{}":"{}"}})", i, field, values[i]);
    }
    body += "]}";
    auto r = Post(action, std::move(body));
    if (!r.ok()) return r.status();
    if (r->find("\"Failed\"") != std::string::npos) {
      return Status::Internal(
          fmt::format("{}: entries failed: {}", action, *r));
    }
    return Status::Ok();
  }

  // A ReceiveMessage of up to `max` (10 at most): bodies and handles.
  Result<std::pair<std::vector<std::string>, std::vector<std::string>>> Receive(
      int max, int wait_ms) {
    auto r =
        Op("ReceiveMessage", {{"QueueUrl", url_},
                              {"MaxNumberOfMessages", std::min(max, 10)},
                              {"WaitTimeSeconds", (wait_ms + 999) / 1000}});
    if (!r.ok()) return r.status();
    std::vector<std::string> bodies = Strings(*r, R"("Body":")");
    std::vector<std::string> handles = Strings(*r, R"("ReceiptHandle":")");
    if (bodies.size() != handles.size()) {
      return Status::Internal("ReceiveMessage: bodies and handles differ");
    }
    return std::pair(std::move(bodies), std::move(handles));
  }

  // AWS Signature Version 4 with the key "ID:SECRET", as an SDK signs a
  // JSON-protocol request: a client's own signer, apart from the server's
  // checker.
  void Sign(const std::string& body, const std::string& target,
            std::vector<std::pair<std::string, std::string>>& headers) const {
    const std::string amz_date = AmzDate();
    const std::string date = amz_date.substr(0, 8);
    const std::size_t colon = key_.find(':');
    const std::string canonical = fmt::format(
        "POST\n/\n\ncontent-type:{}\nhost:127.0.0.1\nx-amz-date:{}\n"
        "x-amz-target:{}\n\n{}\n{}",
        kContentType, amz_date, target, kSignedHeaders, Hex(Sha256(body)));
    const std::string scope = date + "/us-east-1/sqs/aws4_request";
    std::string k = Hmac("AWS4" + key_.substr(colon + 1), date);
    for (const char* part : {"us-east-1", "sqs", "aws4_request"}) {
      k = Hmac(k, part);
    }
    const std::string signature =
        Hex(Hmac(k, fmt::format("AWS4-HMAC-SHA256\n{}\n{}\n{}", amz_date, scope,
                                Hex(Sha256(canonical)))));
    headers.emplace_back("X-Amz-Date", amz_date);
    headers.emplace_back(
        "Authorization",
        fmt::format("AWS4-HMAC-SHA256 Credential={}/{}, SignedHeaders={}, "
                    "Signature={}",
                    key_.substr(0, colon), scope, kSignedHeaders, signature));
  }
  static constexpr const char* kContentType = "application/x-amz-json-1.0";
  static constexpr const char* kSignedHeaders =
      "content-type;host;x-amz-date;x-amz-target";
  static std::string AmzDate() {
    const std::time_t t =
        std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm utc{};
    gmtime_r(&t, &utc);
    char out[32];
    std::strftime(out, sizeof out, "%Y%m%dT%H%M%SZ", &utc);
    return out;
  }
  static std::string Sha256(std::string_view bytes) {
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
           md);
    return std::string(reinterpret_cast<const char*>(md), sizeof md);
  }
  static std::string Hmac(std::string_view key, std::string_view text) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
         reinterpret_cast<const unsigned char*>(text.data()), text.size(), md,
         &n);
    return std::string(reinterpret_cast<const char*>(md), n);
  }
  static std::string Hex(std::string_view bytes) {
    std::string out;
    for (unsigned char b : bytes) out += fmt::format("{:02x}", b);
    return out;
  }

  HttpConn http_;
  std::string key_;
  std::string url_;
};

class SqsSystem final : public System {
 public:
  SqsSystem(int port, std::string token, std::string key, int pid)
      : port_(port),
        token_(std::move(token)),
        key_(std::move(key)),
        pid_(pid) {}
  std::string name() const override { return "sqs"; }
  Status Create(const std::string& queue) override {
    SqsConn c(port_, token_, key_, queue);
    Status s = c.Open();
    if (!s.ok()) return s;
    Drop(queue);
    return c
        .Op("CreateQueue", {{"QueueName", queue},
                            {"Attributes", {{"VisibilityTimeout", "300"}}}})
        .status();
  }
  Result<std::unique_ptr<Conn>> Connect(const std::string& queue) override {
    auto c = std::make_unique<SqsConn>(port_, token_, key_, queue);
    Status s = c->Open();
    if (!s.ok()) return s;
    return std::unique_ptr<Conn>(std::move(c));
  }
  void Drop(const std::string& queue) override {
    SqsConn c(port_, token_, key_, queue);
    if (c.Open().ok()) {
      (void)c.Op(
          "DeleteQueue",
          {{"QueueUrl",
            fmt::format("http://127.0.0.1:{}/000000000000/{}", port_, queue)}});
    }
  }
  std::string Probe() const override {
    return "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  }
  bool ProbeDone(const std::string& got) const override {
    return HttpSystem(port_, "", pid_).ProbeDone(got);
  }
  int port() const override { return port_; }
  int pid() const override { return pid_; }

 private:
  int port_;
  std::string token_;
  std::string key_;
  int pid_;
};

// -- beanstalkd over its text protocol --

// A blocking TCP connection with a read buffer, for line protocols.
class LineSocket {
 public:
  LineSocket() = default;
  LineSocket(const LineSocket&) = delete;
  ~LineSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Open(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 ||
        ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      return Status::Unavailable(fmt::format(
          "cannot connect to 127.0.0.1:{}: {}", port, std::strerror(errno)));
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return Status::Ok();
  }
  Status Write(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return Status::Unavailable("beanstalkd: write failed");
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return Status::Ok();
  }
  // The next line, without its CRLF.
  Result<std::string> Line() {
    for (;;) {
      auto end = buf_.find("\r\n", pos_);
      if (end != std::string::npos) {
        std::string line = buf_.substr(pos_, end - pos_);
        pos_ = end + 2;
        return line;
      }
      Status s = Fill();
      if (!s.ok()) return s;
    }
  }
  // Reads until `done` holds for what came since the last call; drops it.
  Status ReadUntil(const std::function<bool(const std::string&)>& done) {
    while (!done(buf_.substr(pos_))) {
      Status s = Fill();
      if (!s.ok()) return s;
    }
    buf_.clear();
    pos_ = 0;
    return Status::Ok();
  }
  // The next `n` bytes and the CRLF after them.
  Result<std::string> Bytes(std::size_t n) {
    while (buf_.size() - pos_ < n + 2) {
      Status s = Fill();
      if (!s.ok()) return s;
    }
    std::string out = buf_.substr(pos_, n);
    pos_ += n + 2;
    return out;
  }

 private:
  Status Fill() {
    if (pos_ > 0) {
      buf_.erase(0, pos_);
      pos_ = 0;
    }
    char tmp[65536];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return Status::Unavailable("beanstalkd closed the connection");
    buf_.append(tmp, static_cast<std::size_t>(n));
    return Status::Ok();
  }
  int fd_ = -1;
  std::string buf_;
  std::size_t pos_ = 0;
};

class BeanstalkConn final : public Conn {
 public:
  BeanstalkConn(int port, std::string tube)
      : port_(port), tube_(std::move(tube)) {}
  Status Open() {
    Status s = sock_.Open(port_);
    if (!s.ok()) return s;
    s = sock_.Write(
        fmt::format("use {0}\r\nwatch {0}\r\nignore default\r\n", tube_));
    for (int i = 0; i < 3 && s.ok(); ++i) s = sock_.Line().status();
    return s;
  }

  // Puts are pipelined: all of the batch's commands in one write, then all
  // the replies. With -f 0 beanstalkd still fsyncs each put.
  Status Send(const std::vector<std::string>& payloads) override {
    std::string out;
    for (const auto& p : payloads) {
      out += fmt::format("put 0 0 60 {}\r\n", p.size());
      out += p;
      out += "\r\n";
    }
    Status s = sock_.Write(out);
    for (std::size_t i = 0; i < payloads.size() && s.ok(); ++i) {
      auto line = sock_.Line();
      if (!line.ok()) return line.status();
      if (line->rfind("INSERTED ", 0) != 0) {
        return Status::Internal("beanstalkd put: " + *line);
      }
    }
    return s;
  }

  // A claim of up to `max`: one reserve that waits (whole seconds, at least
  // one: the protocol's unit) and max - 1 that do not, pipelined; then the
  // deletes, pipelined.
  Result<std::vector<std::string>> ClaimAndAck(int max, int wait_ms) override {
    std::string out = fmt::format("reserve-with-timeout {}\r\n",
                                  wait_ms > 0 ? (wait_ms + 999) / 1000 : 0);
    for (int i = 1; i < max; ++i) out += "reserve-with-timeout 0\r\n";
    Status s = sock_.Write(out);
    if (!s.ok()) return s;
    std::vector<std::string> payloads;
    std::string deletes;
    for (int i = 0; i < max; ++i) {
      auto job = Reserved();
      if (!job.ok()) return job.status();
      if (!job->has_value()) continue;
      payloads.push_back(std::move((*job)->payload));
      deletes += fmt::format("delete {}\r\n", (*job)->handle);
    }
    if (payloads.empty()) return payloads;
    s = sock_.Write(deletes);
    for (std::size_t i = 0; i < payloads.size() && s.ok(); ++i) {
      auto line = sock_.Line();
      if (!line.ok()) return line.status();
      if (*line != "DELETED") {
        return Status::Internal("beanstalkd delete: " + *line);
      }
    }
    if (!s.ok()) return s;
    return payloads;
  }

  // The delete of the finished job and the next reserve, pipelined.
  Result<std::optional<Job>> Work(const std::string& done,
                                  int wait_ms) override {
    std::string out;
    if (!done.empty()) out = fmt::format("delete {}\r\n", done);
    out += fmt::format("reserve-with-timeout {}\r\n",
                       wait_ms > 0 ? (wait_ms + 999) / 1000 : 0);
    Status s = sock_.Write(out);
    if (!s.ok()) return s;
    if (!done.empty()) {
      auto line = sock_.Line();
      if (!line.ok()) return line.status();
      if (*line != "DELETED") {
        return Status::Internal("beanstalkd delete: " + *line);
      }
    }
    return Reserved();
  }

  Result<long> Waiting() override { return TubeStat("current-waiting"); }

  // The reply to one reserve: the job (its id as handle), or nothing when
  // it timed out.
  Result<std::optional<Job>> Reserved() {
    auto line = sock_.Line();
    if (!line.ok()) return line.status();
    if (*line == "TIMED_OUT" || *line == "DEADLINE_SOON") {
      return std::optional<Job>();
    }
    unsigned long long id = 0;
    std::size_t bytes = 0;
    if (std::sscanf(line->c_str(), "RESERVED %llu %zu", &id, &bytes) != 2) {
      return Status::Internal("beanstalkd reserve: " + *line);
    }
    auto body = sock_.Bytes(bytes);
    if (!body.ok()) return body.status();
    return std::optional<Job>(Job{std::move(*body), std::to_string(id)});
  }
  Result<long> Left() override {
    long total = 0;
    for (const char* k : {"current-jobs-ready", "current-jobs-delayed",
                          "current-jobs-reserved"}) {
      auto v = TubeStat(k);
      if (!v.ok()) return v.status();
      total += *v;
    }
    return total;
  }

 private:
  Result<long> TubeStat(const std::string& key) {
    Status s = sock_.Write(fmt::format("stats-tube {}\r\n", tube_));
    if (!s.ok()) return s;
    auto line = sock_.Line();
    if (!line.ok()) return line.status();
    if (*line == "NOT_FOUND") return 0L;  // a tube nobody uses or holds
    std::size_t bytes = 0;
    if (std::sscanf(line->c_str(), "OK %zu", &bytes) != 1) {
      return Status::Internal("beanstalkd stats-tube: " + *line);
    }
    auto yaml = sock_.Bytes(bytes);
    if (!yaml.ok()) return yaml.status();
    auto at = yaml->find("\n" + key + ": ");
    if (at == std::string::npos) {
      return Status::Internal("beanstalkd stats-tube lacks " + key);
    }
    return std::strtol(yaml->c_str() + at + key.size() + 3, nullptr, 10);
  }

  int port_;
  std::string tube_;
  LineSocket sock_;
};

// A free loopback port: bind to port 0, read it, close.
int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

// beanstalkd started by the bench with its binlog on (-b DIR) and an fsync
// after every write (-f 0, its most durable setting), stopped at the end.
class BeanstalkSystem final : public System {
 public:
  ~BeanstalkSystem() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  Status Start(const std::string& bin, const std::string& dir) {
    dir_ = dir + "/beanstalkd-binlog";
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    port_ = FreePort();
    std::string port = std::to_string(port_);
    pid_ = ::fork();
    if (pid_ < 0) return Status::Unavailable("fork failed");
    if (pid_ == 0) {
      // Each connection is a descriptor: http-idle opens thousands.
      ::execlp(bin.c_str(), bin.c_str(), "-l", "127.0.0.1", "-p", port.c_str(),
               "-b", dir_.c_str(), "-f", "0", static_cast<char*>(nullptr));
      std::fprintf(stderr, "cannot run %s: %s\n", bin.c_str(),
                   std::strerror(errno));
      std::_Exit(127);
    }
    // Ready once it accepts a connection (or gone if it failed to start).
    auto deadline = SteadyClock::now() + std::chrono::seconds(10);
    while (SteadyClock::now() < deadline) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = 0;
        return Status::Unavailable(
            fmt::format("{} exited at start (is the beanstalkd package "
                        "installed?)",
                        bin));
      }
      LineSocket probe;
      if (probe.Open(port_).ok()) return Status::Ok();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return Status::Timeout("beanstalkd did not start listening within 10s");
  }
  std::string name() const override { return "beanstalkd"; }
  Status Create(const std::string&) override { return Status::Ok(); }
  Result<std::unique_ptr<Conn>> Connect(const std::string& queue) override {
    auto c = std::make_unique<BeanstalkConn>(port_, queue);
    Status s = c->Open();
    if (!s.ok()) return s;
    return std::unique_ptr<Conn>(std::move(c));
  }
  // Drains what a run left, so that jobs do not pile up in the binlog.
  void Drop(const std::string& queue) override {
    auto c = Connect(queue);
    if (!c.ok()) return;
    for (;;) {
      auto got = (*c)->ClaimAndAck(1000, 0);
      if (!got.ok() || got->empty()) return;
    }
  }
  std::string Probe() const override { return "use default\r\n"; }
  bool ProbeDone(const std::string& got) const override {
    return got.find("\r\n") != std::string::npos;
  }
  int port() const override { return port_; }
  int pid() const override { return pid_; }

 private:
  std::string dir_;
  int port_ = 0;
  int pid_ = 0;
};

// ---- the workloads ----

struct RunResult {
  double seconds = 0;
  long messages = 0;  // counted in the rate
  double rate() const { return seconds > 0 ? messages / seconds : 0; }
  double p50_us = -1, p99_us = -1;
  // http-wake: from the send request (p50_us/p99_us: from its reply).
  double total_p50_us = -1, total_p99_us = -1;
  // Bookkeeping that must add up: sent == acked + left.
  long sent = 0, acked = 0, left = 0;
  // http-idle (and http-attack: RSS before and at the attack's peak)
  long held = 0, rss_before_kib = -1, rss_after_kib = -1;
  bool served_while_held = false;
  // http-attack: the client's round trips without attackers (p50_us and
  // p99_us: with them), the server's descriptors, the attackers' work.
  double base_p50_us = -1, base_p99_us = -1;
  long fds_before = -1, fds_peak = -1, attacks = 0;
  // The server's CPU time (user and system, from /proc) over the run, per
  // request the bench made; -1 without its pid.
  double cpu_us_per_req = -1;
};

Status CheckCounts(const RunResult& r, const std::string& what) {
  if (r.sent != r.acked + r.left) {
    return Status::Internal(
        fmt::format("{}: counts do not add up: sent {} != acked {} + left {}",
                    what, r.sent, r.acked, r.left));
  }
  return Status::Ok();
}

// Batches of `batch` from `connections` connections until `total` are sent.
Result<RunResult> RunSendBatch(System& sys, const std::string& queue,
                               const ServerBenchConfig& c) {
  // beanstalkd fsyncs every put (-f 0), so it gets through far fewer per
  // second: by default it sends fewer, to finish in about the same time.
  const long total = c.messages > 0               ? c.messages
                     : sys.name() == "beanstalkd" ? 20000
                                                  : 200000;
  std::vector<std::string> payloads(static_cast<std::size_t>(c.batch),
                                    StampedPayload(0, c.payload));
  std::atomic<long> next{0};
  std::atomic<bool> stop{false};
  auto start = SteadyClock::now();
  Status s = OnThreads(c.connections, [&](int) -> Status {
    auto conn = sys.Connect(queue);
    if (!conn.ok()) return conn.status();
    std::vector<std::string> part;
    while (!stop) {
      long first = next.fetch_add(c.batch);
      if (first >= total) return Status::Ok();
      long n = std::min<long>(c.batch, total - first);
      const std::vector<std::string>* p = &payloads;
      if (n < c.batch) {
        part.assign(payloads.begin(), payloads.begin() + n);
        p = &part;
      }
      Status sent = (*conn)->Send(*p);
      if (!sent.ok()) {
        stop = true;
        return sent;
      }
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  RunResult r{.seconds = Seconds(SteadyClock::now() - start),
              .messages = total};
  auto conn = sys.Connect(queue);
  if (!conn.ok()) return conn.status();
  auto left = (*conn)->Left();
  if (!left.ok()) return left.status();
  r.sent = total;
  r.left = *left;
  return r;
}

// What a consumer thread of RunLoad sees: whether to stop, where to count
// what it acked, and where to put the latencies it measured.
struct Consumer {
  std::atomic<bool>& stop;
  std::atomic<long>& acked;
  std::vector<double> latencies;
};

// Producers send batches of c.batch (pausing while more than max_backlog
// messages wait) and c.consumers threads run `consume` on connections of
// their own, for `duration`; the rate is what consumers acked inside the
// window. A consumer returns only after acking what it claimed, so that the
// counts add up at the end.
Result<RunResult> RunLoad(
    System& sys, const std::string& queue, const ServerBenchConfig& c,
    Duration duration, long max_backlog,
    const std::function<Status(Conn&, Consumer&)>& consume) {
  std::atomic<bool> stop{false};
  std::atomic<long> sent{0}, acked{0};
  std::mutex mu;
  std::vector<double> latencies;
  std::atomic<long> in_window{-1};
  auto start = SteadyClock::now();
  std::thread clock([&] {
    auto deadline = start + duration;
    while (!stop && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    in_window = acked.load();
    stop = true;
  });
  Status s = OnThreads(c.producers + c.consumers, [&](int i) -> Status {
    auto conn = sys.Connect(queue);
    if (!conn.ok()) {
      stop = true;
      return conn.status();
    }
    if (i < c.producers) {
      std::vector<std::string> batch(static_cast<std::size_t>(c.batch));
      while (!stop) {
        if (sent - acked > max_backlog) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          continue;
        }
        std::string p = StampedPayload(NowNs(), c.payload);
        for (auto& m : batch) m = p;
        Status st = (*conn)->Send(batch);
        if (!st.ok()) {
          stop = true;
          return st;
        }
        sent += c.batch;
      }
      return Status::Ok();
    }
    Consumer me{.stop = stop, .acked = acked, .latencies = {}};
    Status st = consume(**conn, me);
    if (!st.ok()) {
      stop = true;
      return st;
    }
    std::lock_guard<std::mutex> lock(mu);
    latencies.insert(latencies.end(), me.latencies.begin(), me.latencies.end());
    return Status::Ok();
  });
  stop = true;
  clock.join();
  if (!s.ok()) return s;
  RunResult r{.seconds = Seconds(duration), .messages = in_window.load()};
  r.p50_us = Percentile(latencies, 0.50);
  r.p99_us = Percentile(latencies, 0.99);
  auto conn = sys.Connect(queue);
  if (!conn.ok()) return conn.status();
  auto left = (*conn)->Left();
  if (!left.ok()) return left.status();
  r.sent = sent;
  r.acked = acked;
  r.left = *left;
  return r;
}

// Consumers claim up to claim_max (with a wait) and ack them in one
// request. Latency: from the send request that carried a message to the
// claim that returned it. Producers pause while more than max_backlog
// (default 4 x consumers x claim_max) messages wait.
Result<RunResult> RunMixed(System& sys, const std::string& queue,
                           const ServerBenchConfig& c, Duration duration) {
  const long max_backlog =
      c.max_backlog > 0 ? c.max_backlog : 4L * c.consumers * c.claim_max;
  return RunLoad(sys, queue, c, duration, max_backlog,
                 [&](Conn& conn, Consumer& me) -> Status {
                   while (!me.stop) {
                     auto got = conn.ClaimAndAck(c.claim_max, 100);
                     if (!got.ok()) return got.status();
                     auto now = NowNs();
                     for (const auto& p : *got) {
                       me.latencies.push_back(MicrosSince(p, now));
                     }
                     me.acked += static_cast<long>(got->size());
                   }
                   return Status::Ok();
                 });
}

// Single-job workers: each holds one message and finishes it with the
// request that claims the next (Conn::Work). Latency: from the send request
// to the claim reply. Producers send `batch` messages per request (--batch
// 1: one) and pause while more than max_backlog (default 4 x consumers x
// batch) messages wait.
Result<RunResult> RunWorkers(System& sys, const std::string& queue,
                             const ServerBenchConfig& c, Duration duration) {
  const long max_backlog =
      c.max_backlog > 0 ? c.max_backlog : 4L * c.consumers * c.batch;
  return RunLoad(
      sys, queue, c, duration, max_backlog,
      [&](Conn& conn, Consumer& me) -> Status {
        // The last step, once stopped, does not wait and may claim one
        // more, finished by the one after.
        std::string held;
        for (;;) {
          const bool last = me.stop;
          auto got = conn.Work(held, last ? 0 : 100);
          if (!got.ok()) return got.status();
          if (!held.empty()) ++me.acked;
          held.clear();
          if (!got->has_value()) {
            if (last) return Status::Ok();
            continue;
          }
          me.latencies.push_back(MicrosSince((*got)->payload, NowNs()));
          held = std::move((*got)->handle);
        }
      });
}

// `consumers` claims wait on an empty queue; one message is sent at a time,
// once all of them are parked. Two latencies per message: the wake-up, from
// the send's reply (its commit is durable then) to the reply of the claim
// it woke, reported as p50/p99 (0 when the claim's reply came first); and
// send-to-claim, from the send request going out, which adds the commit.
Result<RunResult> RunWake(System& sys, const std::string& queue,
                          const ServerBenchConfig& c) {
  const long samples = c.wake_samples;
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  long received = 0;
  std::vector<std::int64_t> sent_at(static_cast<std::size_t>(samples), 0),
      committed_at(static_cast<std::size_t>(samples), 0),
      claimed_at(static_cast<std::size_t>(samples), 0);
  auto probe = sys.Connect(queue);
  if (!probe.ok()) return probe.status();
  auto producer = sys.Connect(queue);
  if (!producer.ok()) return producer.status();
  std::vector<std::thread> pool;
  Status failure;
  auto fail = [&](const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (failure.ok()) failure = s;
    stop = true;
    cv.notify_all();
  };
  for (int k = 0; k < c.consumers; ++k) {
    pool.emplace_back([&] {
      auto conn = sys.Connect(queue);
      if (!conn.ok()) return fail(conn.status());
      while (!stop) {
        auto got = (*conn)->ClaimAndAck(1, 2000);
        if (!got.ok()) return fail(got.status());
        auto now = NowNs();
        if (got->empty()) continue;
        std::lock_guard<std::mutex> lock(mu);
        for (const auto& p : *got) {
          auto i = StampOf(p);
          if (i >= 0 && i < samples) {
            claimed_at[static_cast<std::size_t>(i)] = now;
          }
          ++received;
        }
        cv.notify_all();
      }
    });
  }
  auto start = SteadyClock::now();
  for (long i = 0; i < samples && !stop; ++i) {
    // Wait (with a deadline) until every consumer is parked again.
    auto deadline = SteadyClock::now() + std::chrono::seconds(10);
    for (;;) {
      auto w = (*probe)->Waiting();
      if (!w.ok()) {
        fail(w.status());
        break;
      }
      if (*w >= c.consumers) break;
      if (SteadyClock::now() > deadline) {
        fail(Status::Timeout(fmt::format(
            "only {} of {} consumers parked after 10s", *w, c.consumers)));
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    if (stop) break;
    const auto at = static_cast<std::size_t>(i);
    sent_at[at] = NowNs();
    Status s = (*producer)->Send({StampedPayload(i, c.payload)});
    auto committed = NowNs();
    if (!s.ok()) {
      fail(s);
      break;
    }
    std::unique_lock<std::mutex> lock(mu);
    committed_at[at] = committed;
    if (!cv.wait_for(lock, std::chrono::seconds(10),
                     [&] { return received > i || stop; })) {
      lock.unlock();
      fail(Status::Timeout("a sent message woke no waiting claim within 10s"));
      break;
    }
  }
  double secs = Seconds(SteadyClock::now() - start);
  stop = true;
  for (auto& t : pool) t.join();  // parked claims end within their wait
  if (!failure.ok()) return failure;
  std::vector<double> wake, total;
  for (std::size_t i = 0; i < claimed_at.size(); ++i) {
    if (claimed_at[i] == 0) continue;
    wake.push_back(static_cast<double>(std::max<std::int64_t>(
                       0, claimed_at[i] - committed_at[i])) /
                   1000.0);
    total.push_back(static_cast<double>(claimed_at[i] - sent_at[i]) / 1000.0);
  }
  RunResult r{.seconds = secs, .messages = received};
  r.p50_us = Percentile(wake, 0.50);
  r.p99_us = Percentile(wake, 0.99);
  r.total_p50_us = Percentile(total, 0.50);
  r.total_p99_us = Percentile(total, 0.99);
  auto left = (*probe)->Left();
  if (!left.ok()) return left.status();
  r.sent = samples;
  r.acked = received;
  r.left = *left;
  return r;
}

// The CPU time process `pid` has used (user and system), in seconds; -1
// when it cannot be read.
double CpuSeconds(int pid) {
  if (pid <= 0) return -1;
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  if (!std::getline(f, stat)) return -1;
  // The fields after the command name, which is in parentheses and may
  // hold spaces: state is the first, utime the 12th, stime the 13th.
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  double ticks = 0;
  for (int i = 1; i <= 13 && rest >> field; ++i) {
    if (i >= 12) ticks += std::strtod(field.c_str(), nullptr);
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

long RssKib(int pid) {
  if (pid <= 0) return -1;
  std::ifstream f(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0)
      return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

// Opens `n` connections, makes one cheap request on each so that the server
// has accepted and served it, and holds them idle; reads the server's RSS
// before and with them held; checks that a new connection is still served.
Result<RunResult> RunIdle(System& sys, const ServerBenchConfig& c) {
  std::vector<std::unique_ptr<LineSocket>> held;
  held.reserve(static_cast<std::size_t>(c.idle_connections));
  const std::string probe = sys.Probe();
  auto round_trip = [&](LineSocket& s) -> Status {
    Status st = s.Write(probe);
    if (!st.ok()) return st;
    return s.ReadUntil(
        [&](const std::string& got) { return sys.ProbeDone(got); });
  };
  RunResult r;
  r.rss_before_kib = RssKib(sys.pid());
  auto start = SteadyClock::now();
  for (long i = 0; i < c.idle_connections; ++i) {
    auto s = std::make_unique<LineSocket>();
    Status st = s->Open(sys.port());
    if (st.ok()) st = round_trip(*s);
    if (!st.ok()) {
      return st.WithContext(fmt::format(
          "idle connection {} of {} (raise `ulimit -n` and the server's "
          "connection limit?)",
          i + 1, c.idle_connections));
    }
    held.push_back(std::move(s));
  }
  r.seconds = Seconds(SteadyClock::now() - start);
  r.held = static_cast<long>(held.size());
  r.messages = r.held;
  r.rss_after_kib = RssKib(sys.pid());
  LineSocket fresh;
  r.served_while_held = fresh.Open(sys.port()).ok() && round_trip(fresh).ok();
  return r;
}

// ---- http-attack ----

constexpr const char* kAttacks[] = {"slowloris", "polls",   "flood",
                                    "oversized", "chunked", "nested"};

// Whether `name` is among the attacks to run (all when none are named).
bool Attacks(const ServerBenchConfig& c, const char* name) {
  return c.attacks.empty() ||
         std::find(c.attacks.begin(), c.attacks.end(), name) != c.attacks.end();
}

// A blocking loopback connection whose writes and reads give up after 2 s
// (an attacker that the server stops reading must not hang the bench), or
// -1.
int AttackSocket(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{.tv_sec = 2, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Runs the calling thread at the lowest CPU priority: an attacker stands in
// for another machine, whose CPU would not be this one's.
void AsAnotherMachine() {
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
}

bool SendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Reads and drops what comes until the peer closes or 2 s pass.
void Drain(int fd) {
  char buf[4096];
  while (::recv(fd, buf, sizeof buf, 0) > 0) {
  }
}

long OpenFds(int pid) {
  if (pid <= 0) return -1;
  std::error_code ec;
  long n = 0;
  for (auto it = std::filesystem::directory_iterator(
           fmt::format("/proc/{}/fd", pid), ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return ec ? -1 : n;
}

// One well-behaved client's round trips (a send of one message, then a
// claim and ack of it), timed without attackers and again while six kinds
// of them run at once, each paced so that together they leave the client
// some of a two-core machine: 300 slowloris connections trickling a header,
// long polls whose clients go away at once (up to 500 a second), a flood of
// connections opened and closed (up to 1,000 a second), bodies announced
// larger than --max-body (100 a second), an endless chunked body at about
// 13 MB/s (each cut at --max-body), and JSON nested deeper than allowed (50
// a second, 200 kB each). p50_us/p99_us are the attacked
// round trips, base_* the unattacked ones; the server's open descriptors
// and RSS are sampled through the attack (needs --server-pid). The
// attackers go to `attacked_sys`: the client's server, unless a control run
// aims them at another.
Result<RunResult> RunAttack(System& sys, System& attacked_sys,
                            const std::string& queue,
                            const ServerBenchConfig& c) {
  auto conn = sys.Connect(queue);
  if (!conn.ok()) return conn.status();
  const long samples = std::max(100L, c.wake_samples * 5);
  const std::string payload = StampedPayload(0, c.payload);
  RunResult r;
  auto round_trips = [&](std::vector<double>& us) -> Status {
    for (long i = 0; i < samples; ++i) {
      const auto start = SteadyClock::now();
      Status s = (*conn)->Send({payload});
      if (!s.ok()) return s;
      auto got = (*conn)->ClaimAndAck(1, 5000);
      if (!got.ok()) return got.status();
      if (got->size() != 1) {
        return Status::Internal("http-attack: a sent message was not claimed");
      }
      us.push_back(Seconds(SteadyClock::now() - start) * 1e6);
      r.sent += 1;
      r.acked += 1;
    }
    return Status::Ok();
  };
  std::vector<double> base, attacked;
  Status s = round_trips(base);
  if (!s.ok()) return s;
  r.fds_before = OpenFds(sys.pid());
  r.rss_before_kib = RssKib(sys.pid());

  const int port = attacked_sys.port();
  const std::string auth =
      c.token.empty() ? "" : "Authorization: Bearer " + c.token + "\r\n";
  const std::string head = "Host: 127.0.0.1\r\n" + auth;
  // The attackers use a queue of their own: the client's messages are not
  // theirs to take (a vanished claim would hold one for its lease).
  const std::string theirs = queue + "_attack";
  s = attacked_sys.Create(theirs);
  if (!s.ok()) return s.WithContext("the attackers' server");
  const std::string target = "/v1/queues/" + theirs;
  std::atomic<bool> stop{false};
  std::atomic<long> attacks{0};
  std::vector<std::thread> attackers;
  // Slowloris: a header that never ends, a line every 200 ms; reconnects
  // when the server gives up on it (--request-timeout).
  if (Attacks(c, "slowloris"))
    attackers.emplace_back([&] {
      AsAnotherMachine();
      std::vector<int> fds;
      const std::string start =
          "POST " + target + "/messages HTTP/1.1\r\n" + head;
      while (!stop) {
        while (fds.size() < 300 && !stop) {
          const int fd = AttackSocket(port);
          if (fd < 0) break;
          if (SendAll(fd, start)) {
            fds.push_back(fd);
            ++attacks;
          } else {
            ::close(fd);
          }
        }
        for (int& fd : fds) {
          if (!SendAll(fd, "X-Slow: 1\r\n")) {
            ::close(fd);
            fd = -1;
          }
        }
        std::erase(fds, -1);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      for (int fd : fds) ::close(fd);
    });
  // The other five connect, do their thing, close, and pause, until told
  // to stop.
  auto each = [&](const char* name, std::chrono::milliseconds pause,
                  std::function<void(int fd)> once) {
    if (!Attacks(c, name)) return;
    attackers.emplace_back([&, pause, once = std::move(once)] {
      AsAnotherMachine();
      while (!stop) {
        const int fd = AttackSocket(port);
        if (fd >= 0) {
          once(fd);
          ::close(fd);
        }
        ++attacks;
        std::this_thread::sleep_for(pause);
      }
    });
  };
  auto post = [&](const std::string& path, const std::string& more) {
    return "POST " + target + path + " HTTP/1.1\r\n" + head +
           "Content-Type: application/json\r\n" + more;
  };
  auto with_body = [&](const std::string& path, const std::string& body) {
    return post(path, "Content-Length: " + std::to_string(body.size()) +
                          "\r\n\r\n" + body);
  };
  using std::chrono::milliseconds;
  // Long polls whose clients vanish as soon as they asked.
  const std::string poll = with_body("/claim", R"({"max":10,"wait_ms":30000})");
  each("polls", milliseconds(2), [&](int fd) { (void)SendAll(fd, poll); });
  // A flood of connections, opened and closed, about a thousand a second.
  each("flood", milliseconds(1), [](int) {});
  // Bodies announced larger than --max-body (the server answers 413 before
  // reading them).
  const std::string oversized =
      post("/messages", "Content-Length: 4000000000\r\n\r\n{\"messages\":[");
  each("oversized", milliseconds(10), [&](int fd) {
    if (SendAll(fd, oversized)) Drain(fd);
  });
  // An endless chunked body, 64 KiB a chunk, until the server stops it; at
  // about 13 MB/s, a fast client on a network (at loopback speed the
  // attacker alone takes a core of a two-core machine).
  const std::string chunked =
      post("/messages", "Transfer-Encoding: chunked\r\n\r\n");
  const std::string chunk = "10000\r\n" + std::string(0x10000, ' ') + "\r\n";
  each("chunked", milliseconds(50), [&](int fd) {
    bool ok = SendAll(fd, chunked);
    while (ok && !stop) {
      ok = SendAll(fd, chunk);
      std::this_thread::sleep_for(milliseconds(5));
    }
    Drain(fd);
  });
  // JSON nested far deeper than the server parses.
  const std::string nested = with_body(
      "/messages", std::string(100000, '[') + std::string(100000, ']'));
  each("nested", milliseconds(20), [&](int fd) {
    if (SendAll(fd, nested)) {
      char buf[512];
      (void)::recv(fd, buf, sizeof buf, 0);
    }
  });
  std::atomic<long> fds_peak{r.fds_before}, rss_peak{r.rss_before_kib};
  std::thread sampler([&] {
    while (!stop) {
      fds_peak = std::max(fds_peak.load(), OpenFds(sys.pid()));
      rss_peak = std::max(rss_peak.load(), RssKib(sys.pid()));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  // The attack gets going (300 slow connections open) before measuring.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  s = round_trips(attacked);
  stop = true;
  for (auto& t : attackers) t.join();
  sampler.join();
  attacked_sys.Drop(theirs);
  if (!s.ok()) return s.WithContext("under attack");
  r.base_p50_us = Percentile(base, 0.5);
  r.base_p99_us = Percentile(base, 0.99);
  r.p50_us = Percentile(attacked, 0.5);
  r.p99_us = Percentile(attacked, 0.99);
  r.fds_peak = fds_peak;
  r.rss_after_kib = rss_peak;
  r.attacks = attacks;
  r.messages = r.sent;
  r.seconds = 1;  // not a rate: the row shows latencies
  auto left = (*conn)->Left();
  if (!left.ok()) return left.status();
  r.left = *left;
  return r;
}

// Lets this process hold `want` descriptors if the hard limit allows.
void RaiseFileLimit(long want) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  rlim_t target = std::min<rlim_t>(rl.rlim_max, static_cast<rlim_t>(want));
  if (rl.rlim_cur < target) {
    rl.rlim_cur = target;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
}

Result<int> PortOf(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) {
    return Status::InvalidArgument(
        fmt::format("--server '{}': expected http://127.0.0.1:PORT", url));
  }
  std::string rest = url.substr(kScheme.size());
  rest = rest.substr(0, rest.find('/'));
  auto colon = rest.rfind(':');
  std::string host = rest.substr(0, colon);
  if (host != "127.0.0.1" && host != "localhost") {
    return Status::InvalidArgument(fmt::format(
        "--server '{}': the benchmark runs over loopback (127.0.0.1)", url));
  }
  int port = colon == std::string::npos
                 ? 80
                 : std::atoi(rest.substr(colon + 1).c_str());
  if (port <= 0 || port > 65535) {
    return Status::InvalidArgument(fmt::format("--server '{}': bad port", url));
  }
  return port;
}

}  // namespace

int RunServerBench(ServerBenchConfig c) {
  wire::Printer out(c.json);
  const std::vector<std::string> all = {"http-send-batch", "http-mixed",
                                        "http-workers", "http-wake",
                                        "http-idle"};
  if (c.workloads.empty() || std::find(c.workloads.begin(), c.workloads.end(),
                                       "all") != c.workloads.end()) {
    c.workloads = all;
  }
  for (const auto& w : c.workloads) {
    // http-attack is run only when named: it is a stress, not a rate.
    if (std::find(all.begin(), all.end(), w) == all.end() &&
        w != "http-attack") {
      return out.Fail(Status::InvalidArgument(fmt::format(
          "unknown workload '{}' with --server: choose from http-send-batch, "
          "http-mixed, http-workers, http-wake, http-idle, all, http-attack",
          w)));
    }
  }
  if (!c.attack_url.empty() && std::find(c.workloads.begin(), c.workloads.end(),
                                         "http-attack") == c.workloads.end()) {
    return out.Fail(Status::InvalidArgument(
        "--attack-server is a control for --workload http-attack"));
  }
  for (const auto& a : c.attacks) {
    if (std::find(std::begin(kAttacks), std::end(kAttacks), a) ==
        std::end(kAttacks)) {
      return out.Fail(Status::InvalidArgument(fmt::format(
          "unknown attack '{}': choose from slowloris, polls, flood, "
          "oversized, chunked, nested",
          a)));
    }
  }
  if (c.runs < 1 || c.runs > 100 || c.batch < 1 || c.batch > 1000 ||
      c.claim_max < 1 || c.claim_max > 1000 || c.producers < 1 ||
      c.consumers < 1 || c.connections < 1 || c.messages < 0 ||
      c.wake_samples < 1 || c.idle_connections < 1) {
    return out.Fail(Status::InvalidArgument(
        "bench --server: --runs 1..100, --batch 1..1000, --claim-max "
        "1..1000, --producers/--consumers/--connections/--wake-samples/"
        "--idle-connections >= 1"));
  }
  auto port = PortOf(c.url);
  if (!port.ok()) return out.Fail(port.status());
  auto duration = wire::ParseDuration(c.duration);
  if (!duration.ok()) return out.Fail(duration.status());
  // Each idle connection is a descriptor here (and one in the server,
  // which raises its own soft limit to its hard limit at start).
  RaiseFileLimit(c.idle_connections + 1024);

  char tmpl[] = "/tmp/sqlq-server-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    return out.Fail(Status::Unavailable("cannot create a temp directory"));
  }
  const std::string tmp = tmpl;
  double fsync_rate = MeasureFsyncRate(tmp, 1.0);

  // beanstalkd first, so that sqlq's row can carry the ratio.
  std::vector<std::unique_ptr<System>> systems;
  int code = 0;
  if (c.beanstalkd) {
    auto b = std::make_unique<BeanstalkSystem>();
    Status s = b->Start(c.beanstalkd_bin, tmp);
    if (!s.ok()) {
      code = out.Fail(s.WithContext("--beanstalkd"));
    } else {
      systems.push_back(std::move(b));
    }
  }
  systems.push_back(std::make_unique<HttpSystem>(*port, c.token, c.server_pid));
  std::unique_ptr<System> decoy;
  if (!c.attack_url.empty()) {
    auto decoy_port = PortOf(c.attack_url);
    if (!decoy_port.ok()) {
      code = out.Fail(decoy_port.status().WithContext("--attack-server"));
    } else if (*decoy_port == *port) {
      code = out.Fail(Status::InvalidArgument(
          "--attack-server: a control needs a server other than --server"));
    } else {
      decoy = std::make_unique<HttpSystem>(*decoy_port, c.token, 0);
    }
  }
  if (c.sqs) {
    systems.push_back(
        std::make_unique<SqsSystem>(*port, c.token, c.sqs_key, c.server_pid));
  }
  if (code == 0) {
    out.Say(
        {{"bench", "environment"},
         {"server", c.url},
         {"server_pid", c.server_pid},
         {"beanstalkd",
          c.beanstalkd ? "-b DIR -f 0 (fsync every write)" : "not run"},
         {"fsync_per_s", std::lround(fsync_rate)},
         {"fsync_dir", tmp},
         {"cores", std::thread::hardware_concurrency()},
         {"runs", c.runs},
         {"attack_server", c.attack_url.empty() ? c.url : c.attack_url}},
        fmt::format(
            "server {}{}; beanstalkd {}; fsync rate {:.0f}/s in {}; "
            "{} cores; median of {} runs",
            c.url,
            c.attack_url.empty()
                ? ""
                : fmt::format(" (attackers at {}: a control)", c.attack_url),
            c.beanstalkd ? "binlog on, -f 0 (fsync every write)" : "not run",
            fsync_rate, tmp, std::thread::hardware_concurrency(), c.runs));
    out.Columns({"workload", "system", "msgs_per_s", "vs_beanstalkd",
                 "vs_native", "p50_us", "p99_us", "cpu_us_per_req",
                 "rss_before_kib", "rss_after_kib", "bytes_per_conn", "runs"});
  }
  for (const auto& w : c.workloads) {
    if (code != 0) break;
    // Each system's runs, taken in turn (run 1 of each, then run 2 of
    // each, ...), so that a machine that speeds up or slows down over the
    // workload does not favour the system measured first.
    struct Runs {
      std::vector<double> rates, p50, p99, total50, total99, base50, base99,
          cpu;
      RunResult last;
    };
    std::vector<Runs> runs_of(systems.size());
    const int runs = w == "http-idle" ? 1 : c.runs;
    for (int run = 0; run < runs && code == 0; ++run) {
      for (std::size_t k = 0; k < systems.size() && code == 0; ++k) {
        System& sys = *systems[k];
        // Idle connections cost the same whatever they would speak; the
        // attack is on sqlq's own server.
        if (w == "http-idle" && sys.name() == "sqs") continue;
        if (w == "http-attack" && sys.name() != "sqlq") continue;
        Runs& got = runs_of[k];
        const std::string label = sys.name() + " " + w;
        std::string queue =
            fmt::format("bench_{}_{}_{}", getpid(), w.substr(5), run);
        for (char& ch : queue) {
          if (ch == '-') ch = '_';
        }
        Result<RunResult> r = Status::Internal("unknown workload");
        const double cpu_before = CpuSeconds(sys.pid());
        const long requests_before = g_requests.load();
        if (w == "http-idle") {
          r = RunIdle(sys, c);
        } else {
          Status created = sys.Create(queue);
          if (!created.ok()) {
            r = created;
          } else if (w == "http-send-batch") {
            r = RunSendBatch(sys, queue, c);
          } else if (w == "http-mixed") {
            r = RunMixed(sys, queue, c, *duration);
          } else if (w == "http-workers") {
            r = RunWorkers(sys, queue, c, *duration);
          } else if (w == "http-attack") {
            r = RunAttack(sys, decoy ? *decoy : sys, queue, c);
          } else {
            r = RunWake(sys, queue, c);
          }
          if (r.ok()) {
            Status counted = CheckCounts(*r, label);
            if (!counted.ok()) r = counted;
          }
          const double cpu_after = CpuSeconds(sys.pid());
          const long requests = g_requests.load() - requests_before;
          if (r.ok() && cpu_before >= 0 && cpu_after >= 0 && requests > 0) {
            r->cpu_us_per_req =
                1e6 * (cpu_after - cpu_before) / static_cast<double>(requests);
          }
          sys.Drop(queue);
        }
        if (!r.ok()) {
          code = out.Fail(r.status().WithContext("bench " + label));
          break;
        }
        got.rates.push_back(r->rate());
        if (r->cpu_us_per_req >= 0) got.cpu.push_back(r->cpu_us_per_req);
        if (r->p50_us >= 0) {
          got.p50.push_back(r->p50_us);
          got.p99.push_back(r->p99_us);
        }
        if (r->total_p50_us >= 0) {
          got.total50.push_back(r->total_p50_us);
          got.total99.push_back(r->total_p99_us);
        }
        got.last = *r;
        if (w == "http-attack") {
          got.base50.push_back(r->base_p50_us);
          got.base99.push_back(r->base_p99_us);
        }
      }
    }
    if (code != 0) break;
    std::map<std::string, double> medians;
    for (std::size_t k = 0; k < systems.size(); ++k) {
      if (!runs_of[k].rates.empty()) {
        medians[systems[k]->name()] = Median(runs_of[k].rates);
      }
    }
    for (std::size_t k = 0; k < systems.size(); ++k) {
      const System& sys = *systems[k];
      const Runs& got = runs_of[k];
      if (got.rates.empty()) continue;
      const RunResult& last = got.last;
      Json row = {{"bench", w},
                  {"workload", w},
                  {"system", sys.name()},
                  {"runs", got.rates.size()}};
      if (w == "http-idle") {
        row["connections"] = last.held;
        row["served_while_held"] = last.served_while_held;
        if (last.rss_before_kib >= 0 && last.rss_after_kib >= 0) {
          row["rss_before_kib"] = last.rss_before_kib;
          row["rss_after_kib"] = last.rss_after_kib;
          row["bytes_per_conn"] = std::lround(
              1024.0 *
              static_cast<double>(last.rss_after_kib - last.rss_before_kib) /
              static_cast<double>(std::max(1L, last.held)));
        }
      } else if (w == "http-attack") {
        row["unattacked_p50_us"] = std::lround(Median(got.base50));
        row["unattacked_p99_us"] = std::lround(Median(got.base99));
        row["p50_us"] = std::lround(Median(got.p50));
        row["p99_us"] = std::lround(Median(got.p99));
        row["p99_ratio"] =
            std::round(100 * Median(got.p99) / Median(got.base99)) / 100;
        row["attacker_connections"] = last.attacks;
        if (last.fds_before >= 0) {
          row["fds_before"] = last.fds_before;
          row["fds_peak"] = last.fds_peak;
          row["rss_before_kib"] = last.rss_before_kib;
          row["rss_after_kib"] = last.rss_after_kib;
        }
        row["sent"] = last.sent;
        row["acked"] = last.acked;
        row["left"] = last.left;
      } else {
        AddRates(row, got.rates);
        AddLatencies(row, got.p50, got.p99);
        if (!got.total50.empty()) {
          row["send_to_claim_p50_us"] = std::lround(Median(got.total50));
          row["send_to_claim_p99_us"] = std::lround(Median(got.total99));
        }
        if (!got.cpu.empty()) {
          row["cpu_us_per_req"] = std::round(10 * Median(got.cpu)) / 10;
        }
        row["sent"] = last.sent;
        row["acked"] = last.acked;
        row["left"] = last.left;
      }
      if (sys.name() == "sqs" && medians["sqlq"] > 0 && w != "http-idle" &&
          w != "http-wake") {
        // The SQS endpoint's rate over the native API's, same runs.
        row["vs_native"] =
            std::round(100 * medians["sqs"] / medians["sqlq"]) / 100;
      }
      if (sys.name() == "sqlq" && medians["beanstalkd"] > 0 &&
          w != "http-idle" && w != "http-wake") {
        // sqlq's rate over beanstalkd's, same runs, same machine.
        row["vs_beanstalkd"] =
            std::round(100 * medians["sqlq"] / medians["beanstalkd"]) / 100;
      }
      out.Row(row);
      if (c.json) std::cout.flush();
    }
  }
  out.Flush();
  systems.clear();  // stops beanstalkd
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);
  return code;
}

}  // namespace sqlq::bench
