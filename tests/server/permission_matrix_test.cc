// Every token against every operation on names it matches and names it
// does not: each allowed cell answers 2xx, each refused cell 403
// `forbidden` and changes nothing, and a missing or unknown token is 401
// everywhere under /v1. The expectations are the grants of docs/server.md
// written out per token, not read from the server's own code.

#include "tests/server/server_fixture.h"

namespace sqlq::server_test {
namespace {

enum class Need { kSee, kSend, kClaim, kAdmin };

const char* NeedName(Need n) {
  switch (n) {
    case Need::kSee:
      return "see";
    case Need::kSend:
      return "send";
    case Need::kClaim:
      return "claim";
    case Need::kAdmin:
      return "admin";
  }
  return "?";
}

struct TokenCase {
  const char* label;
  const char* token;
  const char* grants;  // the token file's words
  // What the grants allow, by hand: `a` says whether the name starts a-.
  bool (*allows)(Need need, bool a);
  bool metrics;  // may read /metrics
};

const TokenCase kTokens[] = {
    {"admin", "matrix-admin-0001", "admin:*", [](Need, bool) { return true; },
     true},
    {"sender", "matrix-sender-0001", "send:a-*",
     [](Need n, bool a) { return a && (n == Need::kSend || n == Need::kSee); },
     false},
    {"worker", "matrix-worker-0001", "claim:a-*",
     [](Need n, bool a) { return a && (n == Need::kClaim || n == Need::kSee); },
     false},
    {"reader", "matrix-reader-0001", "metrics:a-*",
     [](Need n, bool a) { return a && n == Need::kSee; }, true},
    // Send on one prefix, claim on the other.
    {"split", "matrix-split-0001", "send:a-* claim:b-*",
     [](Need n, bool a) {
       return n == Need::kSee || (a ? n == Need::kSend : n == Need::kClaim);
     },
     false},
};
constexpr const char* kAdminToken = "matrix-admin-0001";

struct Call {
  std::string method, target;
  Json body;  // null: no body
};

// One operation: what it needs, and how to make a request of it that
// succeeds when allowed (`prepare` runs as admin first, `restore` after).
struct Operation {
  const char* label;
  const char* kind;  // queue, ring, rotation: the name it works on
  Need need;
  std::function<Call(const std::string& name)> prepare;
  std::function<void(const std::string& name)> restore = nullptr;
};

class PermissionMatrix : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    std::ofstream f(dir_ / "tokens.txt");
    for (const TokenCase& t : kTokens) f << t.token << " " << t.grants << "\n";
    f.close();
    // Unknown tokens are tried on every operation here: more than the
    // default allowance of failed authentications (tested in
    // security_test.cc).
    StartServer({"--tokens", (dir_ / "tokens.txt").string(), "--auth-failures",
                 "1000/1m"});
    admin_.emplace(port(), kAdminToken);
    for (const char* p : {"a-", "b-"}) {
      Make("queue", std::string(p) + "queue");
      Make("ring", std::string(p) + "ring");
      Make("rotation", std::string(p) + "rotation");
    }
  }
  void Make(const std::string& kind, const std::string& name) {
    const Response r =
        admin_->Post("/v1/" + kind + "s/" + name, Json::object());
    ASSERT_TRUE(r.status == 201 || r.error_code() == "already_exists")
        << r.body;
  }
  // A fresh receipt of a message of `queue`, claimed by the admin.
  std::string Receipt(const std::string& queue) {
    const std::string q = "/v1/queues/" + queue;
    EXPECT_EQ(
        admin_->Post(q + "/messages", {{"messages", {{{"payload", "r"}}}}})
            .status,
        200);
    const Response c = admin_->Post(q + "/claim", {{"max", 1}});
    EXPECT_EQ(c.json["messages"].size(), 1u) << c.body;
    return c.json["messages"][0]["receipt"];
  }
  // What the admin sees of a name: unchanged by a refused request.
  std::string State(const std::string& kind, const std::string& name) {
    Json j = admin_->Get("/v1/" + kind + "s/" + name).json;
    if (kind == "queue") {
      j["messages"] = admin_->Get("/v1/queues/" + name + "/messages").json;
      j["dead"] = admin_->Get("/v1/queues/" + name + "/dead").json;
      // What moves with the clock, not with requests: an age, and a
      // message whose backoff ends becoming ready.
      if (j.contains("stats")) {
        Json& st = j["stats"];
        st.erase("oldest_ready_age_ms");
        st["waiting"] = st["ready"].get<int>() + st["delayed"].get<int>();
        st.erase("ready");
        st.erase("delayed");
      }
      for (Json& m : j["messages"]["messages"]) {
        if (m["state"] == "delayed") m["state"] = "ready";
      }
    }
    if (kind == "ring") {
      j["g"] = admin_->Get("/v1/rings/" + name + "/groups/g").json;
    }
    if (kind == "rotation") {
      j["items"] = admin_->Get("/v1/rotations/" + name + "/items").json;
    }
    return j.dump();
  }

