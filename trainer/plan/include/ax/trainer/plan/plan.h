// `ax-train plan` (docs/plan.md): for a config and a cluster, every pipeline × data × fsdp × seq ×
// tensor layout over ICI and DCN (tensor and seq inside a node, pipeline stages across nodes
// first; pipeline for every family, seq for gpt and llama, as ax-train trains them), with each
// micro-batch count and recomputation on or off, the memory one GPU needs (the model's own
// dry-run plan: Model::plan of the rank's stage and slice, nothing allocated; a pipeline's
// heaviest stage with the slots its schedule holds) and the step time of a simple cost model,
// ranked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ax/common/status.h"
#include "ax/topology/topology.h"
#include "ax/trainer/backend/tensor.h"
#include "ax/trainer/config/config.h"
#include "ax/trainer/parallel/pipeline_schedule.h"

namespace ax::train::plan {

// One GPU kind: datasheet figures (sources in docs/plan.md "The GPU table").
struct GpuSpec {
  std::string name;                // "H100-80GB"
  double memory_bytes = 0;         // device memory as the driver reports it
  double bf16_flops = 0;           // dense bf16 tensor-core peak, FLOP/s
  double hbm_bytes_per_s = 0;      // HBM bandwidth
  double nvlink_bytes_per_s = 0;   // NVLink per GPU, one direction
  double network_bytes_per_s = 0;  // the GPU's NIC, one direction (one NIC per GPU)
};
const std::vector<GpuSpec>& gpu_table();
// The table's name ("H100-80GB") or the name the driver reports ("NVIDIA H100 80GB HBM3",
// "NVIDIA H200", "NVIDIA A100-SXM4-80GB"); NotFound naming the table's GPUs.
StatusOr<GpuSpec> find_gpu(std::string_view name);

struct Cluster {
  int nodes = 1;
  int gpus_per_node = 1;
  GpuSpec gpu;
  int gpus() const { return nodes * gpus_per_node; }
};

// A cluster of `nodes` nodes like the one `topology` describes (an hwloc XML or JSON dump of a
// node, topo::load_topology): its GPU count; its GPU kind from the GPUs' names unless `gpu`
// names one; NVLink only when every GPU is in one NVLink island (else the node's GPUs talk over
// PCIe: kPcieBytesPerS); the network per GPU scaled by the node's NICs per GPU (at most one).
// `summary` gets one line saying what was read. InvalidArgument for a node without GPUs or
// with GPUs of different kinds.
inline constexpr double kPcieBytesPerS = 32e9;  // PCIe 4.0 x16, one direction
StatusOr<Cluster> cluster_from_topology(const topo::Topology& topology, int nodes,
                                        std::string_view gpu, std::string* summary);

// The cost model's constants (docs/plan.md "The cost model"); every prediction prints them.
struct CostConstants {
  double gemm_efficiency = 0.80;       // of the bf16 peak, for matrix products
  double attention_fwd_flops = 40e12;  // ax's fused attention, measured (H200), FLOP/s
  double attention_bwd_flops = 21e12;
  double hbm_efficiency = 0.80;                  // of HBM bandwidth, for memory-bound ops
  double link_efficiency = 0.80;                 // of NVLink / NIC bandwidth, for NCCL rings
  double ici_latency_s = 10e-6;                  // per collective inside a node
  double dcn_latency_s = 30e-6;                  // per collective across nodes
  double context_bytes = 0.5 * (1 << 30);        // CUDA context and library handles, measured
  double comm_buffer_bytes = 256.0 * (1 << 20);  // per NCCL communicator of more than one rank
  double workspace_bytes = 32.0 * (1 << 20);     // cuBLASLt workspace
  // Pipeline stages: a backward pass costs this many forward passes (one more with
  // recomputation), the weights of pipeline_bubble (pipeline_schedule.h).
  double backward_cost = 2.0;
};

// CPU ranks on one machine, for comparing the cost model with CPU runs (bench/plan_cpu_bench.sh):
// `rates` is "gemm=G,attention=A,memory=M,link=L,latency=U", each measured on the machine: GEMM
// and attention rates of one rank in GFLOP/s, memory bandwidth of one rank in GB/s, the ranks'
// collective bandwidth (Gloo over loopback TCP) in GB/s and its latency per collective in µs.
// Every efficiency is 1 (the rates are what was reached, not peaks) and a CPU rank has no
// context, NCCL buffers or workspace; memory per rank is `memory_bytes`.
struct Device {
  GpuSpec gpu;
  CostConstants constants;
};
StatusOr<Device> cpu_device(std::string_view rates, double memory_bytes);

// data, fsdp, tensor inside a node (ICI) and across nodes (DCN); DCN tensor is always 1. The
// pipeline and seq axes (AXLearn's mesh order pipeline, data, fsdp, seq, tensor) likewise; the
// plan puts pipeline stages across nodes first and seq slices inside a node.
struct Layout {
  int ici[3] = {1, 1, 1};
  int dcn[3] = {1, 1, 1};
  int ici_pipeline = 1, dcn_pipeline = 1;
  int ici_seq = 1, dcn_seq = 1;
  int data() const { return ici[0] * dcn[0]; }
  int fsdp() const { return ici[1] * dcn[1]; }
  int tensor() const { return ici[2] * dcn[2]; }
  int pipeline() const { return ici_pipeline * dcn_pipeline; }
  int seq() const { return ici_seq * dcn_seq; }
  bool five() const { return pipeline() > 1 || seq() > 1; }  // printed in five numbers
  // "1,8,1" (data,fsdp,tensor), or "p,d,f,s,t" when pipeline or seq is above 1 (the forms
  // ICI_MESH_SHAPE and --ax-mesh take).
  std::string ici_string() const;
  std::string dcn_string() const;
  // "data 1 fsdp 8 tensor 1", then " pipeline P" and " seq S" when above 1.
  std::string name() const;
  // Whether ax-train runs it as planned: it numbers ranks (((p·D + d)·F + f)·S + s)·T + t and
  // the launcher and plugin put consecutive ranks on one node, so every axis split across
  // nodes must come before (or be) every axis split inside one. (Data inside a node and fsdp
  // across nodes is not: its data groups would cross the nodes and its fsdp groups span two.)
  bool placed_by_node() const;
};

// Bytes on one GPU.
struct Memory {
  double parameters = 0;  // f32 master shard
  double gradients = 0;   // f32 gradient shard
  double optimizer = 0;   // AdamW m and v (f32, the shard)
  double weights = 0;     // compute-dtype copy (unsharded) or FSDP's gathered units
  double store_scratch = 0;
  // The model's activation arena of one micro-batch, and on a pipeline stage the further
  // micro-batch slots its schedule holds at once.
  double activations = 0;
  double transient = 0;  // seq: the K/V all-gather's buffers of one layer's backward pass
  double comm = 0;       // NCCL buffers
  double workspace = 0;  // CUDA context, cuBLASLt workspace
  // What the model and optimizer allocate through the backend (what its peak counter sees).
  double model() const {
    return parameters + gradients + optimizer + weights + store_scratch + activations + transient;
  }
  double total() const { return model() + comm + workspace; }
};

struct StepTime {
  double gemm_s = 0, attention_s = 0, memory_s = 0;
  double tensor_s = 0;  // tensor-parallel all-reduces (NVLink)
  double fsdp_gather_s = 0, fsdp_scatter_s = 0;
  double data_s = 0;            // data-parallel all-reduce of the gradients
  double exposed_gather_s = 0;  // the part of the gathers the compute does not hide
  double bubble = 0;            // pipeline: the schedule's idle fraction (pipeline_bubble)
  double bubble_s = 0;          // pipeline: the idle time that fraction adds to the step
  double pipeline_s = 0;        // pipeline: point-to-point transfers between stages
  double seq_s = 0;             // seq: K/V all-gathers and reduce-scatters, gradient all-reduce
  double total_s = 0;
};

struct Candidate {
  Layout layout;
  int64_t microbatches = 1;
  int64_t micro_batch = 1;  // sequences per micro-batch on one replica
  bool recompute = false;
  int stage = 0;  // pipeline: the stage whose memory `memory` is (the heaviest)
  int slots = 1;  // pipeline: micro-batch activation slots that stage holds at once
  Memory memory;
  bool fits = false;
  StepTime time;
  double tokens_per_s = 0;  // the whole cluster
  double mfu = 0;
};

struct PlanRequest {
  Config config;      // the experiment with its overrides
  int64_t vocab = 0;  // the tokenizer's size (model.vocab_size when that is set)
  Cluster cluster;
  CostConstants constants;
  // Plan this layout only (an explicit ICI_MESH_SHAPE / DCN_MESH_SHAPE); none: every layout.
  std::optional<Layout> only;
  // Set when the job fixes them (NUM_MICROBATCHES, train.recompute given): plan that choice only.
  std::optional<int64_t> microbatches;
  std::optional<bool> recompute;
  // Micro-batches of one sequence only (each layout's least memory): smallest_fitting_nodes.
  bool least_memory_only = false;
};

struct Plan {
  Cluster cluster;
  CostConstants constants;
  std::string experiment;
  std::string pipeline_schedule;  // train.pipeline_schedule: the pipelined plans' schedule
  int64_t global_batch = 0;
  int64_t tokens_per_row = 0;
  double flops_per_row = 0;  // model FLOPs (MFU's count)
  double num_parameters = 0;
  std::vector<Candidate> candidates;  // feasible first, fastest first
  std::vector<std::string> notes;     // layouts refused and why (one line per reason)
  int64_t layouts = 0;  // pipeline × data × fsdp × seq × tensor layouts enumerated
  double seconds = 0;   // time the plan took
  bool any_fits() const { return !candidates.empty() && candidates.front().fits; }
};

// Pax's ICI_MESH_SHAPE and DCN_MESH_SHAPE (`data,fsdp,tensor` or the five axes
// `pipeline,data,fsdp,seq,tensor`, brackets allowed, one -1 per vector filled in) on `cluster`:
// ICI covers a node's GPUs, DCN the nodes, tensor stays inside a node. InvalidArgument naming the
// numbers that disagree.
StatusOr<Layout> parse_layout(std::string_view ici, std::string_view dcn, const Cluster& cluster);

// Every layout of the cluster, planned and ranked. InvalidArgument for a config or cluster
// that cannot be planned (named in one line).
StatusOr<Plan> make_plan(const PlanRequest& request);

// The memory one rank of `layout` needs for micro-batches of `micro_batch` sequences, from
// Model::plan in `dtype` (activations) and the store's and AdamW's buffers; comm and workspace
// from `constants` (zero them for a CPU rank). With seq > 1 the rank's slice of every row and
// the K/V gathers' buffers (seq_attention_scratch_bytes); with pipeline > 1 stage `stage` (-1:
// the heaviest, named in *stage_out) holding the slots its schedule (config.train) keeps over
// `microbatches` micro-batches.
StatusOr<Memory> rank_memory(const Config& config, int64_t vocab, const Layout& layout,
                             int64_t micro_batch, bool recompute, DType dtype,
                             const CostConstants& constants, int64_t microbatches = 1,
                             int stage = -1, int* stage_out = nullptr);

// The activation slots stage `stage` of `stages` holds at once in ax-train's pipeline step
// (train/pipeline_step.cc: a slot taken when a micro-batch's input is received or its forward
// pass starts, given back after its backward pass) over `micro_batches` micro-batches.
int pipeline_slots(PipelineSchedule schedule, int stage, int stages, int micro_batches,
                   int chunks = 1);

// The FLOPs per row each stage of a pipeline of `stages` (config.train's schedule and chunks)
// computes, as the cost model times it: its layers of each stack at their own cost, the head's
// GEMMs on the stage with the head. They sum to the whole model's flops_per_row.
StatusOr<std::vector<double>> stage_flops_per_row(const Config& config, int64_t vocab, int stages);

// The smallest node count (same GPUs per node and kind) on which some layout (pipelined and seq
// layouts included) fits at micro-batches of one sequence with recomputation, searching
// up to max_nodes; 0 when none does.
int smallest_fitting_nodes(const PlanRequest& request, int max_nodes = 1024);

// The ranked table (the first `rows` candidates), then the constants it used.
std::string format_table(const Plan& plan, size_t rows);
// The best candidate as job-script variables and the --ax-mesh spec.
std::string format_best(const Plan& plan);
// The same for any candidate of `plan`.
std::string format_choice(const Plan& plan, const Candidate& c);
// One line for the job scripts' log: the candidate's layout, micro-batches, memory and step.
std::string summary_line(const Plan& plan, const Candidate& c);

}  // namespace ax::train::plan
