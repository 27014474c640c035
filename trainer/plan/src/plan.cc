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
#include "ax/trainer/parallel/distributed.h"
#include "ax/trainer/parallel/seq_attention.h"

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

PipelineSchedule schedule_of(const Config& c) {
  StatusOr<PipelineSchedule> s = parse_pipeline_schedule(c.train.pipeline_schedule);
  return s.ok() ? *s : PipelineSchedule::k1F1B;  // validate() refuses other names before this
}

// Model chunks per stage on `layout` (train.pipeline_virtual_stages with the interleaved
// schedule).
int chunks_of(const Config& c, const Layout& layout) {
  return layout.pipeline() > 1 && schedule_of(c) == PipelineSchedule::kInterleaved
             ? static_cast<int>(std::max<int64_t>(1, c.train.pipeline_virtual_stages))
             : 1;
}

ModelOptions model_options(const Config& c, bool recompute, DType dtype, int chunks = 1) {
  return {.recompute_layers = recompute,
          .encoder_seq_len = c.train.encoder_seq_len,
          .z_loss = static_cast<float>(c.train.z_loss),
          .pipeline_chunks = chunks,
          .planned_dtype = dtype};
}

// The model of one rank: stage `stage` of layout.pipeline(), a slice of every row when
// layout.seq() > 1, `fsdp` shards (the layout's for the store; 1 for activations, which do not
// depend on it).
StatusOr<std::unique_ptr<Model>> plan_model(const Config& c, int64_t vocab, const Layout& layout,
                                            int fsdp, int stage, int64_t micro_batch,
                                            bool recompute, DType dtype) {
  ModelParallel par;
  par.tensor_size = layout.tensor();
  par.fsdp_size = fsdp;
  par.pipeline_size = layout.pipeline();
  par.pipeline_rank = stage;
  par.seq_size = layout.seq();
  const int64_t seq_len = c.train.seq_len / std::max(1, layout.seq());
  return Model::plan(c.model, vocab, micro_batch, seq_len, par,
                     model_options(c, recompute, dtype, chunks_of(c, layout)));
}

// The stages of a pipeline of `stages` with `chunks` chunks each that differ in what they hold:
// `kind[s]` indexes `first_of`, the first stage of each kind (its representative).
struct StageKinds {
  std::vector<int> kind;      // per stage
  std::vector<int> first_of;  // per kind
  // Per kind: the layers of each stack it holds, and whether it holds the head.
  std::vector<int> encoder_layers, decoder_layers;
  std::vector<bool> head;
};

// A decoder-only model's, as decoder_lm.cc cuts the layers (chunk c of P·V holds layers
// [c·L/(P·V), (c+1)·L/(P·V)), stage s the chunks s, s + P, ...; the first stage embeds, the last
// holds the head).
StageKinds stage_kinds(int64_t num_layers, int stages, int chunks) {
  StageKinds k;
  std::map<std::tuple<bool, bool, std::vector<int64_t>>, int> seen;
  const int64_t n = static_cast<int64_t>(stages) * chunks;
  for (int s = 0; s < stages; ++s) {
    std::vector<int64_t> sizes;
    int64_t total = 0;
    for (int v = 0; v < chunks; ++v) {
      const int64_t c = static_cast<int64_t>(v) * stages + s;
      sizes.push_back((c + 1) * num_layers / n - c * num_layers / n);
      total += sizes.back();
    }
    auto [it, inserted] = seen.emplace(std::make_tuple(s == 0, s == stages - 1, sizes),
                                       static_cast<int>(k.first_of.size()));
    if (inserted) {
      k.first_of.push_back(s);
      k.encoder_layers.push_back(0);
      k.decoder_layers.push_back(static_cast<int>(total));
      k.head.push_back(s == stages - 1);
    }
    k.kind.push_back(it->second);
  }
  return k;
}

