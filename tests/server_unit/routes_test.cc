// The native API's route table (Api::Routes) and its description,
// docs/openapi.json, kept in step: every route the server has is described
// with the permission the table gives it, and every described operation
// is a route of the table. What the server answers on each of them is
// tested against the description over HTTP in tests/openapi.

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "server/api.h"

namespace sqlq::server {
namespace {

using Json = nlohmann::ordered_json;

// "METHOD /path" -> the x-sqlq-permission of each described operation.
std::map<std::string, std::string> Described() {
  std::ifstream in(std::string(SQLQ_SOURCE_DIR) + "/docs/openapi.json");
  std::stringstream text;
  text << in.rdbuf();
  const Json doc = Json::parse(text.str());
  std::map<std::string, std::string> out;
  for (const auto& [path, item] : doc.at("paths").items()) {
    for (const auto& [method, op] : item.items()) {
      if (!op.is_object() || !op.contains("operationId")) continue;
      std::string upper = method;
      for (char& c : upper) c = static_cast<char>(std::toupper(c));
      out[upper + " " + path] = op.value("x-sqlq-permission", "");
    }
  }
  return out;
}

TEST(Routes, TableAndDescriptionAgree) {
  const std::map<std::string, std::string> described = Described();
  ASSERT_GT(described.size(), 50u);
  std::set<std::string> routes;
  for (const Api::RouteInfo& r : Api::Routes()) {
    const std::string key = std::string(r.method) + " " + std::string(r.path);
    EXPECT_TRUE(routes.insert(key).second) << key << " is in the table twice";
    auto it = described.find(key);
    if (!r.described) {
      EXPECT_EQ(it, described.end()) << key << " is described after all";
      continue;
    }
    if (it == described.end()) {
      ADD_FAILURE() << key << " is a route, but docs/openapi.json lacks it";
      continue;
    }
    EXPECT_EQ(it->second, r.permission)
        << key << ": the description's x-sqlq-permission";
  }
  for (const auto& [key, permission] : described) {
    EXPECT_TRUE(routes.contains(key))
        << key << " is described in docs/openapi.json, but no route";
  }
}

// The one route the description leaves out: the dashboard's page, which is
// no part of the API.
TEST(Routes, OnlyThePageIsUndescribed) {
  std::set<std::string> undescribed;
  for (const Api::RouteInfo& r : Api::Routes()) {
    if (!r.described) {
      undescribed.insert(std::string(r.method) + " " + std::string(r.path));
    }
  }
  EXPECT_EQ(undescribed, (std::set<std::string>{"GET /dashboard"}));
}

}  // namespace
}  // namespace sqlq::server
