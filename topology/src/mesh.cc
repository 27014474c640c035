// Mesh derivation (docs/architecture.md "Mesh"): find the ICI domains of the job, fit the requested
// shapes to them, and place every rank. The layout follows
// jax.experimental.mesh_utils.create_hybrid_device_mesh: one granule per ICI domain, domains in
// node order, the DCN coordinate the major component.
#include "ax/topology/mesh.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>

namespace ax::topo {
namespace {

constexpr size_t kMaxSpecLength = 128;
constexpr int kMaxDim = 65536;

// Spec text is user input (it reaches slurmstepd): echo it only with odd bytes escaped.
std::string quoted(std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out + "\"";
}

// 1..65536, digits only, no sign, no leading zero; -1 only when allow_fill.
bool parse_dim(std::string_view s, bool allow_fill, int* out) {
  if (allow_fill && s == "-1") {
    *out = -1;
    return true;
  }
  if (s.empty() || s.size() > 5 || s[0] == '0') return false;
  int value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  if (value > kMaxDim) return false;
  *out = value;
  return true;
}

Status parse_shape(std::string_view token, std::string_view value, MeshShape* shape) {
  std::vector<std::string> parts = str_split(value, ',');
  if (parts.size() != 3 && parts.size() != 5) {
    return InvalidArgument(quoted(token),
                           " needs three numbers data,fsdp,tensor or five "
                           "pipeline,data,fsdp,seq,tensor (got ",
                           parts.size(), ")");
  }
  int dims[5];
  int fills = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!parse_dim(parts[i], /*allow_fill=*/true, &dims[i])) {
      return InvalidArgument("bad number ", quoted(parts[i]), " in ", quoted(token),
                             " (expected 1..65536 or -1)");
    }
    if (dims[i] == -1) ++fills;
  }
  if (fills > 1) return InvalidArgument(quoted(token), " has more than one -1");
  *shape = parts.size() == 3 ? MeshShape{dims[0], dims[1], dims[2]}
                             : MeshShape{dims[0], dims[1], dims[2], dims[3], dims[4]};
  return Status::Ok();
}

// "tp=4,pp=2" after "auto:": each of tp, sp, pp at most once.
Status parse_auto_sizes(std::string_view token, std::string_view sizes, MeshSpec* out) {
  bool seen[3] = {false, false, false};
  for (const std::string& item : str_split(sizes, ',')) {
    std::string_view kv = item;
    const size_t eq = kv.find('=');
    const std::string_view key = kv.substr(0, eq);
    const int which = key == "tp" ? 0 : key == "sp" ? 1 : key == "pp" ? 2 : -1;
    int* dim = which == 0 ? &out->auto_tp : which == 1 ? &out->auto_sp : &out->auto_pp;
    if (which < 0 || eq == std::string_view::npos ||
        !parse_dim(kv.substr(eq + 1), /*allow_fill=*/false, dim)) {
      return InvalidArgument("bad token ", quoted(token),
                             " (expected auto or auto:tp=N,sp=N,pp=N, any of them, N 1..65536)");
    }
    if (seen[which]) return InvalidArgument(quoted(token), " gives ", key, " twice");
    seen[which] = true;
  }
  return Status::Ok();
}

// Plain returns here: the caller wraps the message for the user, without a source location.
Status parse_spec_tokens(const std::string& spec, MeshSpec* out) {
  std::vector<std::string> tokens = str_split(spec, ';');
  bool have_ici = false, have_dcn = false, have_auto = false;
  for (const std::string& token : tokens) {
    std::string_view t = token;
    if (t.empty()) return InvalidArgument("empty token (stray ';')");
    bool duplicate = false;
    if (t == "force") {
      duplicate = out->force;
      out->force = true;
    } else if (t == "auto" || starts_with(t, "auto:")) {
      duplicate = have_auto;
      have_auto = true;
      out->kind = MeshSpec::Kind::kAuto;
      if (t != "auto") {
        if (Status s = parse_auto_sizes(t, t.substr(5), out); !s.ok()) return s;
      }
    } else if (starts_with(t, "ici=")) {
      duplicate = have_ici;
      have_ici = true;
      if (Status s = parse_shape(t, t.substr(4), &out->ici); !s.ok()) return s;
    } else if (starts_with(t, "dcn=")) {
      duplicate = have_dcn;
      have_dcn = true;
      if (Status s = parse_shape(t, t.substr(4), &out->dcn); !s.ok()) return s;
    } else {
      return InvalidArgument("unknown token ", quoted(t),
                             " (expected auto, auto:tp=N,sp=N,pp=N, ici=, dcn= or force)");
    }
    if (duplicate) return InvalidArgument(quoted(t), " given twice");
  }
  if (have_auto && (have_ici || have_dcn)) {
    return InvalidArgument("auto cannot be combined with ici=/dcn=");
  }
  if (!have_auto) {
    if (!have_ici || !have_dcn) {
      return InvalidArgument(
          "missing ", have_ici ? "dcn=" : "ici=", " (an explicit mesh needs both ici= and dcn=)");
    }
    out->kind = MeshSpec::Kind::kExplicit;
  }
  return Status::Ok();
}

