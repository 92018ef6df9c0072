#include "server/server.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "server/api.h"
#include "server/auth.h"
#include "server/claim_reply.h"
#include "server/config.h"
#include "server/http_request.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/queue_cache.h"
#include "server/sqs.h"
#include "server/tls.h"
#include "server/trace.h"
#include "sqlq/store.h"

namespace sqlq::server {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

namespace {

class Server;
class LongPoll;

// The signals the server handles: SIGTERM and SIGINT shut it down, SIGHUP
// reads the token file again.
sigset_t HandledSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, sig);
  return set;
}

// The first read of an idle connection: enough for a small request whole.
constexpr std::size_t kIdleReadBytes = 512;
// The read size once a request's body is coming: a 200 kB body arrives in
// four reads rather than four hundred of the idle size, each of which would
// also re-arm the connection's timer and its poll registration.
constexpr std::size_t kBodyReadBytes = 64 << 10;
// Bodies from this size on are handed back to the system after their
// request (malloc_trim).
constexpr std::size_t kLargeBodyBytes = 1 << 20;
// Pipelined bytes held behind a parked claim before it is answered early.
constexpr std::size_t kMaxPipelinedBytes = 64 << 10;

// A client's connection, as the server and parked claims see it: plain
// HTTP or HTTPS (Session<Stream>).
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  virtual ~Connection() = default;
  // Writes the reply to the request being handled and goes on reading.
  // Runs on the connection's strand.
  virtual void Send(Reply reply) = 0;
  // Server shutdown: close now when idle, after the reply when busy.
  virtual void Shutdown() = 0;
  // While a claim is parked, reads from the socket to notice a client that
  // goes away, so that its claim is released instead of taking a message.
  virtual void WatchWhileParked(std::weak_ptr<LongPoll> lp) = 0;
  virtual asio::any_io_executor executor() = 0;
};

using TlsStream = beast::ssl_stream<beast::tcp_stream>;

template <class Stream>
class Session final : public Connection {
 public:
  // `tls`: the server's TLS context, for a TlsStream.
  Session(tcp::socket socket, Server& server, ssl::context* tls);
  ~Session() override;

  // Handshakes first over TLS.
  void Start(bool reject);
  void Send(Reply reply) override;
  void Shutdown() override;
  void WatchWhileParked(std::weak_ptr<LongPoll> lp) override;
  asio::any_io_executor executor() override { return stream_.get_executor(); }

 private:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;
  std::shared_ptr<Session> Self() {
    return std::static_pointer_cast<Session>(shared_from_this());
  }
  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }
  void Begin(bool reject);
  void Watch();
  void ReadIdle();
  void ReadHeader();
  void OnHeader(beast::error_code ec);
  // Makes room in the read buffer for a body on its way.
  void ReserveForBody();
  void OnRequest(beast::error_code ec);
  void ReadFailed(beast::error_code ec);
  void Dispatch();
  void Close();

  Server& server_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<RequestParser> parser_;
  std::shared_ptr<http::response<http::string_body>> response_;
  SteadyClock::time_point started_;
  bool keep_alive_ = true;
  bool busy_ = false;  // a request is being handled
  bool closed_ = false;
  bool watching_ = false;  // WatchWhileParked's read is outstanding
  bool resume_after_watch_ = false;
  std::weak_ptr<LongPoll> parked_;
  std::string peer_;     // address:port, for logs
  std::string address_;  // the client's IP address
  // Of the request being handled, for its reply's CORS headers.
  std::string host_;
  std::string origin_;
  // SqsApi::Wants this request (decided from its head).
  bool sqs_ = false;
  // The request is a HEAD: its reply goes without a body.
  bool head_ = false;
  // The trace id it carries (TraceIdOf), for its log lines.
  std::string trace_id_;
  std::int64_t replies_ = 0;  // on this connection, for the debug log
};

class LongPoll : public std::enable_shared_from_this<LongPoll> {
 public:
  LongPoll(Server& server, std::shared_ptr<Connection> session, ParkedClaim c,
           std::string route)
      : server_(server),
        session_(std::move(session)),
        claim_(std::move(c)),
        route_(std::move(route)),
        timer_(session_->executor()) {
    claim_.options.wait = Duration(0);
  }
  // On a database thread, before the claim is parked: a claim makes its
  // first look now, before any subscription, and when it finds messages
  // (or fails) that is its reply: it is never parked. `then` gets that
  // reply, or nullopt for a claim that must wait and for a wait that is
  // not a claim (`look`), on the thread that committed the claim
  // (WorkQueue::ClaimThen).
  void TryAtOnce(std::function<void(std::optional<Reply>)> then);
  // On a database thread, once parked: subscribes, then makes the first
  // look (after TryAtOnce, the read that follows a claim that found
  // nothing).
  void Begin();
  // On the strand: shutdown answers with an empty list.
  void Stop();
  void PostStop() {
    OnStrand([](LongPoll& lp) { lp.Stop(); });
  }
  const std::string& token() const { return claim_.token; }

 private:
  // `signalled`: a send's wake-up, rather than the timer. A timer wake-up
  // peeks (a read) before it claims (a write), so that idle parked claims
  // cost reads, not write transactions.
  void Wake(bool signalled = true);
  void Look(bool peek_first);
  // After a claim that found nothing: when to look again (a read), then on
  // the strand, the wait for it.
  void AfterEmptyClaim(ClaimNote note);
  void AfterLook(const Result<SteadyClock::time_point>& next);
  void Finish(Reply reply);
  // The jobs this claim started, in /metrics.
  void Measure(const std::vector<ClaimedMessage>& started);
  // The job this claim finished (its ack, once committed), in /metrics.
  void Acked(const std::string& receipt);
  // The reply that ends the claim (ParkedClaim::answer).
  Reply Answer(const Result<std::vector<ClaimedMessage>>& result,
               const ClaimNote& note = {}) {
    if (claim_.answer) return claim_.answer(result, note);
    if (!result.ok()) return StatusReply(result.status());
    Measure(*result);
    return result->empty()
               ? EmptyClaimReply(note)
               : ClaimReply(claim_.queue, claim_.options, *result, note);
  }
  void OnStrand(std::function<void(LongPoll&)> fn) {
    asio::post(timer_.get_executor(),
               [self = shared_from_this(), fn = std::move(fn)] { fn(*self); });
  }

