// NUMA memory binding for the processes of a node, used by ax-launch's children and by
// spank_ax.so's tasks (docs/launch.md "Memory binding"); raw system calls, no libnuma.
#pragma once

#include <vector>

namespace ax::topo {

// The nodes this process may allocate on (get_mempolicy with
// MPOL_F_MEMS_ALLOWED: the machine's nodes as narrowed by a cpuset cgroup); empty when the
// kernel has no NUMA policy support.
std::vector<int> allowed_memory_nodes();
// Makes `node` the preferred node of this process's new allocations (set_mempolicy with
// MPOL_PREFERRED: other nodes when it is full). Only the system call, so it is safe between fork
// and exec. Returns 0 or an errno value.
int prefer_memory_node(int node);

}  // namespace ax::topo