// The ICI domains of a job: `count` domains of `size` slots each; slot d*size+i is the i-th
// device of domain d, in the order ranks take them.
struct Slot {
  int node;
  int gpu;  // -1: CPU rank
};
struct Domains {
  // What one domain is: a node's CPU ranks, a node whose GPUs are all NVLink-connected, a node
  // without NVLink, one of a node's NVLink islands, or a multi-node NVLink clique.
  enum class Kind { kCpu, kNode, kNodeNoNvlink, kIsland, kClique };
  Kind kind = Kind::kNode;
  int size = 0;
  int count = 0;
  int nodes_per_domain = 1;  // kClique
  // Whom messages speak of: "this node" when one topology stands for every node (the plugin and
  // ax-launch see their own node), "each node" when every node's was given.
  std::string node = "this node";
  std::vector<Slot> slots;
};

const char* unit_of(const Domains& d) { return d.kind == Domains::Kind::kCpu ? "ranks" : "GPUs"; }

// "NVLink domain" where NVLink makes the domain, else "ICI domain".
const char* kind_word(const Domains& d) {
  return d.kind == Domains::Kind::kCpu || d.kind == Domains::Kind::kNodeNoNvlink ? "ICI domain"
                                                                                 : "NVLink domain";
}

// What one domain is, for explanations.
std::string what(const Domains& d) {
  switch (d.kind) {
    case Domains::Kind::kCpu:
      return "CPU ranks, one domain per node";
    case Domains::Kind::kNode:
      return "a node's NVLink-connected GPUs";
    case Domains::Kind::kNodeNoNvlink:
      return "a node without NVLink";
    case Domains::Kind::kIsland:
      return "one NVLink island of a node";
    case Domains::Kind::kClique:
      return str_cat("an NVLink clique of ", d.nodes_per_domain, " nodes");
  }
  return "";
}

// The domain as the user meets it, for errors: "this node has 2".
std::string where(const Domains& d) {
  switch (d.kind) {
    case Domains::Kind::kCpu:
      return str_cat(d.node, " has no GPUs and runs ", d.size,
                     " CPU ranks, one ICI domain per node");
    case Domains::Kind::kNode:
      return str_cat(d.node, " has ", d.size);
    case Domains::Kind::kNodeNoNvlink:
      return str_cat(d.node, " has ", d.size, " GPUs without NVLink, one ICI domain per node");
    case Domains::Kind::kIsland:
      return str_cat(d.node, "'s NVLink islands have ", d.size, " GPUs each");
    case Domains::Kind::kClique:
      return str_cat("an NVLink clique here has ", d.size, " GPUs (", d.nodes_per_domain,
                     " nodes of ", d.size / d.nodes_per_domain, ")");
  }
  return "";
}

// "auto:tp=2 or auto:tp=1": the (at most three) largest tensor sizes below `tp` that divide the
// domain, so that the user can pick the nearest one that fits.
std::string tp_choices(const Domains& d, int tp) {
  std::vector<int> fits;
  for (int t = std::min(tp - 1, d.size); t >= 1 && fits.size() < 3; --t) {
    if (d.size % t == 0) fits.push_back(t);
  }
  std::string out;
  for (size_t i = 0; i < fits.size(); ++i) {
    if (i > 0) out += i + 1 == fits.size() ? " or " : ", ";
    out += str_cat("auto:tp=", fits[i]);
  }
  return out;
}

// Why auto:tp=N does not fit and what to use instead.
Status tp_does_not_fit(const Domains& d, int tp) {
  std::string head = tp > d.size
                         ? str_cat("tensor parallelism of ", tp, " needs ", tp, " ", unit_of(d),
                                   " in one ", kind_word(d), ", ", where(d))
                         : str_cat("tensor parallelism of ", tp, " does not divide the ", d.size,
                                   " ", unit_of(d), " of an ", kind_word(d), " (", where(d), ")");
  std::string more;
  if (d.kind == Domains::Kind::kCpu) {
    more = tp > d.size ? str_cat(", or run ", tp, " ranks per node")
                       : str_cat(", or a multiple of ", tp, " ranks per node");
  }
  return InvalidArgument(head, ": use ", tp_choices(d, tp), more);
}

