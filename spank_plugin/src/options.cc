#include "options.h"

#include <cstring>
#include <exception>

#include "ax/topology/mesh.h"
#include "config.h"

namespace ax::spank {

namespace {

// SPANK option callbacks receive no context pointer, so the value is kept here.
std::optional<std::string>& mesh_value() {
  static std::optional<std::string> value;
  return value;
}

}  // namespace

StatusOr<std::string> check_mesh_option(const char* value) {
  if (value == nullptr) return InvalidArgument("a spec is required, e.g. --ax-mesh=auto");
  size_t n = strnlen(value, kMaxArgLength + 1);
  if (n > kMaxArgLength) return InvalidArgument("longer than ", kMaxArgLength, " characters");
  std::string spec(value, n);
  StatusOr<topo::MeshSpec> parsed = topo::parse_mesh_spec(spec);
  if (!parsed.ok()) return parsed.status();
  return spec;
}

const std::optional<std::string>& mesh_option() { return mesh_value(); }

int on_mesh_option(int val, const char* optarg, int remote) {
  try {
    StatusOr<std::string> spec = check_mesh_option(optarg);
    if (!spec.ok()) {
      slurm_error("ax: --ax-mesh: %s", spec.status().message().c_str());
      return -1;
    }
    mesh_value() = std::move(spec).value();
    return 0;
  } catch (const std::exception& e) {
    slurm_error("ax: --ax-mesh: %s", e.what());
  } catch (...) {
    slurm_error("ax: --ax-mesh: unexpected error");
  }
  return -1;
}

spank_err_t register_options(spank_t sp) {
  static spank_option option = {
      const_cast<char*>("ax-mesh"),
      const_cast<char*>("spec"),
      const_cast<char*>("ax device mesh: auto, auto:tp=N,sp=N,pp=N or ici=d,f,t;dcn=d,f,t "
                        "(five numbers p,d,f,s,t for pipeline and seq; sets AX_* in every task)"),
      1,
      0,
      on_mesh_option,
  };
  return spank_option_register(sp, &option);
}

}  // namespace ax::spank