  Server& server_;
  std::shared_ptr<Connection> session_;
  ParkedClaim claim_;
  // What the last look said (a limit that held it back), for the empty
  // reply at the end of the wait.
  ClaimNote note_;
  std::string route_;
  asio::steady_timer timer_;
  std::unique_ptr<ReadySubscription> sub_;
  std::unique_ptr<JobEndWatch> ends_;  // a look's (ParkedClaim::look)
  // Strand state. The subscription is touched off the strand only while a
  // look is in flight.
  bool in_flight_ = true;
  bool pending_ = false;
  bool stop_ = false;
  bool pending_signal_ = false;
  bool done_ = false;
  // TryAtOnce claimed and found nothing: its note, until Begin.
  std::optional<ClaimNote> tried_;
  std::uint64_t gen_ = 0;
  // A look's wait between looks (ParkedClaim::look), as a wait for a
  // result in the library looks: doubled each time up to kResultLookEvery.
  Duration look_every_ = kResultFirstLook;
};

// The dashboard's history: a point every --history-step, an hour of them
// (at most 3600).
Overview::Options HistoryOptions(const ServerConfig& config) {
  Overview::Options o;
  o.step = config.history_step;
  o.points = static_cast<std::size_t>(std::clamp<std::int64_t>(
      std::chrono::hours(1) / config.history_step, 1, 3600));
  return o;
}

class Server {
 public:
  Server(const ServerConfig& config, Store& store, Auth& auth,
         ssl::context* tls)
      : config_(config),
        store_(store),
        auth_(auth),
        metrics_({.version = config.version, .engine = config.engine}),
        auth_failures_(config.limits.auth_failure_burst,
                       std::chrono::duration_cast<std::chrono::milliseconds>(
                           config.limits.auth_failure_refill)),
        queues_(store),
        api_(store, config.limits, auth, metrics_,
             {.read = [this] { return Gauges(); },
              .shutting_down = [this] { return stopping_.load(); }},
             config.metrics_public, HistoryOptions(config),
             Api::Shared{auth_failures_, queues_}),
        sqs_(store, config.limits, auth, auth_failures_, queues_),
        db_pool_(static_cast<std::size_t>(config.db_threads)),
        acceptor_(ioc_),
        signals_(asio::make_strand(ioc_)),
        drain_timer_(ioc_),
        tls_(tls),
        work_(asio::make_work_guard(ioc_)) {
    // What follows the claims made without a thread waiting for them
    // (LongPoll::TryAtOnce) when it reads or writes the store, and the
    // lead of their groups when a leader leaves them queued, runs on the
    // database threads.
    store_.SetRunner([this](std::function<void()> fn) {
      asio::post(db_pool_, std::move(fn));
    });
  }
  ~Server() {
    // Nothing of the store's is left to run here.
    db_pool_.join();
    store_.SetRunner(nullptr);
  }

  // Serves until shut down; `exit_code` maps a failure to start (the port
  // taken) to the program's exit code.
  int Run(const std::function<int(const Status&)>& exit_code);

  const Limits& limits() const { return config_.limits; }
  bool access_log() const { return config_.access_log; }
  const HttpPolicy& policy() const { return config_.policy; }
  // On a database thread: the request handled by the front door the
  // transport picked from its head (Request::sqs).
  Outcome Handle(const Request& req) {
    return req.sqs ? sqs_.Handle(req) : api_.Handle(req);
  }
  Metrics& metrics() { return metrics_; }
  bool stopping() const { return stopping_; }
  asio::thread_pool& db_pool() { return db_pool_; }
  std::atomic<int>& in_flight() { return in_flight_; }
  std::atomic<std::int64_t>& wakeups() { return wakeups_; }

  void Register(Connection* s, const std::shared_ptr<Connection>& sp) {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_[s] = sp;
  }
  void Unregister(Connection* s) {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.erase(s);
    --connections_;
  }

