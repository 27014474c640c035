#include "ax/common/logging.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "ax/common/strings.h"

namespace ax {
namespace {

TEST(Logging, PrefixNamesHostPidAndRank) {
  set_log_rank(-1);
  std::string p = log_prefix();
  EXPECT_NE(p.find(str_cat(":", getpid(), " rank -")), std::string::npos) << p;
  set_log_rank(3);
  EXPECT_NE(log_prefix().find(" rank 3"), std::string::npos);
  set_log_rank(-1);
}

TEST(Logging, LineCarriesLevelAndSubsystem) {
  set_log_rank(5);
  testing::internal::CaptureStderr();
  AX_LOG(kWarn, "data") << "frame " << 7 << " is short";
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find(" rank 5 W data] frame 7 is short\n"), std::string::npos) << out;
  set_log_rank(-1);
}

TEST(Logging, LevelFilters) {
  set_log_level(LogLevel::kWarn);
  testing::internal::CaptureStderr();
  AX_LOG(kInfo, "data") << "hidden";
  AX_LOG(kError, "data") << "shown";
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out.find("hidden"), std::string::npos);
  EXPECT_NE(out.find("shown"), std::string::npos);
  set_log_level(LogLevel::kInfo);
}

}  // namespace
}  // namespace ax
