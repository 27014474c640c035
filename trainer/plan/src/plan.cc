// The planner (plan.h, docs/plan.md): layouts enumerated, each sized by the model's own
// dry-run plan (Model::plan) and timed by the cost model, ranked.
#include "ax/trainer/plan/plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <tuple>

#include "ax/common/strings.h"
#include "ax/trainer/models/model.h"

namespace ax::train::plan {
namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

// The ordered pairs and triples of positive integers whose product is n.
std::vector<std::vector<int>> factorizations(int n, int parts) {
  std::vector<std::vector<int>> out;
  if (parts == 1) return {{n}};
  for (int a = 1; a <= n; ++a) {
    if (n % a != 0) continue;
    for (std::vector<int> rest : factorizations(n / a, parts - 1)) {
      rest.insert(rest.begin(), a);
      out.push_back(std::move(rest));
    }
  }
  return out;
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

bool is_t5(const Config& c) { return c.model.family == ModelFamily::kT5; }

int64_t tokens_per_row(const Config& c) {
  return c.train.seq_len + (is_t5(c) ? c.train.encoder_seq_len : 0);
}

DType plan_dtype(const Config& c) {
  return c.train.precision == "float32" ? DType::kF32 : DType::kBF16;  // auto: bf16 on CUDA
}

StatusOr<int64_t> global_batch_of(const Config& c, int gpus) {
  if (c.train.global_batch > 0) return c.train.global_batch;
  const double global = c.train.percore_batch_size * gpus;
  if (global < 1 || std::abs(global - std::round(global)) > 1e-9) {
    return InvalidArgument("GLOBAL_BATCH = PERCORE_BATCH_SIZE ", c.train.percore_batch_size, " x ",
                           gpus, " GPUs = ", global,
                           " is not a whole number of sequences: set train.global_batch or "
                           "PERCORE_BATCH_SIZE");
  }
  return static_cast<int64_t>(std::llround(global));
}

ModelOptions model_options(const Config& c, bool recompute, DType dtype) {
  return {.recompute_layers = recompute,
          .encoder_seq_len = c.train.encoder_seq_len,
          .z_loss = static_cast<float>(c.train.z_loss),
          .planned_dtype = dtype};
}

StatusOr<std::unique_ptr<Model>> plan_model(const Config& c, int64_t vocab, int tensor, int fsdp,
                                            int64_t micro_batch, bool recompute, DType dtype) {
  ModelParallel par;
  par.tensor_size = tensor;
  par.fsdp_size = fsdp;
  return Model::plan(c.model, vocab, micro_batch, c.train.seq_len, par,
                     model_options(c, recompute, dtype));
}

// `model`'s store on `layout` with an activation arena of `activation_bytes`.
Memory memory_of(const Model& model, double activation_bytes, const Layout& layout,
                 const CostConstants& k) {
  const StoreBytes sb = model.store_bytes();
  Memory m;
  m.parameters = static_cast<double>(sb.master);
  m.gradients = static_cast<double>(sb.gradients);
  m.optimizer = 2.0 * static_cast<double>(sb.master);  // AdamW's m and v over the master shard
  m.weights = static_cast<double>(sb.compute + sb.gathered);
  m.store_scratch = static_cast<double>(sb.scratch);
  m.activations = activation_bytes;
  // The job's communicators of more than one rank (comm::MeshGroups).
  int comms = 0;
  comms += layout.data() * layout.fsdp() * layout.tensor() > 1 ? 1 : 0;  // world
  comms += layout.data() > 1 ? 1 : 0;
  comms += layout.fsdp() > 1 ? 2 : 0;  // fsdp and fsdp_prefetch
  comms += layout.tensor() > 1 ? 1 : 0;
  comms += layout.data() * layout.fsdp() > 1 ? 1 : 0;  // replica
  m.comm = comms * k.comm_buffer_bytes;
  m.workspace = k.context_bytes + k.workspace_bytes;
  return m;
}

// A ring collective over `n` ranks moving `bytes` (the whole buffer): all-reduce sends
// 2 (n-1)/n of it per rank, all-gather and reduce-scatter (n-1)/n.
double ring_seconds(double bytes, int n, double factor, double bandwidth, double latency) {
  if (n <= 1) return 0;
  return factor * (n - 1) / n * bytes / bandwidth + latency;
}

struct ModelFacts {
  double flops_per_row = 0;
  double gemm_flops_per_row = 0;
  int64_t num_units = 0;
  double unit0_elems = 0, layer_elems = 0;  // per tensor rank, padded for fsdp
  double act_bytes = 0;
  int encoder_layers = 0, decoder_layers = 0;
};

ModelFacts facts_of(const Model& model, double activation_bytes, const Config& c) {
  ModelFacts f;
  f.flops_per_row = model.flops_per_row();
  const ParamLayout& l = model.layout();
  const double te = static_cast<double>(c.train.encoder_seq_len);
  const double td = static_cast<double>(c.train.seq_len);
  const double all = static_cast<double>(logical_matmul_parameters(l));
  if (is_t5(c)) {
    const double enc = static_cast<double>(logical_matmul_parameters(l, "enc."));
    f.gemm_flops_per_row = 6.0 * (enc * te + (all - enc) * td);
    f.encoder_layers = static_cast<int>(c.model.num_layers);
    f.decoder_layers = static_cast<int>(c.model.num_decoder_layers > 0 ? c.model.num_decoder_layers
                                                                       : c.model.num_layers);
  } else {
    f.gemm_flops_per_row = 6.0 * all * td;
    f.decoder_layers = static_cast<int>(c.model.num_layers);
  }
  if (l.shards() > 1) {
    f.unit0_elems = static_cast<double>(l.units()[0].size);
    for (size_t u = 1; u < l.units().size(); ++u) {
      f.layer_elems += static_cast<double>(l.units()[u].size);
    }
  }
  f.act_bytes = activation_bytes;
  return f;
}

StepTime step_time(const ModelFacts& f, const Config& c, const Cluster& cl, const Layout& lay,
                   int64_t rows_per_replica, int64_t microbatches, int64_t micro_batch,
                   bool recompute, double gradient_bytes, const CostConstants& k) {
  StepTime t;
  const GpuSpec& g = cl.gpu;
  const double tp = lay.tensor();
  const double rows = static_cast<double>(rows_per_replica);
  const double gemm = rows * f.gemm_flops_per_row / tp;
  const double attention = rows * std::max(0.0, f.flops_per_row - f.gemm_flops_per_row) / tp;
  // Recomputation runs each layer's forward pass again: a third of the GEMMs, the forward part
  // of attention (its backward is 2.5 forwards: FlashAttention's count).
  t.gemm_s = gemm * (recompute ? 4.0 / 3.0 : 1.0) / (g.bf16_flops * k.gemm_efficiency);
  const double attn_fwd = attention / 3.5, attn_bwd = attention - attn_fwd;
  t.attention_s =
      attn_fwd * (recompute ? 2 : 1) / k.attention_fwd_flops + attn_bwd / k.attention_bwd_flops;
  // Memory-bound ops: every activation byte written once and read twice forward and backward,
  // and its gradient once (4x the arena per micro-batch); AdamW reads p, g, m, v and writes
  // p, m, v (7 x 4 bytes per element of the shard).
  const double act_traffic = 4.0 * f.act_bytes * static_cast<double>(microbatches);
  t.memory_s = (act_traffic + 7.0 * gradient_bytes) / (g.hbm_bytes_per_s * k.hbm_efficiency);
  const double ds = c.train.precision == "float32" ? 4 : 2;
  const double nvlink = g.nvlink_bytes_per_s * k.link_efficiency;
  const double network = g.network_bytes_per_s * k.link_efficiency;
  // Tensor parallelism: Megatron's two all-reduces per branch forward and backward (three
  // branches in T5's decoder), of the (rows, model_dim) stream of one micro-batch.
  if (lay.tensor() > 1) {
    const double mb = static_cast<double>(micro_batch);
    const double dec_bytes = mb * c.train.seq_len * c.model.model_dim * ds;
    const double enc_bytes = mb * c.train.encoder_seq_len * c.model.model_dim * ds;
    const double fwd_passes = recompute ? 2 : 1;
    const int dec_branches = is_t5(c) ? 3 : 2;
    const double per_mb = f.decoder_layers * dec_branches * (fwd_passes + 1) *
                              ring_seconds(dec_bytes, lay.tensor(), 2, nvlink, k.ici_latency_s) +
                          f.encoder_layers * 2 * 2 *
                              ring_seconds(enc_bytes, lay.tensor(), 2, nvlink, k.ici_latency_s) +
                          2 * ring_seconds(dec_bytes, lay.tensor(), 2, nvlink, k.ici_latency_s);
    t.tensor_s = per_mb * static_cast<double>(microbatches);
  }
  // FSDP: each layer gathered (compute dtype) for the forward and again for the backward pass
  // but the last two, still in their slots (docs/benchmarks-sharding.md measured exactly that),
  // unit 0 once a step; every unit's f32 gradients reduce-scattered once per micro-batch.
  if (lay.fsdp() > 1) {
    const double bw = lay.dcn[1] > 1 ? network : nvlink;
    const double lat = lay.dcn[1] > 1 ? k.dcn_latency_s : k.ici_latency_s;
    const double layers = f.encoder_layers + f.decoder_layers;
    const double mbs = static_cast<double>(microbatches);
    t.fsdp_gather_s = ring_seconds(f.unit0_elems * ds, lay.fsdp(), 1, bw, lat) +
                      mbs * (2 * layers - std::min(layers, 2.0)) *
                          ring_seconds(f.layer_elems / layers * ds, lay.fsdp(), 1, bw, lat);
    t.fsdp_scatter_s =
        mbs * (ring_seconds(f.unit0_elems * 4, lay.fsdp(), 1, bw, lat) +
               layers * ring_seconds(f.layer_elems / layers * 4, lay.fsdp(), 1, bw, lat));
    // The gathers run on their own stream beside the compute (FSDP prefetch).
    t.exposed_gather_s = std::max(0.0, t.fsdp_gather_s - (t.gemm_s + t.attention_s));
  }
  if (lay.data() > 1) {
    const bool dcn = lay.dcn[0] > 1;
    t.data_s = ring_seconds(gradient_bytes, lay.data(), 2, dcn ? network : nvlink,
                            dcn ? k.dcn_latency_s : k.ici_latency_s);
  }
  t.total_s = t.gemm_s + t.attention_s + t.memory_s + t.tensor_s + t.exposed_gather_s +
              t.fsdp_scatter_s + t.data_s;
  return t;
}

std::string gib(double bytes) { return str_cat(fixed(bytes / kGiB, 1), " GiB"); }

std::string pad(std::string s, size_t width, bool right = false) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

std::string number_with_commas(double v) {
  std::string digits = std::to_string(static_cast<int64_t>(std::llround(v)));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

const std::vector<GpuSpec>& gpu_table() {
  // docs/plan.md "The GPU table" gives each figure's source.
  static const std::vector<GpuSpec> table = {
      {"H100-80GB", 81559 * kMiB, 989.4e12, 3.35e12, 450e9, 50e9},
      {"H200", 143771 * kMiB, 989.4e12, 4.8e12, 450e9, 50e9},
      {"A100-80GB", 81920 * kMiB, 312e12, 2.039e12, 300e9, 25e9},
  };
  return table;
}

StatusOr<GpuSpec> find_gpu(std::string_view name) {
  // The driver's names (nvidia-smi, NVML, hwloc's GPUModel) of the table's GPUs.
  const auto has = [&](std::string_view part) { return name.find(part) != name.npos; };
  std::string_view table_name = name;
  if (has("NVIDIA H100") && has("80GB")) table_name = "H100-80GB";
  if (has("NVIDIA H200")) table_name = "H200";
  if (has("NVIDIA A100") && has("80GB")) table_name = "A100-80GB";
  std::string known;
  for (const GpuSpec& g : gpu_table()) {
    if (g.name == table_name) return g;
    known += str_cat(known.empty() ? "" : ", ", g.name);
  }
  return NotFound("unknown GPU '", name, "': the table has ", known);
}

StatusOr<Device> cpu_device(std::string_view rates, double memory_bytes) {
  std::map<std::string, double> v = {
      {"gemm", 0}, {"attention", 0}, {"memory", 0}, {"link", 0}, {"latency", 0}};
  std::string s(rates);
  size_t at = 0;
  int seen = 0;
  while (at < s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    const std::string part = s.substr(at, comma - at);
    const size_t eq = part.find('=');
    auto it = v.find(part.substr(0, eq));
    char* end = nullptr;
    const double x = eq == part.npos ? 0 : std::strtod(part.c_str() + eq + 1, &end);
    if (it == v.end() || eq == part.npos || end == part.c_str() + eq + 1 || *end != '\0' ||
        !(x > 0 || (x == 0 && it->first == "latency")) || it->second != 0) {
      return InvalidArgument("--cpu ", rates,
                             ": expected gemm=GFLOP/s,attention=GFLOP/s,memory=GB/s,link=GB/s,"
                             "latency=us, each once and above 0 (latency may be 0)");
    }
    it->second = x;
    ++seen;
    at = comma + 1;
  }
  if (seen != 5) {
    return InvalidArgument("--cpu ", rates, ": all of gemm, attention, memory, link, latency");
  }
  Device d;
  d.gpu = {"CPU",           memory_bytes,   v["gemm"] * 1e9, v["memory"] * 1e9,
           v["link"] * 1e9, v["link"] * 1e9};
  CostConstants& k = d.constants;
  k.gemm_efficiency = k.hbm_efficiency = k.link_efficiency = 1;
  k.attention_fwd_flops = k.attention_bwd_flops = v["attention"] * 1e9;
  k.ici_latency_s = k.dcn_latency_s = v["latency"] * 1e-6;
  k.context_bytes = k.comm_buffer_bytes = k.workspace_bytes = 0;
  return d;
}

StatusOr<Cluster> cluster_from_topology(const topo::Topology& topology, int nodes,
                                        std::string_view gpu, std::string* summary) {
  const std::vector<topo::Gpu>& gpus = topology.gpus;
  if (gpus.empty()) {
    return InvalidArgument("the topology (", topology.source, ") has no GPU");
  }
  for (const topo::Gpu& g : gpus) {
    if (g.name != gpus.front().name) {
      return InvalidArgument("the topology mixes GPU kinds ('", gpus.front().name, "', '", g.name,
                             "'): plan one kind per node");
    }
  }
  std::string_view kind = gpu.empty() ? std::string_view(gpus.front().name) : gpu;
  if (kind.empty()) {
    return InvalidArgument("the topology does not name its GPUs: give --gpu");
  }
  StatusOr<GpuSpec> spec = find_gpu(kind);
  if (!spec.ok()) return spec.status();
  Cluster cl{nodes, static_cast<int>(gpus.size()), *spec};
  const size_t island = topology.nvlink_islands().front().size();
  if (island < gpus.size()) cl.gpu.nvlink_bytes_per_s = kPcieBytesPerS;
  const double nics_per_gpu =
      std::min(1.0, static_cast<double>(topology.nics.size()) / static_cast<double>(gpus.size()));
  cl.gpu.network_bytes_per_s *= nics_per_gpu;
  if (summary != nullptr) {
    *summary = str_cat(
        "topology: ", gpus.size(), " x ", gpus.front().name.empty() ? "GPU" : gpus.front().name,
        " (", cl.gpu.name, "), ",
        island == gpus.size()
            ? std::string("one NVLink domain")
            : str_cat("largest NVLink island ", island, ": inside a node at PCIe's ",
                      fixed(kPcieBytesPerS / 1e9, 0), " GB/s"),
        ", ", topology.nics.size(), " NIC(s): network ", fixed(cl.gpu.network_bytes_per_s / 1e9, 1),
        " GB/s per GPU (", topology.source, ")\n");
  }
  return cl;
}

std::string Layout::ici_string() const { return str_cat(ici[0], ",", ici[1], ",", ici[2]); }
std::string Layout::dcn_string() const { return str_cat(dcn[0], ",", dcn[1], ",", dcn[2]); }
std::string Layout::name() const {
  return str_cat("data ", data(), " fsdp ", fsdp(), " tensor ", tensor());
}

namespace {

// `unit` "GPUs" or "nodes", `owner` "a node has" or "the cluster has".
StatusOr<std::vector<int>> parse_shape(std::string_view text, int total, const char* what,
                                       const char* unit, const char* owner) {
  std::string s(text);
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  std::vector<int> v;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    const std::string part = s.substr(at, comma - at);
    char* end = nullptr;
    const long n = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || (n < 1 && n != -1) || n > 65536) {
      return InvalidArgument(what, "=", text,
                             ": expected three numbers data,fsdp,tensor (each >= 1, or one -1)");
    }
    v.push_back(static_cast<int>(n));
    at = comma + 1;
  }
  if (v.size() != 3 || std::count(v.begin(), v.end(), -1) > 1) {
    return InvalidArgument(what, "=", text,
                           ": expected three numbers data,fsdp,tensor (at most one -1)");
  }
  int known = 1;
  for (int n : v) known *= n == -1 ? 1 : n;
  for (int& n : v) {
    if (n == -1) n = total % known == 0 ? total / known : 0;
  }
  if (v[0] * v[1] * v[2] != total) {
    return InvalidArgument(what, "=", text, " covers ", known, " ", unit, " but ", owner, " ",
                           total, ": make the product ", total, " or let a -1 fill it in");
  }
  return v;
}

}  // namespace

StatusOr<Layout> parse_layout(std::string_view ici, std::string_view dcn, const Cluster& cluster) {
  // Plain returns: the user's line carries no source location.
  StatusOr<std::vector<int>> ici_shape =
      parse_shape(ici, cluster.gpus_per_node, "ICI_MESH_SHAPE", "GPUs", "a node has");
  if (!ici_shape.ok()) return ici_shape.status();
  StatusOr<std::vector<int>> dcn_shape =
      parse_shape(dcn, cluster.nodes, "DCN_MESH_SHAPE", "nodes", "the cluster has");
  if (!dcn_shape.ok()) return dcn_shape.status();
  const std::vector<int>& i = *ici_shape;
  const std::vector<int>& d = *dcn_shape;
  if (d[2] != 1) {
    return InvalidArgument("DCN_MESH_SHAPE=", dcn, ": tensor parallelism of ", d[2],
                           " across nodes; ax keeps tensor groups inside a node");
  }
  Layout l;
  std::copy(i.begin(), i.end(), l.ici);
  std::copy(d.begin(), d.end(), l.dcn);
  return l;
}

StatusOr<Memory> rank_memory(const Config& config, int64_t vocab, const Layout& layout,
                             int64_t micro_batch, bool recompute, DType dtype,
                             const CostConstants& constants) {
  AX_ASSIGN_OR_RETURN(
      std::unique_ptr<Model> model,
      plan_model(config, vocab, layout.tensor(), layout.fsdp(), micro_batch, recompute, dtype));
  return memory_of(*model, static_cast<double>(model->activation_bytes()), layout, constants);
}

StatusOr<Plan> make_plan(const PlanRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  const Config& c = request.config;
  const Cluster& cl = request.cluster;
  if (cl.nodes < 1 || cl.gpus_per_node < 1) {
    return InvalidArgument("a cluster needs at least one node and one GPU per node, got ", cl.nodes,
                           " x ", cl.gpus_per_node);
  }
  if (request.vocab < 1) return InvalidArgument("the vocabulary is empty");
  Plan plan;
  plan.cluster = cl;
  plan.constants = request.constants;
  plan.experiment = c.experiment;
  StatusOr<int64_t> global = global_batch_of(c, cl.gpus());
  if (!global.ok()) return global.status();  // the user's line, without a source location
  plan.global_batch = *global;
  plan.tokens_per_row = tokens_per_row(c);
  const DType dtype = plan_dtype(c);
  const CostConstants& k = request.constants;
  // Model::plan once per (tensor, fsdp) for the store (at one sequence, no recomputation) and
  // once per (tensor, micro-batch, recomputation) for the activations (at fsdp 1: the activation
  // plan does not depend on fsdp), so that a 96-layer model plans in a second.
  std::map<std::pair<int, int>, std::unique_ptr<Model>> stores;
  std::map<std::tuple<int, int64_t, bool>, double> arenas;  // < 0: refused
  std::map<std::string, bool> noted;
  auto note = [&](const std::string& line) {
    if (!noted[line]) plan.notes.push_back(line);
    noted[line] = true;
  };
  auto refused = [&](int tensor, const Status& status) {
    note(str_cat("tensor ", tensor, ": ", status.message()));
  };
  note(
      "pipeline and seq axes are not planned yet (ax-train trains pipeline stages and seq "
      "slices of gpt and llama)");
  if (is_t5(c)) {
    note("recomputation is not planned for t5 (train.recompute=layer is not built for it)");
  }
  for (const std::vector<int>& ici : factorizations(cl.gpus_per_node, 3)) {
    for (const std::vector<int>& dcn2 : factorizations(cl.nodes, 2)) {
      Layout lay;
      std::copy(ici.begin(), ici.end(), lay.ici);
      lay.dcn[0] = dcn2[0];
      lay.dcn[1] = dcn2[1];
      if (request.only && (lay.ici_string() != request.only->ici_string() ||
                           lay.dcn_string() != request.only->dcn_string())) {
        continue;
      }
      ++plan.layouts;
      const int64_t replicas = static_cast<int64_t>(lay.data()) * lay.fsdp();
      if (plan.global_batch % replicas != 0) {
        note(str_cat("layouts with ", replicas, " data x fsdp replicas: GLOBAL_BATCH ",
                     plan.global_batch, " does not split evenly over them"));
        continue;
      }
      auto store = stores.find({lay.tensor(), lay.fsdp()});
      if (store == stores.end()) {
        StatusOr<std::unique_ptr<Model>> m =
            plan_model(c, request.vocab, lay.tensor(), lay.fsdp(), 1, false, dtype);
        if (!m.ok()) refused(lay.tensor(), m.status());
        store =
            stores
                .emplace(std::make_pair(lay.tensor(), lay.fsdp()), m.ok() ? std::move(*m) : nullptr)
                .first;
      }
      if (store->second == nullptr) continue;
      const Model& model = *store->second;
      const int64_t rows = plan.global_batch / replicas;
      for (int64_t mbs : divisors(rows)) {
        if (request.microbatches && mbs != *request.microbatches) continue;
        for (bool recompute : {false, true}) {
          if (recompute && is_t5(c)) continue;
          if (request.recompute && recompute != *request.recompute) continue;
          const int64_t micro = rows / mbs;
          auto arena = arenas.find({lay.tensor(), micro, recompute});
          if (arena == arenas.end()) {
            StatusOr<std::unique_ptr<Model>> m =
                plan_model(c, request.vocab, lay.tensor(), 1, micro, recompute, dtype);
            if (!m.ok()) refused(lay.tensor(), m.status());
            arena = arenas
                        .emplace(std::make_tuple(lay.tensor(), micro, recompute),
                                 m.ok() ? static_cast<double>((*m)->activation_bytes()) : -1.0)
                        .first;
          }
          if (arena->second < 0) continue;
          if (plan.flops_per_row == 0) {
            plan.flops_per_row = model.flops_per_row();
            plan.num_parameters = 0;
            for (const ParamSpec& s : model.layout().specs()) {
              int64_t n = 1;
              for (int64_t d : s.logical_shape) n *= d;
              plan.num_parameters += static_cast<double>(n);
            }
          }
          Candidate cand;
          cand.layout = lay;
          cand.microbatches = mbs;
          cand.micro_batch = micro;
          cand.recompute = recompute;
          cand.memory = memory_of(model, arena->second, lay, k);
          cand.fits = cand.memory.total() <= cl.gpu.memory_bytes;
          cand.time = step_time(facts_of(model, arena->second, c), c, cl, lay, rows, mbs, micro,
                                recompute, cand.memory.gradients, k);
          const double rows_per_s = static_cast<double>(plan.global_batch) / cand.time.total_s;
          cand.tokens_per_s = rows_per_s * static_cast<double>(plan.tokens_per_row);
          cand.mfu = rows_per_s * plan.flops_per_row / (cl.gpus() * cl.gpu.bf16_flops);
          plan.candidates.push_back(cand);
        }
      }
    }
  }
  std::stable_sort(plan.candidates.begin(), plan.candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     if (a.fits != b.fits) return a.fits;
                     if (a.time.total_s != b.time.total_s) return a.time.total_s < b.time.total_s;
                     return a.memory.total() < b.memory.total();
                   });
  plan.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return plan;
}

