#include "ax/common/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <sstream>

namespace ax {
namespace {

const EnvKnob<int64_t> kDepth("AX_TEST_DEPTH", 4, "test knob: depth", 1, 64);
const EnvKnob<bool> kFlag("AX_TEST_FLAG", false, "test knob: flag");
const EnvKnob<double> kRatio("AX_TEST_RATIO", 0.5, "test knob: ratio");
const EnvKnob<std::string> kMode("AX_TEST_MODE", "fast", "test knob: mode", {"fast", "slow"});

TEST(EnvKnob, DefaultsWhenUnset) {
  unsetenv("AX_TEST_DEPTH");
  unsetenv("AX_TEST_MODE");
  EXPECT_EQ(*kDepth.get(), 4);
  EXPECT_EQ(*kMode.get(), "fast");
}

TEST(EnvKnob, ParsesValidValues) {
  setenv("AX_TEST_DEPTH", "16", 1);
  setenv("AX_TEST_FLAG", "yes", 1);
  setenv("AX_TEST_RATIO", "0.25", 1);
  setenv("AX_TEST_MODE", "slow", 1);
  EXPECT_EQ(*kDepth.get(), 16);
  EXPECT_TRUE(*kFlag.get());
  EXPECT_DOUBLE_EQ(*kRatio.get(), 0.25);
  EXPECT_EQ(*kMode.get(), "slow");
}

TEST(EnvKnob, InvalidValueIsAnErrorNamingTheVariable) {
  setenv("AX_TEST_DEPTH", "sixteen", 1);
  auto v = kDepth.get();
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("AX_TEST_DEPTH='sixteen'"), std::string::npos);

  setenv("AX_TEST_DEPTH", "1000", 1);
  EXPECT_FALSE(kDepth.get().ok());
  setenv("AX_TEST_FLAG", "maybe", 1);
  EXPECT_FALSE(kFlag.get().ok());
  setenv("AX_TEST_MODE", "medium", 1);
  auto m = kMode.get();
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("one of fast|slow"), std::string::npos);
  unsetenv("AX_TEST_DEPTH");
  unsetenv("AX_TEST_FLAG");
  unsetenv("AX_TEST_MODE");
}

TEST(EnvKnob, HelpListsEveryKnob) {
  std::ostringstream os;
  print_env_help(os);
  for (const char* name :
       {"AX_TEST_DEPTH", "AX_TEST_FLAG", "AX_TEST_RATIO", "AX_TEST_MODE", "AX_LOG_LEVEL"}) {
    EXPECT_NE(os.str().find(name), std::string::npos) << name;
  }
  EXPECT_NE(os.str().find("test knob: depth"), std::string::npos);
}

}  // namespace
}  // namespace ax