  // On a database thread: parks a claim, or refuses it (429) when the token
  // has too many parked already.
  void Park(const std::shared_ptr<Connection>& session, ParkedClaim claim,
            const std::string& route) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      int& n = polls_per_token_[claim.token];
      if (n >= config_.limits.max_polls_per_token) {
        const std::string why =
            fmt::format("this token already has {} claims waiting (limit {})",
                        n, config_.limits.max_polls_per_token);
        Reply r = claim.answer ? claim.answer(Status(Code::kBusy, why), {})
                               : ErrorReply(429, "too_many_polls", why);
        r.route = route;
        asio::post(session->executor(),
                   [session, r = std::move(r)] { session->Send(r); });
        return;
      }
      ++n;
    }
    auto lp =
        std::make_shared<LongPoll>(*this, session, std::move(claim), route);
    // A claim that finds messages at once is answered at once: a
    // subscription, a timer and the watch of its connection are for a
    // claim that waits. Counted against the token's limit meanwhile, as
    // its ack is done only within that limit. No thread waits for that
    // claim's commit: its reply is made where it committed.
    lp->TryAtOnce([this, session, lp, route](std::optional<Reply> reply) {
      if (reply) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          ReleasePoll(lp->token());
        }
        reply->route = route;
        asio::post(session->executor(),
                   [session, r = std::move(*reply)]() mutable {
                     session->Send(std::move(r));
                   });
        return;
      }
      // It waits: parked on a database thread (the subscription's first
      // look reads the store).
      asio::post(db_pool_, [this, session, lp] {
        {
          std::lock_guard<std::mutex> lock(mu_);
          parked_.insert(lp);
        }
        ++waiting_;
        lp->Begin();
        asio::post(session->executor(),
                   [session, weak = std::weak_ptr<LongPoll>(lp)] {
                     session->WatchWhileParked(weak);
                   });
        if (stopping_) lp->PostStop();
      });
    });
  }
  void Unpark(const std::shared_ptr<LongPoll>& lp) {
    std::lock_guard<std::mutex> lock(mu_);
    if (parked_.erase(lp) == 0) return;
    --waiting_;
    ReleasePoll(lp->token());
  }
  // Gives back a claim's place in its token's limit of waiting claims;
  // mu_ held.
  void ReleasePoll(const std::string& token) {
    auto it = polls_per_token_.find(token);
    if (--it->second == 0) polls_per_token_.erase(it);
  }

 private:
  Metrics::Gauges Gauges() {
    return {.connections = connections_.load(),
            .waiting_consumers = waiting_.load(),
            .requests_in_flight = in_flight_.load(),
            .claim_wakeups = wakeups_.load(),
            .scheduler_leader = store_.HoldsSchedulerLease() ? 1 : 0};
  }
  void Accept();
  // Reads the signals that have arrived (signals_) and acts on them:
  // SIGHUP reads the token file again (Auth::Reload), SIGTERM and SIGINT
  // begin the shutdown.
  void WaitForSignals();
  void Reload();
  void BeginShutdown(int signal);
  void CheckDrained();

  const ServerConfig& config_;
  Store& store_;
  Auth& auth_;
  Metrics metrics_;
  // The two front doors, side by side, and what they share.
  AuthFailures auth_failures_;
  QueueCache queues_;
  Api api_;
  SqsApi sqs_;
  // Declared before ioc_, so that sessions still held by handlers that
  // ~io_context destroys can unregister.
  std::atomic<bool> stopping_ = false;
  std::atomic<int> connections_ = 0;
  std::atomic<int> in_flight_ = 0;
  std::atomic<int> waiting_ = 0;
  std::atomic<std::int64_t> wakeups_ = 0;
  std::mutex mu_;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> sessions_;
  std::unordered_set<std::shared_ptr<LongPoll>> parked_;
  std::unordered_map<std::string, int> polls_per_token_;
  asio::io_context ioc_;
  asio::thread_pool db_pool_;
  tcp::acceptor acceptor_;
  // A signalfd of HandledSignals(), which every thread blocks: the kernel
  // keeps a signal pending until the server reads it here, whichever thread
  // it was sent to. No handler runs, so nothing depends on which thread
  // takes it (ThreadSanitizer holds a handler back until its thread next
  // enters the runtime, which an idle thread may never do). On a strand:
  // the shutdown closes it from whichever thread drains last.
  asio::posix::stream_descriptor signals_;
  asio::steady_timer drain_timer_;
  ssl::context* tls_;  // nullptr: plain HTTP
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>>
      work_;
  SteadyClock::time_point shutdown_deadline_;

  template <class Stream>
  friend class Session;
};

// ---- Session ----

template <class Stream>
Session<Stream>::Session(tcp::socket socket, Server& server, ssl::context* tls)
    : server_(server), stream_([&]() -> Stream {
        if constexpr (kTls) {
          return Stream(std::move(socket), *tls);
        } else {
          (void)tls;
          return Stream(std::move(socket));
        }
      }()) {
  beast::error_code ec;
  auto ep = lowest().socket().remote_endpoint(ec);
  if (!ec) {
    address_ = ep.address().to_string();
    peer_ = fmt::format("{}:{}", address_, ep.port());
  }
  lowest().socket().set_option(tcp::no_delay(true), ec);
  if (LogEnabled("debug")) {
    Log("debug", "connection_opened", fmt::format("peer={}", peer_));
  }
}

template <class Stream>
Session<Stream>::~Session() {
  if (LogEnabled("debug")) {
    Log("debug", "connection_closed",
        fmt::format("peer={} replies={}", peer_, replies_));
  }
  server_.Unregister(this);
}

template <class Stream>
void Session<Stream>::Start(bool reject) {
  if constexpr (kTls) {
    // The handshake has the time of a request: a client that connects and
    // says nothing cannot hold the connection.
    lowest().expires_after(server_.limits().request_timeout);
    stream_.async_handshake(
        ssl::stream_base::server,
        [self = Self(), reject](beast::error_code ec) {
          if (ec) {
            Log("info", "tls_handshake_failed",
                fmt::format("peer={} reason={}", self->peer_,
                            Quote(ec.message())));
            self->closed_ = true;
            beast::error_code e;
            self->lowest().socket().close(e);
            return;
          }
          self->Begin(reject);
        });
  } else {
    Begin(reject);
  }
}

template <class Stream>
void Session<Stream>::Begin(bool reject) {
  if (reject) {
    keep_alive_ = false;
    busy_ = true;
    started_ = SteadyClock::now();
    ++server_.in_flight();
    Send(ErrorReply(503, "too_many_connections",
                    fmt::format("the server holds its limit of {} connections",
                                server_.limits().max_connections)));
    return;
  }
  ReadIdle();
}

template <class Stream>
void Session<Stream>::ReadIdle() {
  if (closed_) return;
  if (buffer_.size() > 0) return ReadHeader();  // pipelined request
  // An idle keep-alive connection keeps only a small read buffer (the
  // request's grows as it arrives): 10,000 idle connections must cost
  // little (docs/benchmarks.md, http-idle).
  parser_.reset();
  buffer_.shrink_to_fit();
  lowest().expires_after(server_.limits().idle_timeout);
  stream_.async_read_some(buffer_.prepare(kIdleReadBytes),
                          [self = Self()](beast::error_code ec, std::size_t n) {
                            if (ec) return self->ReadFailed(ec);
                            self->buffer_.commit(n);
                            self->ReadHeader();
                          });
}