int smallest_fitting_nodes(const PlanRequest& request, int max_nodes) {
  // A layout's least memory is at micro-batches of one sequence with recomputation (where the
  // family has it): a node count fits when some layout fits so. Model::plan per (tensor, fsdp).
  const Config& c = request.config;
  const bool recompute = !is_t5(c);
  std::map<std::pair<int, int>, std::unique_ptr<Model>> models;
  for (int m = request.cluster.nodes + 1; m <= max_nodes; ++m) {
    Cluster cl = request.cluster;
    cl.nodes = m;
    StatusOr<int64_t> global = global_batch_of(c, cl.gpus());
    if (!global.ok()) continue;
    for (const std::vector<int>& ici : factorizations(cl.gpus_per_node, 3)) {
      for (const std::vector<int>& dcn2 : factorizations(m, 2)) {
        Layout lay;
        std::copy(ici.begin(), ici.end(), lay.ici);
        lay.dcn[0] = dcn2[0];
        lay.dcn[1] = dcn2[1];
        if (*global % (static_cast<int64_t>(lay.data()) * lay.fsdp()) != 0) continue;
        auto key = std::make_pair(lay.tensor(), lay.fsdp());
        auto it = models.find(key);
        if (it == models.end()) {
          StatusOr<std::unique_ptr<Model>> model =
              plan_model(c, request.vocab, lay.tensor(), lay.fsdp(), 1, recompute, plan_dtype(c));
          it = models.emplace(key, model.ok() ? std::move(*model) : nullptr).first;
        }
        if (it->second != nullptr &&
            memory_of(*it->second, static_cast<double>(it->second->activation_bytes()), lay,
                      request.constants)
                    .total() <= cl.gpu.memory_bytes) {
          return m;
        }
      }
    }
  }
  return 0;
}