const Topology& node_topology(const std::vector<Topology>& nodes, int node) {
  return nodes.size() == 1 ? nodes[0] : nodes[node];
}

std::string plural(int n, const char* noun) { return str_cat(n, " ", noun, n == 1 ? "" : "s"); }

std::string join_islands(const std::vector<std::vector<int>>& islands) {
  std::string out;
  for (const auto& island : islands) {
    if (!out.empty()) out += "+";
    out += std::to_string(island.size());
  }
  return out.empty() ? "none" : out;
}

// Islands sorted so that the layout is canonical: GPUs ascending inside an island, islands by
// their first GPU.
std::vector<std::vector<int>> canonical_islands(const Topology& topology) {
  std::vector<std::vector<int>> islands = topology.nvlink_islands();
  for (auto& island : islands) std::sort(island.begin(), island.end());
  std::sort(islands.begin(), islands.end());
  return islands;
}

bool has_fabric(const Gpu& gpu) {
  return !gpu.fabric_cluster_uuid.empty() && gpu.fabric_clique_id >= 0;
}

// Multi-node NVLink: consecutive nodes of one (cluster, clique) form a domain.
StatusOr<Domains> clique_domains(const std::vector<Topology>& nodes, int num_nodes, int gpus) {
  using Key = std::pair<std::string, int>;
  std::map<Key, int> first_node;          // clique -> first node seen in it
  std::vector<std::pair<int, int>> runs;  // [first, last] nodes of each clique
  Key previous;
  for (int n = 0; n < num_nodes; ++n) {
    const Topology& t = node_topology(nodes, n);
    Key key{t.gpus[0].fabric_cluster_uuid, t.gpus[0].fabric_clique_id};
    for (const Gpu& gpu : t.gpus) {
      if (gpu.fabric_cluster_uuid != key.first || gpu.fabric_clique_id != key.second) {
        return InvalidArgument("node ", n, " has GPUs in more than one NVLink clique (GPU 0 in ",
                               key.first, "/", key.second, ", GPU ", gpu.index, " in ",
                               gpu.fabric_cluster_uuid, "/", gpu.fabric_clique_id, ")");
      }
    }
    if (n > 0 && key == previous) {
      runs.back().second = n;
    } else {
      auto [it, inserted] = first_node.emplace(key, n);
      if (!inserted) {
        return InvalidArgument("node ", n, " is in NVLink clique ", key.first, "/", key.second,
                               " like node ", it->second,
                               " but not next to it (list the nodes of a clique contiguously)");
      }
      runs.push_back({n, n});
    }
    previous = std::move(key);
  }
  const int per_clique = runs[0].second - runs[0].first + 1;
  for (const auto& [first, last] : runs) {
    if (last - first + 1 != per_clique) {
      return InvalidArgument("NVLink clique of nodes ", first, "-", last, " has ", last - first + 1,
                             " nodes but the clique of nodes ", runs[0].first, "-", runs[0].second,
                             " has ", per_clique, "; every ICI domain must be the same size");
    }
  }
  Domains d;
  d.kind = Domains::Kind::kClique;
  d.size = gpus * per_clique;
  d.count = static_cast<int>(runs.size());
  d.nodes_per_domain = per_clique;
  d.slots.reserve(static_cast<size_t>(num_nodes) * gpus);
  for (int n = 0; n < num_nodes; ++n) {
    for (int g = 0; g < gpus; ++g) d.slots.push_back({n, g});
  }
  return d;
}

