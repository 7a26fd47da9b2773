// The one reader of BASALT_* environment variables (core/config.hpp) and the one check of
// SessionOptions (SessionOptions::validate).
#include "core/config.hpp"

#include <basalt/basalt.hpp>

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace basalt {
namespace {

std::map<std::string, std::string> g_env;
const char* fake_get(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}

EnvConfig parse(std::map<std::string, std::string> env) {
  g_env = std::move(env);
  return parse_env_config(fake_get);
}

TEST(EnvConfig, DefaultsWhenUnset) {
  EnvConfig c = parse({});
  EXPECT_EQ(c.isa, "");
  EXPECT_EQ(c.fma512_pipes, 0);
  EXPECT_EQ(c.winograd, -1);
  EXPECT_TRUE(c.nchwc);
  EXPECT_FALSE(c.huge_pages);
  EXPECT_TRUE(c.pool_apart);
  EXPECT_TRUE(c.plan_in_place);
  EXPECT_FALSE(c.plan_debug);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(EnvConfig, ReadsEveryVariable) {
  EnvConfig c = parse({{"BASALT_ISA", "avx2"},
                       {"BASALT_FMA512_PIPES", "2"},
                       {"BASALT_WINOGRAD", "4"},
                       {"BASALT_NCHWC", "0"},
                       {"BASALT_HUGE_PAGES", "1"},
                       {"BASALT_POOL_APART", "0"},
                       {"BASALT_PLAN_IN_PLACE", "0"},
                       {"BASALT_PLAN_DEBUG", ""}});
  EXPECT_EQ(c.isa, "avx2");
  EXPECT_EQ(c.fma512_pipes, 2);
  EXPECT_EQ(c.winograd, 4);
  EXPECT_FALSE(c.nchwc);
  EXPECT_TRUE(c.huge_pages);
  EXPECT_FALSE(c.pool_apart);
  EXPECT_FALSE(c.plan_in_place);
  EXPECT_TRUE(c.plan_debug);
  EXPECT_TRUE(c.warnings.empty());
  EXPECT_EQ(parse({{"BASALT_WINOGRAD", "0"}}).winograd, 0);
}

// A value outside the list is ignored with a warning naming the variable and what it accepts.
TEST(EnvConfig, BadValuesWarnAndKeepTheDefault) {
  EnvConfig c = parse({{"BASALT_ISA", "avx513"}, {"BASALT_WINOGRAD", "3"}, {"BASALT_NCHWC", "off"}});
  EXPECT_EQ(c.isa, "");
  EXPECT_EQ(c.winograd, -1);
  EXPECT_TRUE(c.nchwc);
  ASSERT_EQ(c.warnings.size(), 3u);
  EXPECT_NE(c.warnings[0].find("BASALT_ISA='avx513'"), std::string::npos) << c.warnings[0];
  EXPECT_NE(c.warnings[0].find("portable | avx2 | avx512"), std::string::npos) << c.warnings[0];
  EXPECT_NE(c.warnings[1].find("BASALT_WINOGRAD"), std::string::npos);
  EXPECT_NE(c.warnings[2].find("BASALT_NCHWC='off'"), std::string::npos);
}

void expect_invalid(const SessionOptions& o, const std::string& field) {
  try {
    o.validate();
    FAIL() << "expected InvalidArgument for " << field;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("SessionOptions." + field), std::string::npos) << e.what();
  }
}

TEST(SessionOptionsValidate, RangesAreCheckedOnce) {
  SessionOptions ok;
  EXPECT_NO_THROW(ok.validate());
  SessionOptions o;
  o.threads = -1;
  expect_invalid(o, "threads");
  o.threads = 1 << 20;  // a million pool threads: refused, not attempted
  expect_invalid(o, "threads");
  o = {};
  o.spin_us = -5;
  expect_invalid(o, "spin_us");
  o = {};
  o.optimization_level = 4;
  expect_invalid(o, "optimization_level");
  // The session refuses them before it reads the model.
  o = {};
  o.threads = -2;
  try {
    Session::open("/nonexistent/model.onnx", o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
  }
}

}  // namespace
}  // namespace basalt