// T5's, read from the model's own split (encoder_decoder.cc balances the E + D layers' FLOPs, so
// the planner does not re-derive it): each stage's planned model (one row, no sharding) names
// its layers (enc.h.<i>, dec.h.<j>: layer E + j) and the ends it holds; its chunks are the runs
// of consecutive layers (a stage's chunks s, s + P, ... never touch on P > 1). Stages with the
// same ends and the same chunks (each chunk's layers of each stack and which stack boundaries it
// holds: those size its activations) are one kind.
StatusOr<StageKinds> t5_stage_kinds(const Config& c, int64_t vocab, int stages, int chunks) {
  const int E = static_cast<int>(c.model.num_layers);
  const int D = static_cast<int>(c.model.decoder_layers());
  using Chunk = std::tuple<int, int, bool, bool, bool, bool>;
  StageKinds k;
  std::map<std::pair<std::vector<std::string>, std::vector<Chunk>>, int> seen;
  for (int s = 0; s < stages; ++s) {
    ModelParallel par;
    par.pipeline_size = stages;
    par.pipeline_rank = s;
    AX_ASSIGN_OR_RETURN(std::unique_ptr<Model> m,
                        Model::plan(c.model, vocab, 1, c.train.seq_len, par,
                                    model_options(c, false, DType::kF32, chunks)));
    std::vector<int> ids;
    std::vector<std::string> ends;
    for (const ParamSpec& p : m->layout().specs()) {
      const bool enc = p.name.starts_with("enc.h."), dec = p.name.starts_with("dec.h.");
      if (enc || dec) {
        ids.push_back((dec ? E : 0) + std::atoi(p.name.c_str() + 6));
      } else {
        ends.push_back(p.name);
      }
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    std::sort(ends.begin(), ends.end());
    std::vector<Chunk> runs;
    int encoder = 0;
    for (size_t i = 0; i < ids.size();) {
      size_t j = i + 1;
      while (j < ids.size() && ids[j] == ids[j - 1] + 1) ++j;
      const int first = ids[i], last = ids[j - 1];
      const int enc = std::max(0, std::min(last + 1, E) - first);
      const int dec = last - first + 1 - enc;
      encoder += enc;
      runs.emplace_back(enc, dec, first == 0, first <= E && E <= last, first < E && E - 1 <= last,
                        last == E + D - 1);
      i = j;
    }
    auto [it, inserted] =
        seen.emplace(std::make_pair(ends, runs), static_cast<int>(k.first_of.size()));
    if (inserted) {
      k.first_of.push_back(s);
      k.encoder_layers.push_back(encoder);
      k.decoder_layers.push_back(static_cast<int>(ids.size()) - encoder);
      k.head.push_back(std::binary_search(ids.begin(), ids.end(), E + D - 1));
    }
    k.kind.push_back(it->second);
  }
  return k;
}

// The stage kinds of a pipeline of `stages` with `chunks` chunks each, for either family.
StatusOr<StageKinds> stage_kinds_of(const Config& c, int64_t vocab, int stages, int chunks) {
  if (is_t5(c)) return t5_stage_kinds(c, vocab, stages, chunks);
  return stage_kinds(c.model.num_layers, stages, chunks);
}

// `model`'s store on `layout` with activations of `activation_bytes`.
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
  comms += layout.pipeline() * layout.data() * layout.fsdp() * layout.seq() * layout.tensor() > 1
               ? 1
               : 0;  // world
  comms += layout.data() > 1 ? 1 : 0;
  comms += layout.fsdp() > 1 ? 2 : 0;  // fsdp and fsdp_prefetch
  comms += layout.tensor() > 1 ? 1 : 0;
  comms += layout.data() * layout.fsdp() > 1 ? 1 : 0;  // replica
  comms += layout.pipeline() > 1 ? 1 : 0;
  comms += layout.seq() > 1 ? 1 : 0;
  m.comm = comms * k.comm_buffer_bytes;
  m.workspace = k.context_bytes + k.workspace_bytes;
  return m;
}

// The K/V columns of one self-attention on a tensor rank (the packed q, k, v the seq group
// gathers: seq_attention.h).
int64_t qkv_columns(const Config& c, int tensor) {
  return c.model.head_dim() * (c.model.num_heads + 2 * c.model.num_kv_heads) / tensor;
}

// The seq group's gather buffers on a rank of `layout` (seq_attention_scratch_bytes), with the
// segment ids counted (packed rows).
double seq_transient(const Config& c, const Layout& layout, int64_t micro_batch, DType dtype) {
  if (layout.seq() <= 1) return 0;
  return static_cast<double>(seq_attention_scratch_bytes(
      micro_batch, c.train.seq_len / layout.seq(), qkv_columns(c, layout.tensor()), layout.seq(),
      dtype, /*segments=*/true));
}

// A ring collective over `n` ranks moving `bytes` (the whole buffer): all-reduce sends
// 2 (n-1)/n of it per rank, all-gather and reduce-scatter (n-1)/n.
double ring_seconds(double bytes, int n, double factor, double bandwidth, double latency) {
  if (n <= 1) return 0;
  return factor * (n - 1) / n * bytes / bandwidth + latency;
}

// The whole model's counts (one Model::plan of it, unsplit).
struct WholeModel {
  double flops_per_row = 0;
  double gemm_flops_per_row = 0;  // 6 x the matmul parameters x the tokens of a row
  double head_gemm_flops_per_row = 0;
  // Per layer of each stack (a pipeline stage's share): its GEMMs and attention per row.
  double enc_layer_gemm = 0, dec_layer_gemm = 0;
  double enc_layer_attention = 0, dec_layer_attention = 0;
  double num_parameters = 0;
  int encoder_layers = 0, decoder_layers = 0;
};

WholeModel whole_model_of(const Model& model, const Config& c) {
  WholeModel w;
  w.flops_per_row = model.flops_per_row();
  const ParamLayout& l = model.layout();
  const double te = static_cast<double>(c.train.encoder_seq_len);
  const double td = static_cast<double>(c.train.seq_len);
  const double all = static_cast<double>(logical_matmul_parameters(l));
  if (is_t5(c)) {
    const double enc = static_cast<double>(logical_matmul_parameters(l, "enc."));
    w.gemm_flops_per_row = 6.0 * (enc * te + (all - enc) * td);
    const double attention = std::max(0.0, w.flops_per_row - w.gemm_flops_per_row);
    w.encoder_layers = static_cast<int>(c.model.num_layers);
    w.decoder_layers = static_cast<int>(c.model.decoder_layers());
    const double E = w.encoder_layers, D = w.decoder_layers;
    w.enc_layer_gemm = 6.0 * static_cast<double>(logical_matmul_parameters(l, "enc.h.")) * te / E;
    w.dec_layer_gemm = 6.0 * static_cast<double>(logical_matmul_parameters(l, "dec.h.")) * td / D;
    // The rest (the head) where the head is, so that the stages' GEMMs sum to the whole's.
    w.head_gemm_flops_per_row = w.gemm_flops_per_row - E * w.enc_layer_gemm - D * w.dec_layer_gemm;
    // Attention split as encoder_decoder.cc counts it per layer (the encoder's whole Te x Te, the
    // decoder's causal Td x Td and its cross-attention's Td x Te), scaled to the whole's.
    const double hd = static_cast<double>(c.model.num_heads * c.model.head_dim());
    const double enc_attention = 12.0 * hd * te * te;
    const double dec_attention = 6.0 * hd * td * td + 12.0 * hd * td * te;
    const double scale = attention / (E * enc_attention + D * dec_attention);
    w.enc_layer_attention = enc_attention * scale;
    w.dec_layer_attention = dec_attention * scale;
  } else {
    w.gemm_flops_per_row = 6.0 * all * td;
    const double attention = std::max(0.0, w.flops_per_row - w.gemm_flops_per_row);
    w.decoder_layers = static_cast<int>(c.model.num_layers);
    w.head_gemm_flops_per_row =
        6.0 * static_cast<double>(c.model.model_dim) * static_cast<double>(model.vocab()) * td;
    // Uniform layers; a lookup embeds.
    w.dec_layer_gemm = (w.gemm_flops_per_row - w.head_gemm_flops_per_row) / w.decoder_layers;
    w.dec_layer_attention = attention / w.decoder_layers;
  }
  for (const ParamSpec& s : l.specs()) {
    int64_t n = 1;
    for (int64_t d : s.logical_shape) n *= d;
    w.num_parameters += static_cast<double>(n);
  }
  return w;
}

