#include "ax/common/status.h"

#include <gtest/gtest.h>

#include <cerrno>

#include "ax/common/check.h"

namespace ax {
namespace {

Status fails() { return DataLoss("shard-00001.axs frame ", 3, ": checksum mismatch"); }

Status passes_through() {
  AX_RETURN_IF_ERROR(fails());
  return Status::Ok();
}

StatusOr<int> half(int x) {
  if (x % 2) return InvalidArgument("odd: ", x);
  return x / 2;
}

StatusOr<int> quarter(int x) {
  AX_ASSIGN_OR_RETURN(int h, half(x));
  AX_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

TEST(Status, OkAndError) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = fails();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.to_string(), "DataLoss: shard-00001.axs frame 3: checksum mismatch");
}

TEST(Status, ReturnIfErrorAddsFirstLocationOnly) {
  Status s = passes_through();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("status_test.cc:"), std::string::npos) << s.message();
  Status again = s.with_location("other.cc", 1);
  EXPECT_EQ(again.message(), s.message());
}

TEST(Status, Context) {
  Status s = fails().with_context("reading data/");
  EXPECT_EQ(s.message(), "reading data/: shard-00001.axs frame 3: checksum mismatch");
  EXPECT_TRUE(Status::Ok().with_context("x").ok());
}

TEST(StatusOr, AssignOrReturn) {
  EXPECT_EQ(*quarter(8), 2);
  StatusOr<int> bad = quarter(6);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("odd: 3"), std::string::npos);
}

TEST(Status, IoErrorMapsErrno) {
  EXPECT_EQ(IoError("open x", ENOENT).code(), StatusCode::kNotFound);
  EXPECT_EQ(IoError("write x", ENOSPC).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(IoError("read x", EIO).code(), StatusCode::kIoError);
  EXPECT_NE(IoError("open x", ENOENT).message().find("No such file"), std::string::npos);
}

TEST(CheckDeathTest, AbortsWithConditionAndMessage) {
  int a = 1, b = 2;
  EXPECT_DEATH(AX_CHECK_EQ(a, b) << "layout mismatch", "check failed: .*a.*b.*layout mismatch");
  EXPECT_DEATH(AX_CHECK_OK(fails()), "DataLoss: shard-00001.axs frame 3");
}

TEST(Strings, StrictParsers) {
  EXPECT_EQ(parse_int64("42"), 42);
  EXPECT_EQ(parse_int64("-7"), -7);
  EXPECT_FALSE(parse_int64("42x"));
  EXPECT_FALSE(parse_int64(""));
  EXPECT_FALSE(parse_int64("99999999999999999999"));
  EXPECT_DOUBLE_EQ(*parse_double("1e-3"), 1e-3);
  EXPECT_FALSE(parse_double("1.0.0"));
  EXPECT_EQ(parse_bool("on"), true);
  EXPECT_EQ(parse_bool("0"), false);
  EXPECT_FALSE(parse_bool("maybe"));
  EXPECT_EQ(str_split("a,b,,c", ','), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(human_bytes(1536), "1.50 KiB");
  EXPECT_EQ(human_duration(3725), "1h02m");
}

}  // namespace
}  // namespace ax