  std::optional<Client> admin_;
  int key_ = 0;
};

TEST_F(PermissionMatrix, EveryTokenEveryOperationEveryName) {
  auto q = [](const std::string& n) { return "/v1/queues/" + n; };
  const std::vector<Operation> ops = {
      {"stats", "queue", Need::kSee,
       [&](const std::string& n) {
         return Call{"GET", q(n), nullptr};
       }},
      {"history", "queue", Need::kSee,
       [&](const std::string& n) {
         return Call{"GET", q(n) + "/history", nullptr};
       }},
      {"send", "queue", Need::kSend,
       [&](const std::string& n) {
         return Call{
             "POST", q(n) + "/messages", {{"messages", {{{"payload", "m"}}}}}};
       }},
      {"claim", "queue", Need::kClaim,
       [&](const std::string& n) {
         return Call{"POST", q(n) + "/claim", {{"max", 1}}};
       }},
      {"ack", "queue", Need::kClaim,
       [&](const std::string& n) {
         return Call{"POST", q(n) + "/ack", {{"receipt", Receipt(n)}}};
       }},
      {"nack", "queue", Need::kClaim,
       [&](const std::string& n) {
         return Call{"POST", q(n) + "/nack", {{"receipt", Receipt(n)}}};
       }},
      {"extend", "queue", Need::kClaim,
       [&](const std::string& n) {
         return Call{"POST",
                     q(n) + "/extend",
                     {{"receipt", Receipt(n)}, {"lease_ms", 60000}}};
       }},
      {"change", "queue", Need::kAdmin,
       [&](const std::string& n) {
         return Call{"PATCH", q(n), {{"max_attempts", 7 + key_++ % 3}}};
       }},
      {"pause", "queue", Need::kAdmin,
       [&](const std::string& n) {
         return Call{"POST", q(n) + "/pause", Json::object()};
       },
       [&](const std::string& n) {
         admin_->Post(q(n) + "/resume", Json::object());
       }},
      {"list messages", "queue", Need::kAdmin,
       [&](const std::string& n) {
         return Call{"GET", q(n) + "/messages", nullptr};
       }},
      {"count messages", "queue", Need::kAdmin,
       [&](const std::string& n) {
         return Call{"GET", q(n) + "/messages/count", nullptr};
       }},
      {"purge", "queue", Need::kAdmin,
       [&](const std::string& n) {
         return Call{"POST", q(n) + "/purge", Json::object()};
       }},
      {"dead letters", "queue", Need::kAdmin,
       [&](const std::string& n) {
         return Call{"GET", q(n) + "/dead", nullptr};
       }},
      {"redrive", "queue", Need::kAdmin,
       [&](const std::string& n) {
         // A dead letter to redrive: a message cancelled.
         const Response sent = admin_->Post(
             q(n) + "/messages", {{"messages", {{{"payload", "d"}}}}});
         const std::string id =
             std::to_string(sent.json["ids"][0].get<std::int64_t>());
         EXPECT_EQ(
             admin_->Post(q(n) + "/messages/" + id + "/cancel", Json::object())
                 .status,
             200);
         return Call{"POST", q(n) + "/dead/redrive", {{"all", true}}};
       }},
      {"archive", "queue", Need::kAdmin,
       [&](const std::string& n) {
         return Call{"GET", q(n) + "/archive", nullptr};
       }},
      {"drop", "queue", Need::kAdmin,
       [&](const std::string& n) {
         return Call{"DELETE", q(n), nullptr};
       },
       [&](const std::string& n) { Make("queue", n); }},
      {"create", "queue", Need::kAdmin,
       [&](const std::string& n) {
         admin_->Delete(q(n));
         return Call{"POST", q(n), Json::object()};
       },
       [&](const std::string& n) { Make("queue", n); }},
      {"ring stats", "ring", Need::kSee,
       [&](const std::string& n) {
         return Call{"GET", "/v1/rings/" + n, nullptr};
       }},
      {"ring push", "ring", Need::kSend,
       [&](const std::string& n) {
         return Call{
             "POST", "/v1/rings/" + n + "/groups/g", {{"payload", "p"}}};
       }},
      {"ring read", "ring", Need::kClaim,
       [&](const std::string& n) {
         return Call{"GET", "/v1/rings/" + n + "/groups/g", nullptr};
       }},
      {"ring groups", "ring", Need::kClaim,
       [&](const std::string& n) {
         return Call{"GET", "/v1/rings/" + n + "/groups", nullptr};
       }},
      {"ring delete group", "ring", Need::kAdmin,
       [&](const std::string& n) {
         return Call{"DELETE", "/v1/rings/" + n + "/groups/g", nullptr};
       }},
      {"rotation stats", "rotation", Need::kSee,
       [&](const std::string& n) {
         return Call{"GET", "/v1/rotations/" + n, nullptr};
       }},
      {"rotation add item", "rotation", Need::kAdmin,
       [&](const std::string& n) {
         return Call{"POST",
                     "/v1/rotations/" + n + "/items",
                     {{"key", "k" + std::to_string(key_++)}, {"payload", "i"}}};
       }},
      {"rotation items", "rotation", Need::kClaim,
       [&](const std::string& n) {
         return Call{"GET", "/v1/rotations/" + n + "/items", nullptr};
       }},
      {"rotation next", "rotation", Need::kClaim,
       [&](const std::string& n) {
         return Call{"POST", "/v1/rotations/" + n + "/next", {{"n", 1}}};
       }},
  };

  int allowed = 0, refused = 0, unauthenticated = 0;
  for (const TokenCase& t : kTokens) {
    Client c(port(), t.token);
    for (const Operation& op : ops) {
      for (const bool a : {true, false}) {
        const std::string name = std::string(a ? "a-" : "b-") + op.kind;
        SCOPED_TRACE(std::string(t.label) + " × " + op.label + " × " + name +
                     " (needs " + NeedName(op.need) + ")");
        const Call call = op.prepare(name);
        const std::string before = State(op.kind, name);
        const Response r = c.Call(call.method, call.target,
                                  call.body.is_null() ? "" : call.body.dump());
        if (t.allows(op.need, a)) {
          EXPECT_GE(r.status, 200) << r.body;
          EXPECT_LT(r.status, 300) << r.body;
          ++allowed;
        } else {
          EXPECT_EQ(r.status, 403) << r.body;
          EXPECT_EQ(r.error_code(), "forbidden") << r.body;
          EXPECT_EQ(State(op.kind, name), before) << "a refusal changed it";
          ++refused;
        }
        if (op.restore) op.restore(name);
      }
    }
  }
  // Without a token, or with one the server does not know: 401 everywhere.
  for (const char* token : {"", "matrix-nobody-0001"}) {
    Client c(port(), token);
    for (const Operation& op : ops) {
      const std::string name = std::string("a-") + op.kind;
      const Call call = op.prepare(name);
      const std::string before = State(op.kind, name);
      const Response r = c.Call(call.method, call.target,
                                call.body.is_null() ? "" : call.body.dump());
      EXPECT_EQ(r.status, 401) << op.label << " " << r.body;
      EXPECT_EQ(State(op.kind, name), before) << op.label;
      ++unauthenticated;
      if (op.restore) op.restore(name);
    }
  }
  // The matrix is what it says: every cell ran.
  EXPECT_EQ(allowed + refused,
            static_cast<int>(std::size(kTokens) * ops.size() * 2));
  EXPECT_GT(allowed, 0);
  EXPECT_GT(refused, 0);
  std::cout << "cells: " << allowed << " allowed, " << refused << " refused, "
            << unauthenticated << " without a valid token\n";
}