template <class Stream>
void Session<Stream>::ReadHeader() {
  host_.clear();
  origin_.clear();
  trace_id_.clear();
  head_ = false;
  parser_.emplace();
  ConfigureParser(*parser_, server_.limits());
  // From the first byte, the whole request must arrive in this time: a
  // client that trickles bytes cannot hold the connection forever.
  lowest().expires_after(server_.limits().request_timeout);
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = Self()](beast::error_code ec, std::size_t) {
                            self->OnHeader(ec);
                          });
}

template <class Stream>
void Session<Stream>::OnHeader(beast::error_code ec) {
  if (ec) return ReadFailed(ec);
  started_ = SteadyClock::now();
  auto& req = parser_->get();
  const ParsedHead parsed = ReadHead(*parser_);
  const RequestHead& head = parsed.head;
  sqs_ = parsed.sqs;
  head_ = req.method() == http::verb::head;
  host_ = std::string(head.host);
  origin_ = std::string(head.origin);
  trace_id_ = TraceIdOf(req["traceparent"], req["X-Amzn-Trace-Id"]);
  if (auto refused = CheckRequest(head, server_.policy())) {
    Log("info", "request_refused",
        fmt::format("peer={} status={} code={}", peer_, refused->status,
                    refused->json["error"].is_object()
                        ? refused->json["error"].value("code", "")
                        : std::string("preflight")));
    // The body, if any, is left unread: answer, then close.
    keep_alive_ = refused->status == 204 && !head.has_body &&
                  req.keep_alive() && !server_.stopping();
    busy_ = true;
    ++server_.in_flight();
    refused->route = "refused";
    return Send(std::move(*refused));
  }
  if (beast::iequals(req[http::field::expect], "100-continue")) {
    auto cont = std::make_shared<http::response<http::empty_body>>(
        http::status::continue_, 11);
    http::async_write(stream_, *cont,
                      [self = Self(), cont](beast::error_code e, std::size_t) {
                        if (e) return self->ReadFailed(e);
                        self->ReserveForBody();
                        http::async_read(
                            self->stream_, self->buffer_, *self->parser_,
                            [self](beast::error_code e2, std::size_t) {
                              self->OnRequest(e2);
                            });
                      });
    return;
  }
  ReserveForBody();
  http::async_read(stream_, buffer_, *parser_,
                   [self = Self()](beast::error_code e, std::size_t) {
                     self->OnRequest(e);
                   });
}

template <class Stream>
void Session<Stream>::ReserveForBody() {
  std::uint64_t want = 0;
  if (parser_->chunked()) {
    want = kBodyReadBytes;
  } else if (const auto length = parser_->content_length()) {
    want = std::min<std::uint64_t>(kBodyReadBytes, *length);
  }
  // Beast reads as much as the buffer has room for (at least 512 bytes).
  if (buffer_.capacity() - buffer_.size() < want) {
    buffer_.reserve(buffer_.size() + static_cast<std::size_t>(want));
  }
}

template <class Stream>
void Session<Stream>::OnRequest(beast::error_code ec) {
  if (ec) return ReadFailed(ec);
  lowest().expires_never();
  Dispatch();
}

template <class Stream>
void Session<Stream>::ReadFailed(beast::error_code ec) {
  if (closed_) return;
  if (ec == http::error::end_of_stream || ec == asio::error::eof ||
      ec == asio::error::operation_aborted ||
      ec == asio::error::connection_reset) {
    return Close();
  }
  if (ec == beast::error::timeout) {
    // The stream closed the socket already.
    Log("info", "client_timeout",
        fmt::format("peer={} reading={}", peer_,
                    parser_ && parser_->got_some() ? "request" : "idle"));
    closed_ = true;
    return;
  }
  std::optional<Reply> error = ReplyToReadError(ec, server_.limits());
  if (!error) return Close();
  Reply r = std::move(*error);
  Log("info", "bad_request",
      fmt::format("peer={} status={} reason={}", peer_, r.status,
                  Quote(ec.message())));
  // The stream is out of step with the client: answer, then close.
  keep_alive_ = false;
  busy_ = true;
  started_ = SteadyClock::now();
  ++server_.in_flight();
  Send(std::move(r));
}

template <class Stream>
void Session<Stream>::Dispatch() {
  auto& msg = parser_->get();
  busy_ = true;
  ++server_.in_flight();
  keep_alive_ = msg.keep_alive() && !server_.stopping();
  if (server_.stopping()) {
    Reply r = ErrorReply(503, "shutting_down", "the server is shutting down");
    return Send(std::move(r));
  }
  Request req = MakeRequest(*parser_, sqs_, address_);
  asio::post(server_.db_pool(), [self = Self(),
                                 req = std::move(req)]() mutable {
    const bool large = req.body.size() > kLargeBodyBytes;
    Outcome out = self->server_.Handle(req);
    if (large) {
      // Give the memory of a large body and its parse back to the system
      // now, not when the allocator next feels like it: a burst of large
      // bodies must not leave the server holding their peak.
      std::string().swap(req.body);
      malloc_trim(0);
    }
    if (out.park) {
      self->server_.Park(self, std::move(*out.park), out.reply.route);
      return;
    }
    asio::post(self->executor(), [self, r = std::move(out.reply)]() mutable {
      self->Send(std::move(r));
    });
  });
}

