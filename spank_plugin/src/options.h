// The --ax-mesh=SPEC option of srun, sbatch and salloc. The spec is checked in the client (its
// callback runs there before anything starts) and again in slurmstepd (remote=1).
#pragma once

#include <optional>
#include <string>

#include "ax/common/status.h"

extern "C" {
#include <slurm/spank.h>

#include <cstddef>  // spank.h uses NULL
}

namespace ax::spank {

// Checks one --ax-mesh value (nullptr = no argument).
StatusOr<std::string> check_mesh_option(const char* value);

// Registers --ax-mesh in the current context; the value lands in mesh_option().
spank_err_t register_options(spank_t sp);

// The value of --ax-mesh in this process, when given and valid.
const std::optional<std::string>& mesh_option();

// The option callback Slurm calls (exposed for tests): 0 or -1 with an "ax: --ax-mesh: ..." error.
int on_mesh_option(int val, const char* optarg, int remote);

}  // namespace ax::spank