// Reads: /metrics for metrics and admin grants only, showing the names the
// grant covers; listings and the dashboard's overview show each token what
// it may see; the dashboard page and the API's description (/openapi.json)
// need no token (they hold no data).
TEST_F(PermissionMatrix, MetricsListingsAndTheDashboard) {
  for (const TokenCase& t : kTokens) {
    SCOPED_TRACE(t.label);
    Client c(port(), t.token);
    const Response m = c.Get("/metrics");
    if (t.metrics) {
      EXPECT_EQ(m.status, 200) << m.body;
      const bool all = t.allows(Need::kSee, false);
      EXPECT_NE(m.body.find("queue=\"a-queue\""), std::string::npos);
      EXPECT_EQ(m.body.find("queue=\"b-queue\"") != std::string::npos, all);
    } else {
      EXPECT_EQ(m.status, 403) << m.body;
      EXPECT_EQ(m.error_code(), "forbidden");
    }
    auto names = [](const Json& list) {
      std::vector<std::string> out;
      for (const Json& o : list) out.push_back(o["name"]);
      return out;
    };
    std::vector<std::string> queues, rings, rotations;
    for (const char* p : {"a-", "b-"}) {
      if (!t.allows(Need::kSee, std::string(p) == "a-")) continue;
      queues.push_back(std::string(p) + "queue");
      rings.push_back(std::string(p) + "ring");
      rotations.push_back(std::string(p) + "rotation");
    }
    const Response listed = c.Get("/v1/queues");
    ASSERT_EQ(listed.status, 200) << listed.body;
    EXPECT_EQ(names(listed.json["queues"]), queues);
    EXPECT_EQ(names(c.Get("/v1/rings").json["rings"]), rings);
    EXPECT_EQ(names(c.Get("/v1/rotations").json["rotations"]), rotations);
    const Response all = c.Get("/v1/all");
    EXPECT_EQ(names(all.json["queues"]), queues);
    const Response overview = c.Get("/v1/overview");
    ASSERT_EQ(overview.status, 200) << overview.body;
    EXPECT_EQ(names(overview.json["queues"]), queues);
    EXPECT_EQ(names(overview.json["rings"]), rings);
    EXPECT_EQ(overview.json["metrics"], t.metrics);
    const Response page = c.Get("/");
    EXPECT_EQ(page.status, 200);
    EXPECT_NE(page.header("content-type").find("text/html"), std::string::npos);
    EXPECT_EQ(c.Get("/openapi.json").status, 200);
  }
  Client anonymous(port());
  EXPECT_EQ(anonymous.Get("/").status, 200);
  // The API's description is public, as the page is.
  const Response description = anonymous.Get("/openapi.json");
  EXPECT_EQ(description.status, 200);
  EXPECT_EQ(description.json["openapi"], "3.1.0");
  EXPECT_EQ(anonymous.Get("/metrics").status, 401);
  EXPECT_EQ(anonymous.Get("/v1/overview").status, 401);
  EXPECT_EQ(anonymous.Get("/v1/queues").status, 401);
}

}  // namespace
}  // namespace sqlq::server_test