template <class Stream>
void Session<Stream>::Send(Reply reply) {
  if (closed_) {
    --server_.in_flight();
    return;
  }
  auto res = std::make_shared<http::response<http::string_body>>(
      static_cast<http::status>(reply.status), 11);
  res->set(http::field::server, "sqlq");
  if (!reply.content_type.empty()) {
    res->set(http::field::content_type, reply.content_type);
  }
  res->set("X-Content-Type-Options", "nosniff");
  AddCorsHeaders({.host = host_, .origin = origin_}, server_.policy(), reply);
  for (auto& [name, value] : reply.headers) res->set(name, value);
  if (reply.status == 401) {
    res->set(http::field::www_authenticate, "Bearer realm=\"sqlq\"");
  }
  if (server_.stopping()) keep_alive_ = false;
  res->keep_alive(keep_alive_);
  res->body() = reply.text.empty() ? reply.Body() : std::move(reply.text);
  res->prepare_payload();
  response_ = res;
  ++replies_;
  const unsigned status = reply.status;
  std::string route = std::move(reply.route);
  const double seconds =
      std::chrono::duration<double>(SteadyClock::now() - started_).count();
  const std::string trace = trace_id_.empty() ? "" : " trace_id=" + trace_id_;
  if (status >= 500) {
    Log("warn", "request_failed",
        fmt::format("peer={} route={} status={} duration_ms={:.3f}{} body={}",
                    peer_, Quote(route), status, seconds * 1000, trace,
                    Quote(res->body())));
  } else if (server_.access_log() && LogEnabled("info")) {
    // The route's template, never the path or query, nor a header (but
    // the trace id): no token, receipt or body reaches the log.
    Log("info", "request",
        fmt::format("peer={} route={} status={} duration_ms={:.3f}{}", peer_,
                    Quote(route), status, seconds * 1000, trace));
  }
  if (head_) {
    // The reply to HEAD: the headers a GET gets, Content-Length included,
    // without the body (RFC 9110, 9.3.2).
    const std::size_t length = res->body().size();
    res->body().clear();
    res->content_length(length);
  }
  // Observed when the reply is ready, before it is written: a client that
  // reads the reply and then scrapes /metrics sees its own request counted.
  server_.metrics().ObserveRequest(route, status, seconds);
  lowest().expires_after(server_.limits().request_timeout);
  http::async_write(
      stream_, *res, [self = Self()](beast::error_code ec, std::size_t) {
        self->response_.reset();
        self->busy_ = false;
        --self->server_.in_flight();
        if (ec || !self->keep_alive_ || self->server_.stopping()) {
          return self->Close();
        }
        if (self->watching_) {
          // Stop watching; the watch's handler goes on reading.
          self->resume_after_watch_ = true;
          beast::error_code e;
          self->lowest().socket().cancel(e);
          return;
        }
        self->ReadIdle();
      });
}

template <class Stream>
void Session<Stream>::WatchWhileParked(std::weak_ptr<LongPoll> lp) {
  if (closed_ || !busy_ || watching_) return;
  parked_ = std::move(lp);
  Watch();
}

template <class Stream>
void Session<Stream>::Watch() {
  watching_ = true;
  lowest().expires_never();
  stream_.async_read_some(
      buffer_.prepare(4096),
      [self = Self()](beast::error_code ec, std::size_t n) {
        self->watching_ = false;
        if (!ec) self->buffer_.commit(n);
        if (ec == asio::error::eof || ec == ssl::error::stream_truncated) {
          // The client closed its side only (a worker
          // that stops; over TLS, its FIN may come
          // without a close_notify): the claim ends
          // now, and its
          // reply goes out all the same, with whatever
          // it had claimed, so that nothing stays
          // leased to a client that never saw it. The
          // connection closes after it.
          if (self->resume_after_watch_) {
            return self->Close();  // it went out
          }
          self->keep_alive_ = false;
          if (auto parked = self->parked_.lock()) parked->PostStop();
          return;
        }
        if (ec && ec != asio::error::operation_aborted) {
          // The client went away: release its claim,
          // unanswered.
          if (auto parked = self->parked_.lock()) parked->PostStop();
          return self->Close();
        }
        if (self->resume_after_watch_) {
          self->resume_after_watch_ = false;
          return self->ReadIdle();
        }
        if (ec || self->closed_) return;
        // Bytes of pipelined requests came: kept, to be
        // read in order once the claim is answered. Keep
        // watching, so that a client that goes away after
        // them is still noticed. Past a bound, the claim is
        // answered now (as if its wait ran out) rather than
        // buffer more.
        if (self->buffer_.size() > kMaxPipelinedBytes) {
          if (auto parked = self->parked_.lock()) parked->PostStop();
          return;
        }
        self->Watch();
      });
}

template <class Stream>
void Session<Stream>::Shutdown() {
  if (!busy_) Close();
}

template <class Stream>
void Session<Stream>::Close() {
  if (closed_) return;
  closed_ = true;
  beast::error_code ec;
  lowest().socket().shutdown(tcp::socket::shutdown_send, ec);
  lowest().close();
}

// ---- LongPoll ----

void LongPoll::Measure(const std::vector<ClaimedMessage>& started) {
  server_.metrics().JobsStarted(claim_.queue.name(), started);
}

void LongPoll::Acked(const std::string& receipt) {
  if (receipt.empty()) return;
  server_.metrics().JobFinished(claim_.queue.name(), receipt, "completed");
}

void LongPoll::TryAtOnce(std::function<void(std::optional<Reply>)> then) {
  if (claim_.look) return then(std::nullopt);
  // The receipt it names is acked now, by this look, whatever it finds.
  std::string ack = std::exchange(claim_.ack, {});
  claim_.queue.ClaimThen(
      ack, claim_.options,
      [self = shared_from_this(), ack, then = std::move(then)](
          Result<std::vector<ClaimedMessage>> r, ClaimNote note) {
        self->Acked(r.ok() ? ack : std::string());
        auto finish = [self, then = std::move(then)](
                          const Result<std::vector<ClaimedMessage>>& got,
                          const ClaimNote& got_note) {
          if (!got.ok()) return then(self->Answer(got.status()));
          if (!got->empty()) return then(self->Answer(*got, got_note));
          // Nothing yet. Not shared with the strand before it is parked.
          self->tried_ = got_note;
          then(std::nullopt);
        };
        // The reply is made here, where the claim committed, unless making
        // it may read the store (ClaimThen's callback must not): then on a
        // database thread.
        if (self->claim_.answer ||
            (r.ok() && ClaimReplyReads(self->claim_.options, *r))) {
          return asio::post(self->server_.db_pool(),
                            [finish = std::move(finish), r = std::move(r),
                             note = std::move(note)] { finish(r, note); });
        }
        finish(r, note);
      });
}