std::string format_table(const Plan& plan, size_t rows) {
  const Cluster& cl = plan.cluster;
  const CostConstants& k = plan.constants;
  std::string out =
      str_cat("plan: ", plan.experiment, " on ", cl.nodes, " x ", cl.gpus_per_node, " ",
              cl.gpu.name, " (", fixed(plan.num_parameters / 1e9, 2), "B parameters, GLOBAL_BATCH ",
              plan.global_batch, " x ", plan.tokens_per_row, " tokens): ", plan.candidates.size(),
              " plans over ", plan.layouts, " data x fsdp x tensor layouts, ",
              std::count_if(plan.candidates.begin(), plan.candidates.end(),
                            [](const Candidate& c) { return c.fits; }),
              " fit in ", gib(cl.gpu.memory_bytes), " (", fixed(plan.seconds, 2), " s)\n");
  out += str_cat(pad("#", 4), pad("ICI d,f,t", 11), pad("DCN d,f,t", 11), pad("mb x rows", 11),
                 pad("recompute", 10), pad("memory/GPU", 12, true), pad("fits", 6, true),
                 pad("step", 10, true), pad("tokens/s", 13, true), pad("MFU", 8, true), "\n");
  for (size_t i = 0; i < std::min(rows, plan.candidates.size()); ++i) {
    const Candidate& c = plan.candidates[i];
    out += str_cat(
        pad(std::to_string(i + 1), 4), pad(c.layout.ici_string(), 11),
        pad(c.layout.dcn_string(), 11), pad(str_cat(c.microbatches, " x ", c.micro_batch), 11),
        pad(c.recompute ? "layer" : "none", 10), pad(gib(c.memory.total()), 12, true),
        pad(c.fits ? "yes" : "no", 6, true), pad(str_cat(fixed(c.time.total_s, 3), " s"), 10, true),
        pad(number_with_commas(c.tokens_per_s), 13, true),
        pad(str_cat(fixed(100 * c.mfu, 1), "%"), 8, true), "\n");
  }
  for (const std::string& n : plan.notes) out += str_cat("note: ", n, "\n");
  if (cl.gpu.name == "CPU") {
    out += str_cat("constants: CPU ranks measured here (--cpu): GEMM ",
                   fixed(cl.gpu.bf16_flops / 1e9, 1), " GFLOP/s, attention ",
                   fixed(k.attention_fwd_flops / 1e9, 1), " GFLOP/s, memory ",
                   fixed(cl.gpu.hbm_bytes_per_s / 1e9, 2), " GB/s, link ",
                   fixed(cl.gpu.nvlink_bytes_per_s / 1e9, 3), " GB/s, latency ",
                   fixed(k.ici_latency_s * 1e6, 0), " us per rank (docs/plan.md)\n");
    return out;
  }
  out +=
      str_cat("constants: ", cl.gpu.name, " ", fixed(cl.gpu.bf16_flops / 1e12, 1),
              " TFLOP/s bf16 dense x GEMM efficiency ", fixed(k.gemm_efficiency, 2), "; attention ",
              fixed(k.attention_fwd_flops / 1e12, 0), "/", fixed(k.attention_bwd_flops / 1e12, 0),
              " TFLOP/s fwd/bwd (ax's kernel, measured on H200); HBM ",
              fixed(cl.gpu.hbm_bytes_per_s / 1e12, 2), " TB/s x ", fixed(k.hbm_efficiency, 2),
              "; NVLink ", fixed(cl.gpu.nvlink_bytes_per_s / 1e9, 0), " GB/s, network ",
              fixed(cl.gpu.network_bytes_per_s / 1e9, 0), " GB/s per GPU x ",
              fixed(k.link_efficiency, 2), ", latency ", fixed(k.ici_latency_s * 1e6, 0), "/",
              fixed(k.dcn_latency_s * 1e6, 0), " us; memory: context ", gib(k.context_bytes),
              ", NCCL ", fixed(k.comm_buffer_bytes / kMiB, 0), " MiB per communicator, workspace ",
              fixed(k.workspace_bytes / kMiB, 0), " MiB (docs/plan.md)\n");
  return out;
}

