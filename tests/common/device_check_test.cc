// Built only when the CUDA toolkit is present. Runs without a GPU: the failing call is made up,
// and cudaGetErrorString needs no device.
#include "ax/common/device_check.h"

#include <gtest/gtest.h>

namespace ax {
namespace {

TEST(DeviceCheckDeathTest, NamesStatementErrorAndDeviceAndRunsHook) {
  internal::set_error_device(3);
  set_device_abort_hook([] { fprintf(stderr, "abort hook ran\n"); });
  auto fail = [] { return cudaErrorInvalidValue; };
  EXPECT_EXIT(
      AX_CUDA_CHECK(fail()), testing::ExitedWithCode(1),
      "CUDA\\] .*fail\\(\\) failed with cudaErrorInvalidValue.*device 3.*\n.*abort hook ran");
}

TEST(DeviceCheck, SuccessIsSilent) { AX_CUDA_CHECK(cudaSuccess); }

}  // namespace
}  // namespace ax