void LongPoll::Begin() {
  std::weak_ptr<LongPoll> weak = weak_from_this();
  if (claim_.look) {
    // A job that ends through this server looks again at once.
    auto ex = timer_.get_executor();
    ends_ = claim_.queue.WatchJobEnd(claim_.job, [weak, ex] {
      asio::post(ex, [weak] {
        if (auto self = weak.lock()) self->Wake();
      });
    });
    return Look(false);
  }
  auto ex = timer_.get_executor();
  // Called with the store's wake-up lock held: only post.
  std::atomic<std::int64_t>* wakeups = &server_.wakeups();
  sub_ = claim_.queue.Subscribe([weak, ex, wakeups] {
    ++*wakeups;
    asio::post(ex, [weak] {
      if (auto self = weak.lock()) self->Wake();
    });
  });
  if (!tried_) return Look(false);
  // After TryAtOnce's claim, what the claim of a look does when it finds
  // nothing. Its read comes after the subscription: a send that committed
  // between that claim and the subscription woke nobody, but the read sees
  // its message ready and the claim looks again at once.
  AfterEmptyClaim(*std::exchange(tried_, std::nullopt));
}

void LongPoll::AfterEmptyClaim(ClaimNote note) {
  auto next = claim_.queue.NextLook(&note);
  OnStrand([next = std::move(next), note](LongPoll& lp) mutable {
    lp.note_ = std::move(note);
    lp.AfterLook(next);
  });
}

void LongPoll::Look(bool peek_first) {
  if (claim_.look) {
    const auto now = SteadyClock::now();
    if (auto reply = claim_.look(now >= claim_.deadline)) {
      return OnStrand([reply = std::move(*reply)](LongPoll& lp) mutable {
        lp.Finish(std::move(reply));
      });
    }
    const Result<SteadyClock::time_point> next = now + look_every_;
    look_every_ = std::min(look_every_ * 2, kResultLookEvery);
    return OnStrand([next](LongPoll& lp) { lp.AfterLook(next); });
  }
  if (peek_first) {
    // A failed read claims all the same: the claim reports the error.
    auto next = claim_.queue.NextLook();
    if (next.ok() && *next > SteadyClock::now()) {
      return OnStrand(
          [next = std::move(next)](LongPoll& lp) { lp.AfterLook(next); });
    }
  }
  (void)sub_->TakeSignal();
  // The first look acks the receipt the claim names, if any; its failure
  // ends the claim with that error.
  ClaimNote note;
  const std::string ack = std::exchange(claim_.ack, {});
  auto r = ack.empty() ? claim_.queue.Claim(claim_.options, &note)
                       : claim_.queue.AckAndClaim(ack, claim_.options, &note);
  if (!r.ok()) {
    Status s = r.status();
    return OnStrand([s](LongPoll& lp) { lp.Finish(lp.Answer(s)); });
  }
  Acked(ack);
  if (!r->empty()) {
    Reply reply = Answer(*r, note);
    return OnStrand([reply = std::move(reply)](LongPoll& lp) mutable {
      lp.Finish(std::move(reply));
    });
  }
  AfterEmptyClaim(std::move(note));
}

void LongPoll::AfterLook(const Result<SteadyClock::time_point>& next) {
  in_flight_ = false;
  if (done_) return;
  if (!next.ok()) return Finish(Answer(next.status()));
  if (stop_) return Stop();
  if (pending_) {
    pending_ = false;
    return Wake(std::exchange(pending_signal_, false));
  }
  // A look's last look is its own (it gives the reply at the deadline).
  if (!claim_.look && SteadyClock::now() >= claim_.deadline) {
    return Finish(Answer(std::vector<ClaimedMessage>(), note_));
  }
  // The rule of every waiting claim, the safety net included
  // (WorkQueue::NextLook; docs/semantics.md, "Waiting").
  const std::uint64_t gen = ++gen_;
  timer_.expires_at(std::min(claim_.deadline, *next));
  timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
    if (ec || gen != self->gen_) return;
    self->Wake(false);
  });
}

void LongPoll::Wake(bool signalled) {
  if (done_) return;
  if (in_flight_) {
    pending_ = true;
    pending_signal_ = pending_signal_ || signalled;
    return;
  }
  in_flight_ = true;
  ++gen_;
  timer_.cancel();
  asio::post(server_.db_pool(), [self = shared_from_this(), signalled] {
    self->Look(!signalled);
  });
}

void LongPoll::Stop() {
  stop_ = true;
  if (in_flight_) return;
  // A claim ends with no message; another wait with the reply a client
  // retries on.
  Finish(claim_.look ? ErrorReply(503, "shutting_down",
                                  "the wait ended before its answer came")
                     : Answer(std::vector<ClaimedMessage>()));
}

void LongPoll::Finish(Reply reply) {
  if (done_) return;
  done_ = true;
  ++gen_;
  timer_.cancel();
  // Passes on a wake-up we took no message for.
  sub_.reset();
  ends_.reset();
  server_.Unpark(shared_from_this());
  reply.route = route_;
  session_->Send(std::move(reply));
  session_.reset();
}

// ---- Server ----

void Server::Accept() {
  acceptor_.async_accept(asio::make_strand(ioc_), [this](beast::error_code ec,
                                                         tcp::socket sock) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) {
      return;
    }
    if (ec) {
      // Out of descriptors, most likely: back off instead of spinning.
      Log("warn", "accept_failed",
          fmt::format("reason={}", Quote(ec.message())));
      auto t = std::make_shared<asio::steady_timer>(ioc_);
      t->expires_after(std::chrono::milliseconds(100));
      t->async_wait([this, t](beast::error_code) { Accept(); });
      return;
    }
    const bool reject = connections_.load() >= config_.limits.max_connections;
    ++connections_;
    auto start = [&](auto s) {
      Register(s.get(), s);
      asio::dispatch(s->executor(), [s, reject] { s->Start(reject); });
    };
    if (tls_ != nullptr) {
      start(std::make_shared<Session<TlsStream>>(std::move(sock), *this, tls_));
    } else {
      start(std::make_shared<Session<beast::tcp_stream>>(std::move(sock), *this,
                                                         nullptr));
    }
    Accept();
  });
}