StatusOr<Domains> find_domains(const std::vector<Topology>& nodes, int num_nodes,
                               int tasks_per_node) {
  const Topology& first = nodes[0];
  const int gpus = static_cast<int>(first.gpus.size());
  for (int n = 1; n < static_cast<int>(nodes.size()); ++n) {
    if (nodes[n].gpus.size() != first.gpus.size()) {
      return InvalidArgument("nodes disagree: node ", n, " has ", nodes[n].gpus.size(),
                             " GPUs but node 0 has ", gpus);
    }
  }
  const std::string node = nodes.size() == 1 ? "this node" : "each node";
  if (gpus == 0) {
    Domains d;
    d.kind = Domains::Kind::kCpu;
    d.node = node;
    d.size = tasks_per_node;
    d.count = num_nodes;
    d.slots.reserve(static_cast<size_t>(num_nodes) * tasks_per_node);
    for (int n = 0; n < num_nodes; ++n) {
      for (int i = 0; i < tasks_per_node; ++i) d.slots.push_back({n, -1});
    }
    return d;
  }
  if (tasks_per_node != gpus) {
    return InvalidArgument(tasks_per_node, " tasks per node but ", node, " has ", gpus,
                           " GPUs: run one task per GPU (", gpus, " per node)");
  }

  bool fabric = true;
  for (const Topology& t : nodes) {
    for (const Gpu& gpu : t.gpus) fabric = fabric && has_fabric(gpu);
  }
  if (fabric) {
    StatusOr<Domains> cliques = clique_domains(nodes, num_nodes, gpus);
    if (cliques.ok()) cliques->node = node;
    return cliques;
  }

  const std::vector<std::vector<int>> islands = canonical_islands(first);
  for (int n = 1; n < static_cast<int>(nodes.size()); ++n) {
    std::vector<std::vector<int>> other = canonical_islands(nodes[n]);
    if (other != islands) {
      return InvalidArgument("nodes disagree: node ", n, " has NVLink islands ",
                             join_islands(other), " but node 0 has ", join_islands(islands),
                             other.size() == islands.size() ? " (different GPUs)" : "");
    }
  }
  const bool no_nvlink = std::all_of(islands.begin(), islands.end(),
                                     [](const std::vector<int>& i) { return i.size() == 1; });
  Domains d;
  d.node = node;
  if (islands.size() <= 1 || no_nvlink) {
    // One island, or no NVLink at all: the node is the domain.
    d.kind = islands.size() <= 1 ? Domains::Kind::kNode : Domains::Kind::kNodeNoNvlink;
    d.size = gpus;
    d.count = num_nodes;
    d.slots.reserve(static_cast<size_t>(num_nodes) * gpus);
    for (int n = 0; n < num_nodes; ++n) {
      for (int g = 0; g < gpus; ++g) d.slots.push_back({n, g});
    }
    return d;
  }
  for (const auto& island : islands) {
    if (island.size() != islands[0].size()) {
      return InvalidArgument(node, " has NVLink islands of unequal size (", join_islands(islands),
                             "); ICI domains must be the same size");
    }
  }
  d.kind = Domains::Kind::kIsland;
  d.size = static_cast<int>(islands[0].size());
  d.count = num_nodes * static_cast<int>(islands.size());
  d.slots.reserve(static_cast<size_t>(num_nodes) * gpus);
  for (int n = 0; n < num_nodes; ++n) {
    for (const auto& island : islands) {
      for (int g : island) d.slots.push_back({n, g});
    }
  }
  return d;
}

// Fills the -1 of `shape` so that its product is `target`, the number of `unit` there are
// (`have` says where they are).
Status fit(const char* name, MeshShape* shape, int64_t target, const std::string& unit,
           const std::string& have) {
  int* dims[5] = {&shape->pipeline, &shape->data, &shape->fsdp, &shape->seq, &shape->tensor};
  int64_t known = 1;
  int* fill = nullptr;
  for (int* d : dims) {
    if (*d == -1) {
      fill = d;
    } else {
      known *= *d;
    }
  }
  const std::string given = str_cat(name, "=", shape->to_string());
  if (fill != nullptr) {
    if (target % known != 0) {
      return InvalidArgument(given, " cannot be filled: ", known, " ", unit, " do not divide the ",
                             target, " ", have);
    }
    *fill = static_cast<int>(target / known);
    return Status::Ok();
  }
  if (known != target) {
    return InvalidArgument(given, " covers ", known, " ", unit, " but there are ", target, " ",
                           have, ": make the product ", target, " or let a -1 fill it in");
  }
  return Status::Ok();
}

// The coordinates of the index-th cell of `shape` in row-major order (tensor fastest).
MeshShape row_major(int index, const MeshShape& shape) {
  MeshShape c{0, 0, 0, 0, 0};
  c.tensor = index % shape.tensor;
  index /= shape.tensor;
  c.seq = index % shape.seq;
  index /= shape.seq;
  c.fsdp = index % shape.fsdp;
  index /= shape.fsdp;
  c.data = index % shape.data;
  c.pipeline = index / shape.data;
  return c;
}