// What one rank computes and holds: its stage's layers (all of them without a pipeline) over its
// slice of the rows (whole rows without a seq axis).
struct ModelFacts {
  double gemm_flops_per_row = 0;            // this rank's share, before tensor parallelism
  double attention_flops_per_row = 0;       // the slowest slice's with a seq axis
  double unit0_elems = 0, layer_elems = 0;  // per tensor rank, padded for fsdp
  double act_bytes = 0;
  int encoder_layers = 0, decoder_layers = 0;
};

// A pipeline stage's layers of each stack and whether it holds the head.
struct StageShape {
  int encoder_layers = 0, decoder_layers = 0;
  bool head = false;
};

// The GEMM and attention FLOPs per row of a stage (the whole model's without a pipeline).
void stage_flops(const WholeModel& w, const Layout& layout, const StageShape& stage,
                 ModelFacts* f) {
  f->gemm_flops_per_row = w.gemm_flops_per_row;
  f->attention_flops_per_row = std::max(0.0, w.flops_per_row - w.gemm_flops_per_row);
  f->encoder_layers = w.encoder_layers;
  f->decoder_layers = w.decoder_layers;
  if (layout.pipeline() <= 1) return;
  // Each stack's layers at its own cost (T5's encoder layers at the encoder's length); the
  // head's GEMM where it is (a lookup embeds).
  const double enc = stage.encoder_layers, dec = stage.decoder_layers;
  f->gemm_flops_per_row = enc * w.enc_layer_gemm + dec * w.dec_layer_gemm +
                          (stage.head ? w.head_gemm_flops_per_row : 0.0);
  f->attention_flops_per_row = enc * w.enc_layer_attention + dec * w.dec_layer_attention;
  f->encoder_layers = stage.encoder_layers;
  f->decoder_layers = stage.decoder_layers;
}

ModelFacts facts_of(const WholeModel& w, const Model& store, double activation_bytes,
                    const Layout& layout, const StageShape& stage) {
  ModelFacts f;
  stage_flops(w, layout, stage, &f);
  if (layout.seq() > 1) {
    // Each slice computes its rows' GEMMs; causal attention is uneven: slice s of S attends to
    // (2s + 1) / S² of the row's pairs, the last slice (2S - 1) / S² (the step waits for it).
    const double S = layout.seq();
    f.gemm_flops_per_row /= S;
    f.attention_flops_per_row *= (2 * S - 1) / (S * S);
  }
  const ParamLayout& l = store.layout();
  if (l.shards() > 1) {
    f.unit0_elems = static_cast<double>(l.units()[0].size);
    for (size_t u = 1; u < l.units().size(); ++u) {
      f.layer_elems += static_cast<double>(l.units()[u].size);
    }
  }
  f.act_bytes = activation_bytes;
  return f;
}

