#include "ax/topology/numa_binding.h"

#include <errno.h>
#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ax::topo {
namespace {

// Node masks for set_mempolicy/get_mempolicy: 1024 nodes, as many as Linux configures at most.
constexpr int kMaxNumaNodes = 1024;
constexpr int kMaskBits = 8 * sizeof(unsigned long);
using NodeMask = unsigned long[kMaxNumaNodes / kMaskBits];
// The kernel reads maxnode - 1 bits of a mask.
constexpr unsigned long kMaskMaxNode = kMaxNumaNodes + 1;

}  // namespace

std::vector<int> allowed_memory_nodes() {
  NodeMask mask = {};
  std::vector<int> out;
  if (syscall(SYS_get_mempolicy, nullptr, mask, kMaskMaxNode, nullptr, MPOL_F_MEMS_ALLOWED) != 0) {
    return out;
  }
  for (int n = 0; n < kMaxNumaNodes; ++n) {
    if ((mask[n / kMaskBits] >> (n % kMaskBits)) & 1UL) out.push_back(n);
  }
  return out;
}

int prefer_memory_node(int node) {
  if (node < 0 || node >= kMaxNumaNodes) return EINVAL;
  NodeMask mask = {};
  mask[node / kMaskBits] = 1UL << (node % kMaskBits);
  return syscall(SYS_set_mempolicy, MPOL_PREFERRED, mask, kMaskMaxNode) == 0 ? 0 : errno;
}

}  // namespace ax::topo