// auto's shapes: tensor (tp) and seq (sp) inside the ICI domain, pipeline stages (pp) across
// domains (or, when pp is a multiple of the domain count, every domain holds pp/count stages),
// FSDP over the rest of the domain, data parallel over the rest of the domains.
StatusOr<std::pair<MeshShape, MeshShape>> auto_shapes(const Domains& d, const MeshSpec& spec) {
  const int tp = spec.auto_tp, sp = spec.auto_sp, pp = spec.auto_pp;
  if (tp < 1 || d.size % tp != 0) return tp_does_not_fit(d, tp);
  const std::string unit = unit_of(d);
  if (sp < 1 || d.size % (int64_t{tp} * sp) != 0) {
    return InvalidArgument("sequence parallelism of ", sp, " x tensor parallelism of ", tp,
                           " needs a multiple of ", int64_t{tp} * sp, " ", unit, " in one ",
                           kind_word(d), " (a seq group stays inside it), ", where(d),
                           ": choose sp and tp whose product divides ", d.size);
  }
  int dcn_pp = pp, ici_pp = 1;
  if (pp < 1 || (d.count % pp != 0 && pp % d.count != 0)) {
    return InvalidArgument("pipeline parallelism of ", pp,
                           " puts one stage per ICI domain, but the", " job has ",
                           plural(d.count, "domain"), ": use a pipeline size that", " divides ",
                           d.count, " or is a multiple of it");
  }
  if (pp > d.count) {
    dcn_pp = d.count;
    ici_pp = pp / d.count;
    if (d.size % (int64_t{ici_pp} * sp * tp) != 0) {
      return InvalidArgument("pipeline parallelism of ", pp, " over ", plural(d.count, "domain"),
                             " puts ", ici_pp, " stages in each ", kind_word(d), ", and ", ici_pp,
                             " x seq ", sp, " x tensor ", tp, " does not divide its ", d.size, " ",
                             unit, " (", where(d), ")");
    }
  }
  MeshShape ici{ici_pp, 1, d.size / (ici_pp * sp * tp), sp, tp};
  MeshShape dcn{dcn_pp, d.count / dcn_pp, 1, 1, 1};
  return std::make_pair(ici, dcn);
}

std::string auto_explanation(const Domains& d, const MeshSpec& spec, const MeshShape& ici,
                             const MeshShape& dcn) {
  const std::string unit = unit_of(d);
  if (spec.auto_tp == 1 && spec.auto_sp == 1 && spec.auto_pp == 1) {
    return str_cat("auto: FSDP over the ", d.size, " ", unit, " of each ICI domain (", what(d),
                   "), data parallel across ", plural(d.count, "domain"));
  }
  std::string name = "auto:";
  std::string inside;
  auto add = [&](const char* key, int value, const char* axis) {
    if (value == 1) return;
    name += str_cat(name.back() == ':' ? "" : ",", key, "=", value);
    if (axis != nullptr) inside += str_cat(axis, " ", value, " x ");
  };
  add("tp", spec.auto_tp, "tensor");
  add("sp", spec.auto_sp, "seq");
  add("pp", spec.auto_pp, nullptr);
  std::string stages;
  if (spec.auto_pp > 1) {
    stages = str_cat("pipeline ", spec.auto_pp, " across the domains");
    if (ici.pipeline > 1) stages += str_cat(" (", ici.pipeline, " stages inside each)");
    stages += ", ";
  }
  return str_cat(
      name, ": ", stages, inside, "FSDP ", ici.fsdp, " inside each ICI domain of ", d.size, " ",
      unit, " (", what(d), "), data parallel across ",
      spec.auto_pp > 1 ? plural(dcn.data, "group") + " of domains" : plural(d.count, "domain"));
}

}  // namespace

std::string MeshShape::to_string() const {
  return pipeline == 1 && seq == 1 ? str_cat(data, ",", fsdp, ",", tensor) : full_string();
}

std::string MeshShape::full_string() const {
  return str_cat(pipeline, ",", data, ",", fsdp, ",", seq, ",", tensor);
}

std::string MeshShape::named() const {
  return str_cat("pipeline=", pipeline, " data=", data, " fsdp=", fsdp, " seq=", seq,
                 " tensor=", tensor);
}

StatusOr<MeshSpec> parse_mesh_spec(const std::string& spec) {
  if (spec.size() > kMaxSpecLength) {
    return InvalidArgument("mesh spec is ", spec.size(), " characters long; at most ",
                           kMaxSpecLength, " allowed");
  }
  if (spec.empty())
    return InvalidArgument(
        "mesh spec is empty (expected auto, auto:tp=N,sp=N,pp=N or "
        "ici=d,f,t;dcn=d,f,t[;force], five numbers p,d,f,s,t allowed)");
  MeshSpec out;
  Status status = parse_spec_tokens(spec, &out);
  if (!status.ok()) return InvalidArgument("mesh spec ", quoted(spec), ": ", status.message());
  return out;
}