std::string format_best(const Plan& plan) {
  return plan.any_fits() ? format_choice(plan, plan.candidates.front()) : "";
}

std::string format_choice(const Plan& plan, const Candidate& c) {
  const Memory& m = c.memory;
  const double percore =
      static_cast<double>(plan.global_batch) / static_cast<double>(plan.cluster.gpus());
  std::string args = str_cat("--set NUM_MICROBATCHES=", c.microbatches);
  if (c.recompute) args += " --set train.recompute=layer";
  return str_cat(
      "best: ", c.layout.name(), ", ", c.microbatches, " micro-batch(es) of ", c.micro_batch,
      ", recompute ", c.recompute ? "layer" : "none", ": ", gib(m.total()), " per GPU (parameters ",
      gib(m.parameters), ", gradients ", gib(m.gradients), ", optimizer ", gib(m.optimizer),
      ", weights ", gib(m.weights + m.store_scratch), ", activations ", gib(m.activations),
      ", NCCL ", gib(m.comm), ", workspace ", gib(m.workspace), "), step ",
      fixed(c.time.total_s, 3), " s (GEMM ", fixed(c.time.gemm_s, 3), ", attention ",
      fixed(c.time.attention_s, 3), ", memory ", fixed(c.time.memory_s, 3), ", tensor ",
      fixed(c.time.tensor_s, 3), ", fsdp gather ", fixed(c.time.exposed_gather_s, 3),
      " exposed of ", fixed(c.time.fsdp_gather_s, 3), ", fsdp scatter ",
      fixed(c.time.fsdp_scatter_s, 3), ", data ", fixed(c.time.data_s, 3), ")\n",
      "job script: CONFIG=", plan.experiment, " GPUS_PER_NODE=", plan.cluster.gpus_per_node,
      " PERCORE_BATCH_SIZE=", fixed(percore, percore == std::floor(percore) ? 0 : 4),
      " ICI_MESH_SHAPE=[", c.layout.ici_string(), "] DCN_MESH_SHAPE=[", c.layout.dcn_string(),
      "] AX_TRAIN_ARGS=\"", args, "\" sbatch -N ", plan.cluster.nodes, " ...\n",
      "srun: --ax-mesh='ici=", c.layout.ici_string(), ";dcn=", c.layout.dcn_string(), "'\n");
}

std::string summary_line(const Plan& plan, const Candidate& c) {
  return str_cat(c.layout.name(), " (ICI_MESH_SHAPE=[", c.layout.ici_string(), "] DCN_MESH_SHAPE=[",
                 c.layout.dcn_string(), "]), ", c.microbatches, " micro-batch(es) of ",
                 c.micro_batch, ", recompute ", c.recompute ? "layer" : "none", ": ",
                 gib(c.memory.total()), " of ", gib(plan.cluster.gpu.memory_bytes), " per ",
                 plan.cluster.gpu.name, ", predicted step ", fixed(c.time.total_s, 3), " s");
}

}  // namespace ax::train::plan