void Server::WaitForSignals() {
  signals_.async_wait(
      asio::posix::descriptor_base::wait_read, [this](beast::error_code ec) {
        if (ec) return;  // closed at the end of the shutdown
        signalfd_siginfo info{};
        while (::read(signals_.native_handle(), &info, sizeof info) ==
               static_cast<ssize_t>(sizeof info)) {
          const int sig = static_cast<int>(info.ssi_signo);
          if (sig == SIGHUP) {
            if (!stopping_) Reload();
          } else {
            BeginShutdown(sig);  // once: a second signal changes nothing
          }
        }
        WaitForSignals();
      });
}

void Server::Reload() {
  if (!auth_.enabled()) {
    Log("info", "tokens_not_reloaded",
        "reason=\"the server runs without --tokens\"");
  } else if (auto counts = auth_.Reload(); counts.ok()) {
    // Connections stay open; each request from now on is checked
    // against the new tokens.
    Log("info", "tokens_reloaded",
        fmt::format("file={} tokens={} keys={}", Quote(config_.tokens_file),
                    counts->tokens, counts->keys));
  } else {
    Log("error", "tokens_reload_failed",
        fmt::format("reason={} kept=\"the tokens in force before\"",
                    Quote(counts.status().message())));
  }
}

void Server::BeginShutdown(int signal) {
  if (stopping_.exchange(true)) return;
  Log("info", "shutdown_started",
      fmt::format("signal={} connections={} waiting_consumers={}", signal,
                  connections_.load(), waiting_.load()));
  beast::error_code ec;
  acceptor_.close(ec);
  std::vector<std::shared_ptr<Connection>> sessions;
  std::vector<std::shared_ptr<LongPoll>> parked;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [p, w] : sessions_) {
      if (auto s = w.lock()) sessions.push_back(std::move(s));
    }
    parked.assign(parked_.begin(), parked_.end());
  }
  for (auto& lp : parked) {
    lp->PostStop();
  }
  for (auto& s : sessions) asio::post(s->executor(), [s] { s->Shutdown(); });
  shutdown_deadline_ = SteadyClock::now() + config_.limits.shutdown_timeout;
  CheckDrained();
}

void Server::CheckDrained() {
  if (connections_.load() == 0 && in_flight_.load() == 0) {
    Log("info", "shutdown_drained");
    asio::post(signals_.get_executor(), [this] { signals_.close(); });
    work_.reset();
    return;
  }
  if (SteadyClock::now() >= shutdown_deadline_) {
    Log("warn", "shutdown_timeout",
        fmt::format("connections={} in_flight={}", connections_.load(),
                    in_flight_.load()));
    asio::post(signals_.get_executor(), [this] { signals_.close(); });
    work_.reset();
    ioc_.stop();
    return;
  }
  drain_timer_.expires_after(std::chrono::milliseconds(10));
  drain_timer_.async_wait([this](beast::error_code) { CheckDrained(); });
}

int Server::Run(const std::function<int(const Status&)>& exit_code) {
  beast::error_code ec;
  auto addr = asio::ip::make_address(config_.bind, ec);
  if (ec) {
    std::cerr << "sqlq serve: --bind '" << config_.bind
              << "' is not an IP address\n";
    return 2;
  }
  tcp::endpoint ep(addr, static_cast<unsigned short>(config_.port));
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec == asio::error::address_in_use) {
    // Another server (or another program) has the port: a matter of
    // waiting or choosing another port, not of the command line.
    std::cerr << "sqlq serve: cannot listen on " << config_.bind << ":"
              << config_.port
              << ": the port is in use by another process (another sqlq "
                 "serve?); stop it, or give another --port (0 picks a free "
                 "one)\n";
    return exit_code(Status::Unavailable("port in use"));
  }
  if (ec == asio::error::access_denied) {
    std::cerr << "sqlq serve: cannot listen on " << config_.bind << ":"
              << config_.port << ": " << ec.message()
              << " (ports below 1024 need privileges)\n";
    return exit_code(Status::PermissionDenied("port not allowed"));
  }
  if (ec) {
    std::cerr << "sqlq serve: cannot listen on " << config_.bind << ":"
              << config_.port << ": " << ec.message() << "\n";
    return 2;
  }
  const unsigned short port = acceptor_.local_endpoint().port();
  // The port file says the server is up: written beside and renamed, so
  // that a reader never sees half a port, and only after the "listening"
  // line is in the log, so that whoever waited for it finds the line.
  const std::string tmp = config_.port_file + ".tmp";
  auto cannot_write = [&](const std::string& why) {
    std::cerr << "sqlq serve: cannot write --port-file '" << config_.port_file
              << "': " << why << "\n";
    return 2;
  };
  if (!config_.port_file.empty()) {
    std::ofstream f(tmp);
    f << port << "\n";
    f.close();
    if (!f) return cannot_write(std::strerror(errno));
  }
  Log("info", "listening",
      fmt::format(
          "addr={} port={} tls={} db={} auth={} io_threads={} db_threads={}",
          config_.bind, port, tls_ != nullptr ? "on" : "off",
          Quote(RedactedDbUrl(store_.url())),
          auth_.enabled() ? "tokens" : "none", config_.io_threads,
          config_.db_threads));
  if (!config_.port_file.empty()) {
    std::filesystem::rename(tmp, config_.port_file, ec);
    if (ec) return cannot_write(ec.message());
  }

  // Blocked in every thread since RunServer began: one sent before this
  // point is read now.
  sigset_t handled = HandledSignals();
  const int sfd = ::signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) {
    std::cerr << "sqlq serve: cannot read signals (signalfd): "
              << std::strerror(errno) << "\n";
    return 1;
  }
  signals_.assign(sfd);
  WaitForSignals();
  Accept();
  // The queues' history for the dashboard: a reading every step.
  api_.overview().StartSampling();

  std::vector<std::thread> threads;
  for (int i = 1; i < config_.io_threads; ++i) {
    threads.emplace_back([this] { ioc_.run(); });
  }
  ioc_.run();
  for (auto& t : threads) t.join();
  db_pool_.join();
  {
    // Left only after a shutdown timeout: their timers must go while the
    // io_context lives.
    std::unordered_set<std::shared_ptr<LongPoll>> left;
    {
      std::lock_guard<std::mutex> lock(mu_);
      left.swap(parked_);
    }
    // Destroyed outside mu_: a session they release unregisters under it.
  }
  Log("info", "shutdown_complete");
  return 0;
}