StatusOr<Mesh> derive_mesh(const std::vector<Topology>& nodes, int num_nodes, int tasks_per_node,
                           const MeshSpec& spec) {
  if (num_nodes < 1) return InvalidArgument("number of nodes must be >= 1 (got ", num_nodes, ")");
  if (tasks_per_node < 1) {
    return InvalidArgument("tasks_per_node must be >= 1 (got ", tasks_per_node, ")");
  }
  if (nodes.size() != 1 && nodes.size() != static_cast<size_t>(num_nodes)) {
    return InvalidArgument("got ", nodes.size(), " node topologies for ", num_nodes,
                           " nodes (pass one per node, or one shared by all)");
  }
  if (int64_t{num_nodes} * tasks_per_node > (int64_t{1} << 24)) {
    return InvalidArgument(num_nodes, " nodes x ", tasks_per_node, " tasks is too many ranks");
  }
  StatusOr<Domains> found = find_domains(nodes, num_nodes, tasks_per_node);
  if (!found.ok()) return found.status();  // the user's message, without a source location
  const Domains& domains = *found;
  const std::string unit = unit_of(domains);

  Mesh mesh;
  mesh.num_nodes = num_nodes;
  mesh.tasks_per_node = tasks_per_node;
  mesh.domain_size = domains.size;
  if (spec.kind == MeshSpec::Kind::kAuto) {
    StatusOr<std::pair<MeshShape, MeshShape>> shapes = auto_shapes(domains, spec);
    if (!shapes.ok()) return shapes.status();
    std::tie(mesh.ici, mesh.dcn) = *shapes;
    mesh.explanation = auto_explanation(domains, spec, mesh.ici, mesh.dcn);
  } else {
    mesh.ici = spec.ici;
    mesh.dcn = spec.dcn;
    // Plain returns: the message is the user's, without a source location.
    Status s = fit("ici", &mesh.ici, domains.size, unit,
                   str_cat("in one ", kind_word(domains), " (", where(domains), ")"));
    if (!s.ok()) return s;
    s = fit("dcn", &mesh.dcn, domains.count, "ICI domains",
            str_cat("in the job (", plural(num_nodes, "node"), " of ", tasks_per_node, " ranks)"));
    if (!s.ok()) return s;
    mesh.explanation =
        str_cat("explicit: ici=", mesh.ici.to_string(), " covers each ICI domain of ", domains.size,
                " ", unit, " (", what(domains), "), dcn=", mesh.dcn.to_string(), " the ",
                domains.count, " domains");
  }
  if (mesh.dcn.tensor > 1 && !spec.force) {
    return InvalidArgument("tensor parallelism across DCN (dcn tensor=", mesh.dcn.tensor,
                           ") crosses the network; pass force to allow it");
  }
  if (mesh.dcn.seq > 1 && !spec.force) {
    return InvalidArgument("sequence parallelism across DCN (dcn seq=", mesh.dcn.seq,
                           ") crosses the network; pass force to allow it");
  }

  // Rank r takes slot r: domain r / size, and inside the domain the ICI coordinates in row-major
  // [pipeline, data, fsdp, seq, tensor] order, tensor fastest, which is the slot order.
  const int ranks = static_cast<int>(domains.slots.size());
  mesh.placement.resize(ranks);
  std::vector<int> next_local(num_nodes, 0);
  for (int r = 0; r < ranks; ++r) {
    const Slot& slot = domains.slots[r];
    Placement& p = mesh.placement[r];
    p.rank = r;
    p.node = slot.node;
    p.local_rank = next_local[slot.node]++;
    p.gpu = slot.gpu;
    p.domain = r / domains.size;
    const MeshShape in = row_major(r % domains.size, mesh.ici);
    const MeshShape across = row_major(r / domains.size, mesh.dcn);
    p.coord = {across.pipeline * mesh.ici.pipeline + in.pipeline,
               across.data * mesh.ici.data + in.data, across.fsdp * mesh.ici.fsdp + in.fsdp,
               across.seq * mesh.ici.seq + in.seq, across.tensor * mesh.ici.tensor + in.tensor};
  }
  return mesh;
}

}  // namespace ax::topo