// `bubble`: the schedule's (pipeline_bubble) for lay.pipeline() stages over `microbatches`.
StepTime step_time(const ModelFacts& f, const Config& c, const Cluster& cl, const Layout& lay,
                   int64_t rows_per_replica, int64_t microbatches, int64_t micro_batch,
                   bool recompute, double gradient_bytes, double bubble, const CostConstants& k) {
  StepTime t;
  const GpuSpec& g = cl.gpu;
  const double tp = lay.tensor();
  const double rows = static_cast<double>(rows_per_replica);
  const double gemm = rows * f.gemm_flops_per_row / tp;
  const double attention = rows * f.attention_flops_per_row / tp;
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
  const double mb = static_cast<double>(micro_batch);
  const double mbs = static_cast<double>(microbatches);
  const double slice = static_cast<double>(c.train.seq_len) / lay.seq();  // positions per rank
  // Tensor parallelism: Megatron's two all-reduces per branch forward and backward (three
  // branches in T5's decoder), of the (rows, model_dim) stream of one micro-batch.
  if (lay.tensor() > 1) {
    const double dec_bytes = mb * slice * c.model.model_dim * ds;
    const double enc_bytes = mb * c.train.encoder_seq_len * c.model.model_dim * ds;
    const double fwd_passes = recompute ? 2 : 1;
    const int dec_branches = is_t5(c) ? 3 : 2;
    const double per_mb = f.decoder_layers * dec_branches * (fwd_passes + 1) *
                              ring_seconds(dec_bytes, lay.tensor(), 2, nvlink, k.ici_latency_s) +
                          f.encoder_layers * 2 * 2 *
                              ring_seconds(enc_bytes, lay.tensor(), 2, nvlink, k.ici_latency_s) +
                          2 * ring_seconds(dec_bytes, lay.tensor(), 2, nvlink, k.ici_latency_s);
    t.tensor_s = per_mb * mbs;
  }
  // FSDP: each layer gathered (compute dtype) for the forward and again for the backward pass
  // but the last two, still in their slots (docs/benchmarks-sharding.md measured exactly that),
  // unit 0 once a step; every unit's f32 gradients reduce-scattered once per micro-batch.
  if (lay.fsdp() > 1) {
    const double bw = lay.dcn[1] > 1 ? network : nvlink;
    const double lat = lay.dcn[1] > 1 ? k.dcn_latency_s : k.ici_latency_s;
    const double layers = f.encoder_layers + f.decoder_layers;
    t.fsdp_gather_s = ring_seconds(f.unit0_elems * ds, lay.fsdp(), 1, bw, lat) +
                      mbs * (2 * layers - std::min(layers, 2.0)) *
                          ring_seconds(f.layer_elems / layers * ds, lay.fsdp(), 1, bw, lat);
    t.fsdp_scatter_s =
        mbs * (ring_seconds(f.unit0_elems * 4, lay.fsdp(), 1, bw, lat) +
               layers * ring_seconds(f.layer_elems / layers * 4, lay.fsdp(), 1, bw, lat));
    // The gathers run on their own stream beside the compute (FSDP prefetch).
    t.exposed_gather_s = std::max(0.0, t.fsdp_gather_s - (t.gemm_s + t.attention_s));
  }
  // Seq: each layer's attention all-gathers the row's packed q, k, v columns forward, again
  // backward, and reduce-scatters their gradient (another gather forward with recomputation),
  // inside the node, not overlapped; the gradients are summed over the group as over data.
  if (lay.seq() > 1) {
    const bool dcn = lay.dcn_seq > 1;
    const double bw = dcn ? network : nvlink;
    const double lat = dcn ? k.dcn_latency_s : k.ici_latency_s;
    const double row_bytes =
        mb * static_cast<double>(c.train.seq_len) * qkv_columns(c, lay.tensor()) * ds;
    t.seq_s = mbs * f.decoder_layers * (recompute ? 4 : 3) *
                  ring_seconds(row_bytes, lay.seq(), 1, bw, lat) +
              ring_seconds(gradient_bytes, lay.seq(), 2, bw, lat);
  }
  if (lay.data() > 1) {
    const bool dcn = lay.dcn[0] > 1;
    t.data_s = ring_seconds(gradient_bytes, lay.data(), 2, dcn ? network : nvlink,
                            dcn ? k.dcn_latency_s : k.ici_latency_s);
  }
  // Pipeline: the stage's passes stretched by the schedule's bubble (pipeline_bubble, the
  // trainer's own: (p - 1) / (m + p - 1) for 1F1B), and a micro-batch's activation forward and
  // its gradient backward between neighbours per pass on the critical path (m·V + p - 1 of them),
  // over the network when stages span nodes.
  const double stage_s = t.gemm_s + t.attention_s + t.memory_s + t.tensor_s + t.exposed_gather_s +
                         t.fsdp_scatter_s + t.seq_s;
  if (lay.pipeline() > 1) {
    const int P = lay.pipeline();
    const int V = chunks_of(c, lay);
    t.bubble = bubble;
    t.bubble_s = stage_s * t.bubble / (1.0 - t.bubble);
    const bool dcn = lay.dcn_pipeline > 1;
    // T5's stages pass both streams, (B·Te + B·Td, C), whichever stack they hold.
    const double positions =
        is_t5(c) ? static_cast<double>(c.train.encoder_seq_len + c.train.seq_len) : slice;
    const double bytes = mb * positions * c.model.model_dim * ds;
    t.pipeline_s = 2.0 * (mbs * V + P - 1) *
                   (bytes / (dcn ? network : nvlink) + (dcn ? k.dcn_latency_s : k.ici_latency_s));
  }
  t.total_s = stage_s + t.bubble_s + t.pipeline_s + t.data_s;
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

std::string Layout::ici_string() const {
  if (five()) return str_cat(ici_pipeline, ",", ici[0], ",", ici[1], ",", ici_seq, ",", ici[2]);
  return str_cat(ici[0], ",", ici[1], ",", ici[2]);
}
std::string Layout::dcn_string() const {
  if (five()) return str_cat(dcn_pipeline, ",", dcn[0], ",", dcn[1], ",", dcn_seq, ",", dcn[2]);
  return str_cat(dcn[0], ",", dcn[1], ",", dcn[2]);
}
bool Layout::placed_by_node() const {
  const int inside[5] = {ici_pipeline, ici[0], ici[1], ici_seq, ici[2]};
  const int across[5] = {dcn_pipeline, dcn[0], dcn[1], dcn_seq, dcn[2]};
  int last_across = -1, first_inside = 5;
  for (int a = 0; a < 5; ++a) {
    if (across[a] > 1) last_across = a;
  }
  for (int a = 4; a >= 0; --a) {
    if (inside[a] > 1) first_inside = a;
  }
  return last_across <= first_inside;
}
std::string Layout::name() const {
  return str_cat("data ", data(), " fsdp ", fsdp(), " tensor ", tensor(),
                 pipeline() > 1 ? str_cat(" pipeline ", pipeline()) : std::string(),
                 seq() > 1 ? str_cat(" seq ", seq()) : std::string());
}

namespace {

// `unit` "GPUs" or "nodes", `owner` "a node has" or "the cluster has". Five numbers
// pipeline,data,fsdp,seq,tensor, or three data,fsdp,tensor (pipeline and seq 1).
StatusOr<std::vector<int>> parse_shape(std::string_view text, int total, const char* what,
                                       const char* unit, const char* owner) {
  constexpr const char* kForms =
      "three numbers data,fsdp,tensor or five pipeline,data,fsdp,seq,tensor";
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
      return InvalidArgument(what, "=", text, ": expected ", kForms, " (each >= 1, or one -1)");
    }
    v.push_back(static_cast<int>(n));
    at = comma + 1;
  }
  if ((v.size() != 3 && v.size() != 5) || std::count(v.begin(), v.end(), -1) > 1) {
    return InvalidArgument(what, "=", text, ": expected ", kForms, " (at most one -1)");
  }
  if (v.size() == 3) v = {1, v[0], v[1], 1, v[2]};
  int known = 1;
  for (int n : v) known *= n == -1 ? 1 : n;
  for (int& n : v) {
    if (n == -1) n = total % known == 0 ? total / known : 0;
  }
  if (v[0] * v[1] * v[2] * v[3] * v[4] != total) {
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
  if (d[4] != 1) {
    return InvalidArgument("DCN_MESH_SHAPE=", dcn, ": tensor parallelism of ", d[4],
                           " across nodes; ax keeps tensor groups inside a node");
  }
  Layout l;
  l.ici_pipeline = i[0];
  l.ici[0] = i[1];
  l.ici[1] = i[2];
  l.ici_seq = i[3];
  l.ici[2] = i[4];
  l.dcn_pipeline = d[0];
  l.dcn[0] = d[1];
  l.dcn[1] = d[2];
  l.dcn_seq = d[3];
  l.dcn[2] = d[4];
  return l;
}

int pipeline_slots(PipelineSchedule schedule, int stage, int stages, int micro_batches,
                   int chunks) {
  // pipeline_step.cc's order: `before`'s receives, the pass, `after`'s receives.
  std::vector<char> held(static_cast<size_t>(std::max(1, micro_batches * chunks)), 0);
  auto slot = [&](int mb, int chunk) -> char& {
    return held[static_cast<size_t>(mb * chunks + chunk)];
  };
  int busy = 0, peak = 0;
  auto take = [&](int mb, int chunk) {
    char& h = slot(mb, chunk);
    if (h) return;
    h = 1;
    peak = std::max(peak, ++busy);
  };
  auto receive = [&](const std::vector<PipelineTransfer>& transfers) {
    for (const PipelineTransfer& t : transfers) {
      if (t.kind == PipelineTransfer::Kind::kRecvActivation) take(t.micro_batch, t.chunk);
    }
  };
  for (const PipelineAction& a : pipeline_program(schedule, stage, stages, micro_batches, chunks)) {
    receive(a.before);
    if (a.event.kind == PipelineEvent::Kind::kForward) {
      take(a.event.micro_batch, a.event.chunk);
    } else {
      slot(a.event.micro_batch, a.event.chunk) = 0;
      --busy;
    }
    receive(a.after);
  }
  return std::max(1, peak);
}

StatusOr<Memory> rank_memory(const Config& config, int64_t vocab, const Layout& layout,
                             int64_t micro_batch, bool recompute, DType dtype,
                             const CostConstants& constants, int64_t microbatches, int stage,
                             int* stage_out) {
  const int P = layout.pipeline();
  Memory best;
  int heaviest = 0;
  for (int s = stage < 0 ? 0 : stage; s < (stage < 0 ? P : stage + 1); ++s) {
    AX_ASSIGN_OR_RETURN(std::unique_ptr<Model> store,
                        plan_model(config, vocab, layout, layout.fsdp(), s, 1, false, dtype));
    AX_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                        plan_model(config, vocab, layout, 1, s, micro_batch, recompute, dtype));
    double activations = static_cast<double>(model->activation_bytes());
    if (P > 1) {
      const int slots = pipeline_slots(schedule_of(config), s, P, static_cast<int>(microbatches),
                                       chunks_of(config, layout));
      activations += (slots - 1) * static_cast<double>(model->next_slot_bytes());
    }
    Memory m = memory_of(*store, activations, layout, constants);
    m.transient = seq_transient(config, layout, micro_batch, dtype);
    if (s == (stage < 0 ? 0 : stage) || m.total() > best.total()) {
      best = m;
      heaviest = s;
    }
  }
  if (stage_out != nullptr) *stage_out = heaviest;
  return best;
}

