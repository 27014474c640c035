#include "ax/job_context/job_context.h"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "ax/common/strings.h"

namespace ax::job {

namespace {

constexpr size_t kMaxHostname = 255;
constexpr int64_t kMaxRanks = 1 << 24;
constexpr size_t kSecretBytes = 32;
constexpr size_t kMinSecretDigits = 32;  // 128 bits
constexpr size_t kMaxSecretDigits = 128;

// A non-negative integer variable; nullopt when unset.
StatusOr<std::optional<int>> int_var(const EnvLookup& env, const std::string& name) {
  std::optional<std::string> raw = env(name);
  if (!raw) return std::optional<int>();
  std::optional<int64_t> v = parse_int64(str_trim(*raw));
  if (!v || *v < 0 || *v > kMaxRanks) {
    return InvalidArgument(name, "='", *raw, "': expected an integer in [0, ", kMaxRanks, "]");
  }
  return std::optional<int>(static_cast<int>(*v));
}

StatusOr<int> required_int(const EnvLookup& env, const std::string& name,
                           const std::string& because) {
  AX_ASSIGN_OR_RETURN(std::optional<int> v, int_var(env, name));
  if (!v) return InvalidArgument(name, " is not set but ", because);
  return *v;
}

// The first variable of `names` that is set.
std::optional<std::string> first_of(const EnvLookup& env, std::initializer_list<const char*> names,
                                    std::string* which) {
  for (const char* name : names) {
    if (std::optional<std::string> v = env(name)) {
      *which = name;
      return v;
    }
  }
  return std::nullopt;
}

Status check_index(const char* what, int index, const std::string& index_var, int count,
                   const std::string& count_var) {
  if (count < 1) return InvalidArgument(count_var, "=", count, ": ", what, " must be at least 1");
  if (index >= count) {
    return InvalidArgument(index_var, "=", index, " is not below ", count_var, "=", count);
  }
  return Status::Ok();
}

// "data,fsdp,tensor" or "pipeline,data,fsdp,seq,tensor": three or five positive integers.
StatusOr<int64_t> mesh_product(const std::string& name, const std::string& value) {
  std::vector<std::string> parts = str_split(value, ',');
  int64_t product = 1;
  bool ok = parts.size() == 3 || parts.size() == 5;
  for (const std::string& p : parts) {
    std::optional<int64_t> v = parse_int64(str_trim(p));
    ok = ok && v && *v >= 1 && *v <= kMaxRanks;
    if (ok) product *= *v;
  }
  if (!ok) {
    return InvalidArgument(name, "='", value, "': expected data,fsdp,tensor or ",
                           "pipeline,data,fsdp,seq,tensor (three or five positive integers, e.g. ",
                           "1,8,1 or 2,1,8,1,1)");
  }
  return product;
}

Status check_coordinator(const std::string& value) {
  size_t colon = value.rfind(':');
  std::optional<int64_t> port =
      colon == std::string::npos ? std::nullopt : parse_int64(value.substr(colon + 1));
  if (colon == 0 || colon == std::string::npos || !port || *port < 1 || *port > 65535) {
    return InvalidArgument("AX_COORDINATOR='", value, "': expected host:port with a port in ",
                           "[1, 65535]");
  }
  return Status::Ok();
}

// "2(x3),1" → {2, 2, 2, 1}.
StatusOr<std::vector<int>> tasks_per_node(const std::string& name, const std::string& value) {
  std::vector<int> out;
  for (const std::string& item : str_split(value, ',')) {
    std::string count = item;
    int64_t repeat = 1;
    size_t paren = item.find('(');
    if (paren != std::string::npos) {
      count = item.substr(0, paren);
      std::optional<int64_t> r;
      if (item.size() > paren + 3 && item[paren + 1] == 'x' && item.back() == ')') {
        r = parse_int64(item.substr(paren + 2, item.size() - paren - 3));
      }
      if (!r || *r < 1 || *r > kMaxRanks) {
        return InvalidArgument(name, "='", value, "': bad repeat in '", item, "'");
      }
      repeat = *r;
    }
    std::optional<int64_t> n = parse_int64(count);
    if (!n || *n < 1 || *n > kMaxRanks || out.size() + repeat > kMaxRanks) {
      return InvalidArgument(name, "='", value, "': expected counts such as 2(x3),1");
    }
    out.insert(out.end(), static_cast<size_t>(repeat), static_cast<int>(*n));
  }
  return out;
}

std::string this_hostname() {
  char buf[kMaxHostname + 1] = {};
  if (gethostname(buf, kMaxHostname) != 0) return "localhost";
  return buf;
}

// Slurm's coordinator rule (spank_plugin/src/env.cc coordinator_port): the first host of the
// step's node list, port 20000 + (job_id * 64 + step_id % 64) % 12000. Empty outside a step.
StatusOr<std::string> slurm_coordinator(const EnvLookup& env) {
  std::string list_var;
  std::optional<std::string> nodelist =
      first_of(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}, &list_var);
  std::optional<std::string> job = env("SLURM_JOB_ID");
  std::optional<std::string> step = env("SLURM_STEP_ID");
  if (!nodelist || !job || !step) return std::string();
  StatusOr<std::string> host = first_host(*nodelist);
  if (!host.ok()) return host.status().with_context(list_var);
  std::optional<int64_t> job_id = parse_int64(*job);
  std::optional<int64_t> step_id = parse_int64(*step);
  if (!job_id || *job_id < 0 || *job_id > UINT32_MAX) {
    return InvalidArgument("SLURM_JOB_ID='", *job, "': expected an unsigned 32-bit integer");
  }
  if (!step_id || *step_id < 0 || *step_id > UINT32_MAX) {
    return InvalidArgument("SLURM_STEP_ID='", *step, "': expected an unsigned 32-bit integer");
  }
  return str_cat(*host, ":",
                 coordinator_port(static_cast<uint32_t>(*job_id), static_cast<uint32_t>(*step_id)));
}

Status from_ax(const EnvLookup& env, JobContext& ctx) {
  ctx.source = ContextSource::kAx;
  AX_ASSIGN_OR_RETURN(ctx.rank, required_int(env, "AX_RANK", "AX_RANK is"));
  AX_ASSIGN_OR_RETURN(ctx.world, required_int(env, "AX_WORLD_SIZE", "AX_RANK is"));
  AX_RETURN_IF_ERROR(check_index("the world", ctx.rank, "AX_RANK", ctx.world, "AX_WORLD_SIZE"));
  AX_ASSIGN_OR_RETURN(std::optional<int> local, int_var(env, "AX_LOCAL_RANK"));
  AX_ASSIGN_OR_RETURN(std::optional<int> local_world, int_var(env, "AX_LOCAL_WORLD_SIZE"));
  AX_ASSIGN_OR_RETURN(std::optional<int> node, int_var(env, "AX_NODE_RANK"));
  AX_ASSIGN_OR_RETURN(std::optional<int> nnodes, int_var(env, "AX_NNODES"));
  // Unset local values mean one node holding every rank.
  ctx.local_rank = local.value_or(ctx.rank);
  ctx.local_world = local_world.value_or(ctx.world);
  ctx.node_rank = node.value_or(0);
  ctx.num_nodes = nnodes.value_or(1);
  AX_RETURN_IF_ERROR(check_index("a node", ctx.local_rank, "AX_LOCAL_RANK", ctx.local_world,
                                 "AX_LOCAL_WORLD_SIZE"));
  AX_RETURN_IF_ERROR(
      check_index("the job", ctx.node_rank, "AX_NODE_RANK", ctx.num_nodes, "AX_NNODES"));
  if (ctx.local_world > ctx.world) {
    return InvalidArgument("AX_LOCAL_WORLD_SIZE=", ctx.local_world,
                           " exceeds AX_WORLD_SIZE=", ctx.world);
  }
  ctx.ici_mesh = env("AX_ICI_MESH").value_or("");
  ctx.dcn_mesh = env("AX_DCN_MESH").value_or("");
  if (!ctx.ici_mesh.empty() || !ctx.dcn_mesh.empty()) {
    if (ctx.ici_mesh.empty() || ctx.dcn_mesh.empty()) {
      return InvalidArgument(ctx.ici_mesh.empty() ? "AX_ICI_MESH" : "AX_DCN_MESH",
                             " is not set but ",
                             ctx.ici_mesh.empty() ? "AX_DCN_MESH" : "AX_ICI_MESH", " is");
    }
    AX_ASSIGN_OR_RETURN(int64_t ici, mesh_product("AX_ICI_MESH", ctx.ici_mesh));
    AX_ASSIGN_OR_RETURN(int64_t dcn, mesh_product("AX_DCN_MESH", ctx.dcn_mesh));
    if (ici * dcn != ctx.world) {
      return InvalidArgument("AX_ICI_MESH=", ctx.ici_mesh, " times AX_DCN_MESH=", ctx.dcn_mesh,
                             " is ", ici * dcn, " devices but AX_WORLD_SIZE=", ctx.world);
    }
    // The spec those shapes came from; the trainer parses it (ax/topology/mesh.h).
    ctx.mesh_spec = env("AX_MESH_SPEC").value_or("");
    if (ctx.mesh_spec.size() > 256) {
      return InvalidArgument("AX_MESH_SPEC is ", ctx.mesh_spec.size(),
                             " characters long: expected a mesh spec of at most 256");
    }
  }
  ctx.device = env("AX_DEVICE").value_or("");
  if (!ctx.device.empty() && ctx.device != "cpu") {
    std::optional<int64_t> ordinal = parse_int64(ctx.device);
    if (!ordinal || *ordinal < 0 || *ordinal > 1023) {
      return InvalidArgument("AX_DEVICE='", ctx.device, "': expected 'cpu' or a CUDA ordinal");
    }
  }
  if (std::optional<std::string> coordinator = env("AX_COORDINATOR")) {
    AX_RETURN_IF_ERROR(check_coordinator(*coordinator));
    ctx.coordinator = *coordinator;
  } else {
    AX_ASSIGN_OR_RETURN(ctx.coordinator, slurm_coordinator(env));
  }
  return Status::Ok();
}

// The rank comes from PMIX_RANK (kPmix) or SLURM_PROCID (kSlurm); the rest from the step.
Status from_slurm(const EnvLookup& env, JobContext& ctx) {
  const bool pmix = ctx.source == ContextSource::kPmix;
  const std::string rank_var = pmix ? "PMIX_RANK" : "SLURM_PROCID";
  const std::string because = str_cat(rank_var, " is");
  AX_ASSIGN_OR_RETURN(ctx.rank, required_int(env, rank_var, because));
  AX_ASSIGN_OR_RETURN(ctx.world, required_int(env, "SLURM_NTASKS", because));
  AX_RETURN_IF_ERROR(check_index("the step", ctx.rank, rank_var, ctx.world, "SLURM_NTASKS"));
  std::string nnodes_var = "SLURM_STEP_NUM_NODES";
  if (first_of(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES"}, &nnodes_var)) {
    AX_ASSIGN_OR_RETURN(std::optional<int> nnodes, int_var(env, nnodes_var));
    ctx.num_nodes = *nnodes;
  }
  AX_ASSIGN_OR_RETURN(std::optional<int> node, int_var(env, "SLURM_NODEID"));
  AX_ASSIGN_OR_RETURN(std::optional<int> local, int_var(env, "SLURM_LOCALID"));
  ctx.node_rank = node.value_or(0);
  AX_RETURN_IF_ERROR(
      check_index("the step", ctx.node_rank, "SLURM_NODEID", ctx.num_nodes, nnodes_var));
  std::string tpn_var;
  std::optional<std::string> tpn =
      first_of(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, &tpn_var);
  if (tpn) {
    AX_ASSIGN_OR_RETURN(std::vector<int> counts, tasks_per_node(tpn_var, *tpn));
    if (counts.size() != static_cast<size_t>(ctx.num_nodes)) {
      return InvalidArgument(tpn_var, "='", *tpn, "' lists ", counts.size(), " nodes but ",
                             nnodes_var, "=", ctx.num_nodes);
    }
    ctx.local_world = counts[static_cast<size_t>(ctx.node_rank)];
  } else if (ctx.world % ctx.num_nodes == 0) {
    ctx.local_world = ctx.world / ctx.num_nodes;
  } else {
    return InvalidArgument("SLURM_STEP_TASKS_PER_NODE is not set and SLURM_NTASKS=", ctx.world,
                           " does not divide over ", ctx.num_nodes, " nodes");
  }
  ctx.local_rank = local.value_or(ctx.rank % ctx.local_world);
  AX_RETURN_IF_ERROR(check_index("a node", ctx.local_rank, "SLURM_LOCALID", ctx.local_world,
                                 tpn ? tpn_var : "the tasks per node"));
  AX_ASSIGN_OR_RETURN(ctx.coordinator, slurm_coordinator(env));
  return Status::Ok();
}

}  // namespace

const char* context_source_name(ContextSource source) {
  switch (source) {
    case ContextSource::kAx:
      return "ax";
    case ContextSource::kPmix:
      return "pmix";
    case ContextSource::kSlurm:
      return "slurm";
    case ContextSource::kSingle:
      return "single";
  }
  return "?";
}

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

StatusOr<JobContext> job_context(const EnvLookup& raw_env) {
  // An empty variable counts as unset (a wrapper script's `export AX_RANK=`).
  EnvLookup env = [&raw_env](const std::string& name) -> std::optional<std::string> {
    std::optional<std::string> v = raw_env(name);
    if (v && v->empty()) return std::nullopt;
    return v;
  };
  JobContext ctx;
  ctx.hostname = this_hostname();
  ctx.job_id = env("SLURM_JOB_ID").value_or("");
  AX_ASSIGN_OR_RETURN(std::optional<int> restarts, int_var(env, "SLURM_RESTART_COUNT"));
  ctx.restart_count = restarts.value_or(0);
  ctx.pmix = env("PMIX_RANK").has_value() && env("PMIX_NAMESPACE").has_value();
  if (std::optional<std::string> secret = env(kJobSecretVar)) {
    AX_RETURN_IF_ERROR(check_job_secret(*secret));
    ctx.secret = *secret;
  }
  if (env("AX_RANK")) {
    AX_RETURN_IF_ERROR(from_ax(env, ctx));
  } else if (ctx.pmix) {
    ctx.source = ContextSource::kPmix;
    AX_RETURN_IF_ERROR(from_slurm(env, ctx));
  } else if (env("SLURM_PROCID") && env("SLURM_STEP_ID")) {
    ctx.source = ContextSource::kSlurm;
    AX_RETURN_IF_ERROR(from_slurm(env, ctx));
  } else {
    for (const char* name : {"AX_WORLD_SIZE", "AX_LOCAL_RANK", "AX_NODE_RANK"}) {
      if (env(name)) return InvalidArgument(name, " is set but AX_RANK is not");
    }
  }
  return ctx;
}

std::string describe(const JobContext& ctx) {
  std::string out = str_cat("rank ", ctx.rank, "/", ctx.world, " (local ", ctx.local_rank, "/",
                            ctx.local_world, ", node ", ctx.node_rank, "/", ctx.num_nodes,
                            ") from ", context_source_name(ctx.source));
  if (!ctx.coordinator.empty()) out += ", coordinator " + ctx.coordinator;
  if (!ctx.device.empty()) out += ", device " + ctx.device;
  if (ctx.restart_count > 0) out += str_cat(", restart ", ctx.restart_count);
  return out;
}

StatusOr<std::string> new_job_secret() {
  unsigned char bytes[kSecretBytes];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("getrandom (making the job secret)", errno);
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

Status check_job_secret(const std::string& value) {
  const bool hex = std::all_of(value.begin(), value.end(),
                               [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
  if (!hex || value.size() < kMinSecretDigits || value.size() > kMaxSecretDigits) {
    return InvalidArgument(
        kJobSecretVar, " is malformed (", value.size(),
        " characters; its value is not shown): expected ", kMinSecretDigits, " to ",
        kMaxSecretDigits,
        " hexadecimal digits, as ax-launch, spank_ax.so and the job scripts make");
  }
  return Status::Ok();
}

int coordinator_port(uint32_t job_id, uint32_t step_id) {
  const uint64_t key = static_cast<uint64_t>(job_id) * 64 + step_id % 64;
  return 20000 + static_cast<int>(key % 12000);
}

StatusOr<std::string> first_host(const std::string& nodelist) {
  auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
  };
  std::string host;
  size_t i = 0;
  while (i < nodelist.size() && name_char(nodelist[i])) host += nodelist[i++];
  if (i < nodelist.size() && nodelist[i] == '[' && !host.empty()) {
    size_t close = nodelist.find(']', i);
    if (close == std::string::npos) return InvalidArgument("node list '", nodelist, "': no ']'");
    std::string first = nodelist.substr(i + 1, close - i - 1);
    first = first.substr(0, first.find_first_of(",-"));
    if (first.empty() || !std::all_of(first.begin(), first.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c));
        })) {
      return InvalidArgument("node list '", nodelist, "': expected digits after '['");
    }
    host += first;
    i = close + 1;
    while (i < nodelist.size() && name_char(nodelist[i])) host += nodelist[i++];
  }
  if (i < nodelist.size() && nodelist[i] != ',') {
    return InvalidArgument("node list '", nodelist, "': unexpected character at ", i);
  }
  if (host.empty() || host.size() > kMaxHostname) {
    return InvalidArgument("node list '", nodelist, "': no valid first host name");
  }
  return host;
}

}  // namespace ax::job
