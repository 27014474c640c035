// The CUDA backend's entry points in a build without the CUDA toolkit (AX_ENABLE_CUDA=OFF or no
// nvcc): no device answers, and asking for one says how to get it.
#include "ax/trainer/backend/backend.h"

namespace ax::train {

int cuda_device_count() { return 0; }

StatusOr<std::unique_ptr<Backend>> make_cuda_backend(int, const CudaBackendOptions&) {
  return FailedPrecondition("no CUDA device (this build has no CUDA backend: configure with ",
                            "-DAX_ENABLE_CUDA=ON and the CUDA toolkit)");
}

}  // namespace ax::train