StatusOr<std::vector<double>> stage_flops_per_row(const Config& config, int64_t vocab, int stages) {
  Layout layout;
  layout.ici_pipeline = stages;
  AX_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                      plan_model(config, vocab, Layout{}, 1, 0, 1, false, plan_dtype(config)));
  const WholeModel whole = whole_model_of(*model, config);
  AX_ASSIGN_OR_RETURN(StageKinds kinds,
                      stage_kinds_of(config, vocab, stages, chunks_of(config, layout)));
  std::vector<double> out;
  for (int s = 0; s < stages; ++s) {
    const size_t kind = static_cast<size_t>(kinds.kind[static_cast<size_t>(s)]);
    ModelFacts f;
    stage_flops(whole, layout,
                {kinds.encoder_layers[kind], kinds.decoder_layers[kind], kinds.head[kind]}, &f);
    out.push_back(f.gemm_flops_per_row + f.attention_flops_per_row);
  }
  return out;
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
  plan.pipeline_schedule = c.train.pipeline_schedule;
  StatusOr<int64_t> global = global_batch_of(c, cl.gpus());
  if (!global.ok()) return global.status();  // the user's line, without a source location
  plan.global_batch = *global;
  plan.tokens_per_row = tokens_per_row(c);
  const DType dtype = plan_dtype(c);
  const CostConstants& k = request.constants;
  const bool t5 = is_t5(c);
  std::map<std::string, bool> noted;
  auto note = [&](const std::string& line) {
    if (!noted[line]) plan.notes.push_back(line);
    noted[line] = true;
  };
  auto axes_of = [](const Layout& lay) {
    return str_cat(lay.pipeline() > 1 ? str_cat("pipeline ", lay.pipeline(), " ") : "",
                   lay.seq() > 1 ? str_cat("seq ", lay.seq(), " ") : "", "tensor ", lay.tensor());
  };
  auto refused = [&](const Layout& lay, const Status& status) {
    note(str_cat(axes_of(lay), ": ", status.message()));
  };
  if (t5) {
    note("recomputation is not planned for t5 (train.recompute=layer is not built for it)");
    note("seq axes are not planned for t5 (ax-train builds them for gpt and llama only: issue 26)");
  }
  WholeModel whole;
  {
    StatusOr<std::unique_ptr<Model>> m =
        plan_model(c, request.vocab, Layout{}, 1, 0, 1, false, dtype);
    if (!m.ok()) {
      refused(Layout{}, m.status());
    } else {
      whole = whole_model_of(**m, c);
      plan.flops_per_row = whole.flops_per_row;
      plan.num_parameters = whole.num_parameters;
    }
  }
  // The pipeline and seq axes of the layouts: none; pipeline stages across nodes first (then
  // inside a node once every node is a stage); seq slices inside a node (not for t5), alone and
  // beside each pipeline whose stage's ranks on a node they divide.
  struct Axes {
    int ici_pipeline = 1, dcn_pipeline = 1, ici_seq = 1;
  };
  std::vector<Axes> axes = {{}};
  if (!request.only && whole.decoder_layers > 0) {
    for (int64_t p : divisors(cl.nodes)) {
      if (p > 1) axes.push_back({1, static_cast<int>(p), 1});
    }
    for (int64_t p : divisors(cl.gpus_per_node)) {
      if (p > 1) axes.push_back({static_cast<int>(p), cl.nodes, 1});
    }
    const size_t pipelines = axes.size();  // none, then each pipeline
    for (int64_t s : divisors(t5 ? 1 : cl.gpus_per_node)) {
      for (size_t i = 0; i < pipelines && s > 1; ++i) {
        const Axes a = axes[i];
        if (cl.gpus_per_node % (a.ici_pipeline * s) == 0) {
          axes.push_back({a.ici_pipeline, a.dcn_pipeline, static_cast<int>(s)});
        }
      }
    }
  }
  std::vector<Layout> layouts;
  if (request.only) {
    layouts.push_back(*request.only);
  } else {
    for (const Axes& a : axes) {
      for (const std::vector<int>& ici :
           factorizations(cl.gpus_per_node / (a.ici_pipeline * a.ici_seq), 3)) {
        for (const std::vector<int>& dcn2 : factorizations(cl.nodes / a.dcn_pipeline, 2)) {
          Layout lay;
          std::copy(ici.begin(), ici.end(), lay.ici);
          lay.dcn[0] = dcn2[0];
          lay.dcn[1] = dcn2[1];
          lay.ici_pipeline = a.ici_pipeline;
          lay.dcn_pipeline = a.dcn_pipeline;
          lay.ici_seq = a.ici_seq;
          if (lay.placed_by_node()) layouts.push_back(lay);
        }
      }
    }
  }
  const PipelineSchedule schedule = schedule_of(c);
  // Model::plan once per (tensor, fsdp, pipeline, stage kind) for the store (at one sequence, no
  // recomputation) and once per (tensor, pipeline, seq, stage kind, micro-batch, recomputation)
  // for the activations (at fsdp 1: the activation plan does not depend on fsdp), so that a
  // 96-layer model plans in a second.
  std::map<std::tuple<int, int, int, int>, std::unique_ptr<Model>> stores;
  struct Acts {
    double first = -1;  // slot 0 with what every slot shares; < 0: refused
    double slot = 0;    // each further slot
  };
  std::map<std::tuple<int, int, int, int, int64_t, bool>, Acts> arenas;
  std::map<int, StageKinds> kinds_of;
  std::map<std::pair<int, int64_t>, std::vector<int>> slots_of;
  std::map<std::tuple<int, int64_t, bool>, double> bubbles;  // (P, m, recomputation)
  Config probe = c;  // check_pipeline_layout reads the micro-batch count
  for (const Layout& lay : layouts) {
    ++plan.layouts;
    comm::MeshCoords coords;
    coords.data = lay.data();
    coords.fsdp = lay.fsdp();
    coords.tensor = lay.tensor();
    coords.pipeline = lay.pipeline();
    coords.seq = lay.seq();
    probe.train.num_microbatches = lay.pipeline();
    if (Status s = check_pipeline_layout(probe, coords); !s.ok()) {
      note(s.message());
      continue;
    }
    if (Status s = check_seq_layout(c, coords); !s.ok()) {
      note(s.message());
      continue;
    }
    const int64_t replicas = static_cast<int64_t>(lay.data()) * lay.fsdp();
    if (plan.global_batch % replicas != 0) {
      note(str_cat("layouts with ", replicas, " data x fsdp replicas: GLOBAL_BATCH ",
                   plan.global_batch, " does not split evenly over them"));
      continue;
    }
    const int P = lay.pipeline();
    const int V = chunks_of(c, lay);
    auto kinds_it = kinds_of.find(P);
    if (kinds_it == kinds_of.end()) {
      StatusOr<StageKinds> found = stage_kinds_of(c, request.vocab, P, V);
      if (!found.ok()) refused(lay, found.status());
      kinds_it = kinds_of.emplace(P, found.ok() ? std::move(*found) : StageKinds{}).first;
    }
    const StageKinds& kinds = kinds_it->second;
    const size_t nkinds = kinds.first_of.size();
    if (nkinds == 0) continue;  // refused above
    std::vector<const Model*> store(nkinds, nullptr);
    for (size_t kind = 0; kind < nkinds; ++kind) {
      const auto key = std::make_tuple(lay.tensor(), lay.fsdp(), P, static_cast<int>(kind));
      auto it = stores.find(key);
      if (it == stores.end()) {
        Layout store_layout = lay;
        store_layout.ici_seq = store_layout.dcn_seq = 1;  // parameters do not depend on seq
        StatusOr<std::unique_ptr<Model>> m = plan_model(c, request.vocab, store_layout, lay.fsdp(),
                                                        kinds.first_of[kind], 1, false, dtype);
        if (!m.ok()) refused(lay, m.status());
        it = stores.emplace(key, m.ok() ? std::move(*m) : nullptr).first;
      }
      store[kind] = it->second.get();
    }
    if (std::count(store.begin(), store.end(), nullptr) > 0) continue;
    const int64_t rows = plan.global_batch / replicas;
    for (int64_t mbs : divisors(rows)) {
      if (request.microbatches && mbs != *request.microbatches) continue;
      if (request.least_memory_only && mbs != rows) continue;
      // Fewer micro-batches than stages hold as many rows at once on the first stage as P of
      // them (m slots of rows/m against P of rows/P) with a larger bubble: never better.
      if (!request.microbatches && P > 1 && mbs < P && rows % P == 0) continue;
      if (P > 1 && schedule == PipelineSchedule::kInterleaved) {
        probe.train.num_microbatches = mbs;
        if (Status s = check_pipeline_layout(probe, coords); !s.ok()) {
          note(s.message());
          continue;
        }
      }
      auto slots_it = slots_of.find({P, mbs});
      if (slots_it == slots_of.end()) {
        std::vector<int> slots(static_cast<size_t>(P), 1);
        if (P > 1) {
          for (int s = 0; s < P; ++s) {
            slots[static_cast<size_t>(s)] =
                pipeline_slots(schedule, s, P, static_cast<int>(mbs), V);
          }
        }
        slots_it = slots_of.emplace(std::make_pair(P, mbs), std::move(slots)).first;
      }
      const std::vector<int>& slots = slots_it->second;
      for (bool recompute : {false, true}) {
        if (recompute && t5) continue;
        if (request.recompute && recompute != *request.recompute) continue;
        const int64_t micro = rows / mbs;
        std::vector<Acts> arena(nkinds);
        bool ok = true;
        for (size_t kind = 0; kind < nkinds && ok; ++kind) {
          const auto key =
              std::make_tuple(lay.tensor(), P, lay.seq(), static_cast<int>(kind), micro, recompute);
          auto it = arenas.find(key);
          if (it == arenas.end()) {
            Acts a;
            StatusOr<std::unique_ptr<Model>> m =
                plan_model(c, request.vocab, lay, 1, kinds.first_of[kind], micro, recompute, dtype);
            if (!m.ok()) {
              refused(lay, m.status());
            } else {
              a.first = static_cast<double>((*m)->activation_bytes());
              if (P > 1) a.slot = static_cast<double>((*m)->next_slot_bytes());
            }
            it = arenas.emplace(key, a).first;
          }
          arena[kind] = it->second;
          ok = it->second.first >= 0;
        }
        if (!ok) continue;
        Candidate cand;
        cand.layout = lay;
        cand.microbatches = mbs;
        cand.micro_batch = micro;
        cand.recompute = recompute;
        // The heaviest stage's memory (every rank's without a pipeline).
        const double transient = seq_transient(c, lay, micro, dtype);
        for (int s = 0; s < P; ++s) {
          const size_t kind = static_cast<size_t>(kinds.kind[static_cast<size_t>(s)]);
          const int n = slots[static_cast<size_t>(s)];
          Memory m =
              memory_of(*store[kind], arena[kind].first + (n - 1) * arena[kind].slot, lay, k);
          m.transient = transient;
          if (s == 0 || m.total() > cand.memory.total()) {
            cand.memory = m;
            cand.stage = s;
            cand.slots = n;
          }
        }
        cand.fits = cand.memory.total() <= cl.gpu.memory_bytes;
        // The slowest stage's step (the others wait for it). The bubble is the same for every
        // layout of P stages and m micro-batches: simulated once.
        double bubble = 0;
        if (P > 1) {
          auto [it, fresh] = bubbles.try_emplace(std::make_tuple(P, mbs, recompute), 0.0);
          if (fresh) {
            it->second = pipeline_bubble(schedule, P, static_cast<int>(mbs), 1.0,
                                         k.backward_cost + (recompute ? 1.0 : 0.0), V);
          }
          bubble = it->second;
        }
        for (size_t kind = 0; kind < nkinds; ++kind) {
          const StageShape shape{kinds.encoder_layers[kind], kinds.decoder_layers[kind],
                                 kinds.head[kind]};
          const StepTime t =
              step_time(facts_of(whole, *store[kind], arena[kind].first, lay, shape), c, cl, lay,
                        rows, mbs, micro, recompute,
                        static_cast<double>(store[kind]->store_bytes().gradients), bubble, k);
          if (kind == 0 || t.total_s > cand.time.total_s) cand.time = t;
        }
        const double rows_per_s = static_cast<double>(plan.global_batch) / cand.time.total_s;
        cand.tokens_per_s = rows_per_s * static_cast<double>(plan.tokens_per_row);
        cand.mfu = rows_per_s * plan.flops_per_row / (cl.gpus() * cl.gpu.bf16_flops);
        plan.candidates.push_back(cand);
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
  // family has it): a node count fits when some layout (pipelines and seq slices included) fits
  // so, planned as make_plan plans it.
  PlanRequest r = request;
  r.only.reset();
  r.least_memory_only = true;
  r.microbatches.reset();
  r.recompute = !is_t5(request.config);
  for (int m = request.cluster.nodes + 1; m <= max_nodes; ++m) {
    r.cluster.nodes = m;
    StatusOr<Plan> p = make_plan(r);
    if (p.ok() && p->any_fits()) return m;
  }
  return 0;
}

std::string format_table(const Plan& plan, size_t rows) {
  const Cluster& cl = plan.cluster;
  const CostConstants& k = plan.constants;
  // Five-number columns (pipeline,data,fsdp,seq,tensor) when some plan has a pipeline or seq
  // axis; the three-number form otherwise.
  const bool five = std::any_of(plan.candidates.begin(), plan.candidates.end(),
                                [](const Candidate& c) { return c.layout.five(); });
  const size_t w = five ? 15 : 11;
  auto shape = [&](const Layout& l, bool ici) {
    if (!five || l.five()) return ici ? l.ici_string() : l.dcn_string();
    const int* v = ici ? l.ici : l.dcn;
    return str_cat("1,", v[0], ",", v[1], ",1,", v[2]);
  };
  std::string out = str_cat(
      "plan: ", plan.experiment, " on ", cl.nodes, " x ", cl.gpus_per_node, " ", cl.gpu.name, " (",
      fixed(plan.num_parameters / 1e9, 2), "B parameters, GLOBAL_BATCH ", plan.global_batch, " x ",
      plan.tokens_per_row, " tokens): ", plan.candidates.size(), " plans over ", plan.layouts,
      five ? " pipeline x data x fsdp x seq x tensor layouts, " : " data x fsdp x tensor layouts, ",
      std::count_if(plan.candidates.begin(), plan.candidates.end(),
                    [](const Candidate& c) { return c.fits; }),
      " fit in ", gib(cl.gpu.memory_bytes), " (", fixed(plan.seconds, 2), " s)\n");
  out += str_cat(pad("#", 4), pad(five ? "ICI p,d,f,s,t" : "ICI d,f,t", w),
                 pad(five ? "DCN p,d,f,s,t" : "DCN d,f,t", w), pad("mb x rows", 11),
                 pad("recompute", 10), pad("memory/GPU", 12, true), pad("fits", 6, true),
                 pad("step", 10, true), pad("tokens/s", 13, true), pad("MFU", 8, true), "\n");
  for (size_t i = 0; i < std::min(rows, plan.candidates.size()); ++i) {
    const Candidate& c = plan.candidates[i];
    out += str_cat(
        pad(std::to_string(i + 1), 4), pad(shape(c.layout, true), w),
        pad(shape(c.layout, false), w), pad(str_cat(c.microbatches, " x ", c.micro_batch), 11),
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
  out += str_cat(
      "constants: ", cl.gpu.name, " ", fixed(cl.gpu.bf16_flops / 1e12, 1),
      " TFLOP/s bf16 dense x GEMM efficiency ", fixed(k.gemm_efficiency, 2), "; attention ",
      fixed(k.attention_fwd_flops / 1e12, 0), "/", fixed(k.attention_bwd_flops / 1e12, 0),
      " TFLOP/s fwd/bwd (ax's kernel, measured on H200); HBM ",
      fixed(cl.gpu.hbm_bytes_per_s / 1e12, 2), " TB/s x ", fixed(k.hbm_efficiency, 2), "; NVLink ",
      fixed(cl.gpu.nvlink_bytes_per_s / 1e9, 0), " GB/s, network ",
      fixed(cl.gpu.network_bytes_per_s / 1e9, 0), " GB/s per GPU x ", fixed(k.link_efficiency, 2),
      ", latency ", fixed(k.ici_latency_s * 1e6, 0), "/", fixed(k.dcn_latency_s * 1e6, 0),
      " us; memory: context ", gib(k.context_bytes), ", NCCL ",
      fixed(k.comm_buffer_bytes / kMiB, 0), " MiB per communicator, workspace ",
      fixed(k.workspace_bytes / kMiB, 0), " MiB; pipeline: backward = ", fixed(k.backward_cost, 1),
      " forward passes (+1 with recomputation) (docs/plan.md)\n");
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
      m.transient > 0 ? str_cat(", K/V gathers ", gib(m.transient)) : std::string(), ", NCCL ",
      gib(m.comm), ", workspace ", gib(m.workspace), "), step ", fixed(c.time.total_s, 3),
      " s (GEMM ", fixed(c.time.gemm_s, 3), ", attention ", fixed(c.time.attention_s, 3),
      ", memory ", fixed(c.time.memory_s, 3), ", tensor ", fixed(c.time.tensor_s, 3),
      ", fsdp gather ", fixed(c.time.exposed_gather_s, 3), " exposed of ",
      fixed(c.time.fsdp_gather_s, 3), ", fsdp scatter ", fixed(c.time.fsdp_scatter_s, 3), ", data ",
      fixed(c.time.data_s, 3),
      c.layout.seq() > 1 ? str_cat(", seq ", fixed(c.time.seq_s, 3)) : std::string(),
      c.layout.pipeline() > 1
          ? str_cat(", bubble ", fixed(c.time.bubble_s, 3), " (", fixed(100 * c.time.bubble, 1),
                    "%), stage transfers ", fixed(c.time.pipeline_s, 3))
          : std::string(),
      ")\n",
      c.layout.pipeline() > 1
          ? str_cat("heaviest stage: ", c.stage, " of ", c.layout.pipeline(), ", ", c.slots,
                    " micro-batch slot(s) at once (", plan.pipeline_schedule, " schedule", ")\n")
          : std::string(),
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
                 plan.cluster.gpu.name, ", predicted step ",
                 c.time.total_s >= 0.01 ? str_cat(fixed(c.time.total_s, 3), " s")
                                        : str_cat(fixed(c.time.total_s * 1e3, 3), " ms"));
}

}  // namespace ax::train::plan