bool IsLoopback(const std::string& bind) {
  beast::error_code ec;
  auto a = asio::ip::make_address(bind, ec);
  return !ec && a.is_loopback();
}

// The TLS context of --tls-cert and --tls-key: TLS 1.2 and later with the
// cipher suites of --tls-ciphers and --tls-ciphersuites, the certificate
// chain and key checked to belong together now, so that a wrong pair
// fails at start rather than at the first handshake.
Result<ssl::context> MakeTlsContext(const ServerConfig& config) {
  const std::string& cert = config.tls_cert;
  const std::string& key = config.tls_key;
  ssl::context ctx(ssl::context::tls_server);
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                  ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                  ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
  if (Status s = SetTlsCiphers(ctx.native_handle(), config.tls_ciphers,
                               config.tls_ciphersuites);
      !s.ok()) {
    return s;
  }
  beast::error_code ec;
  // The key first: a certificate loaded after a key of another one drops
  // it, and the check below names the mismatch.
  ctx.use_private_key_file(key, ssl::context::pem, ec);
  if (ec) {
    return Status::InvalidArgument(
        fmt::format("--tls-key '{}': cannot use it as a PEM private key: {}",
                    key, ec.message()));
  }
  ctx.use_certificate_chain_file(cert, ec);
  if (ec) {
    return Status::InvalidArgument(
        fmt::format("--tls-cert '{}': cannot use it as a PEM certificate "
                    "chain: {}",
                    cert, ec.message()));
  }
  if (SSL_CTX_check_private_key(ctx.native_handle()) != 1) {
    return Status::InvalidArgument(fmt::format(
        "--tls-key '{}' is not the key of --tls-cert '{}'", key, cert));
  }
  return ctx;
}

// Whether the --port-file can be written, checked before the store is
// opened and the port bound, so that a typo fails at once and cleanly.
Status CheckPortFile(const std::string& path) {
  if (path.empty()) return Status::Ok();
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    return Status::InvalidArgument(fmt::format(
        "cannot write --port-file '{}': {}", path, std::strerror(errno)));
  }
  ::close(fd);
  ::unlink(tmp.c_str());
  return Status::Ok();
}

}  // namespace

int RunServer(const ServerConfig& config,
              const std::function<int(const Status&)>& exit_code) {
  SetLogOptions(config.log_level, config.log_format);
  std::signal(SIGPIPE, SIG_IGN);
  // A file size limit (ulimit -f) makes writes fail with EFBIG, which the
  // store reports; the signal would kill the server instead.
  std::signal(SIGXFSZ, SIG_IGN);
  // Buffers of 256 KiB and more (request bodies, replies, payloads) are
  // mapped on their own and unmapped when freed. glibc would otherwise
  // raise this threshold after the first large free, and keep later large
  // buffers in its heaps after the requests that needed them.
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  // Fixing that threshold also fixes the heap's trim threshold at its
  // 128 KiB default, which would give memory back (and fault it in again)
  // on ordinary request churn; large buffers are returned by the mapping
  // and malloc_trim after large bodies, so the heap may keep more.
  mallopt(M_TRIM_THRESHOLD, 32 << 20);
  // SIGTERM, SIGINT and SIGHUP are blocked here, before any thread starts,
  // and so in every thread: they stay pending until Server::Run reads them
  // from a signalfd. An early SIGTERM waits until the server listens,
  // rather than killing it half started.
  sigset_t handled = HandledSignals();
  pthread_sigmask(SIG_BLOCK, &handled, nullptr);
  Auth auth = Auth::AllowAll();
  if (!config.tokens_file.empty()) {
    auto a = Auth::Load(config.tokens_file);
    if (!a.ok()) {
      std::cerr << "sqlq serve: " << a.status().message() << "\n";
      return 2;
    }
    auth = std::move(*a);
  } else if (!IsLoopback(config.bind)) {
    std::cerr << "sqlq serve: refusing to listen on " << config.bind
              << " without --tokens: anyone who can reach it could read and "
                 "delete every queue. Give --tokens FILE (docs/server.md), "
                 "or bind to 127.0.0.1.\n";
    return 2;
  }
  std::optional<ssl::context> tls;
  if (!config.tls_cert.empty()) {
    auto made = MakeTlsContext(config);
    if (!made.ok()) {
      std::cerr << "sqlq serve: " << made.status().message() << "\n";
      return 2;
    }
    tls.emplace(std::move(*made));
  }
  if (Status s = CheckPortFile(config.port_file); !s.ok()) {
    std::cerr << "sqlq serve: " << s.message() << "\n";
    return 2;
  }
  // Thousands of idle keep-alive connections need descriptors.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
  auto store = Store::Open(config.db, {.create_if_missing = true,
                                       .run_schedules = config.schedules,
                                       .report_waiting = true});
  if (!store.ok()) {
    std::cerr << "sqlq serve: cannot open " << config.db << ": "
              << store.status().ToString() << "\n";
    return exit_code(store.status());
  }
  Server server(config, **store, auth, tls ? &*tls : nullptr);
  return server.Run(exit_code);
}

}  // namespace sqlq::server
