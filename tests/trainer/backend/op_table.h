// The op-test table: one entry per backend op case (op, shapes, how its inputs are drawn, how it
// runs forward and backward, tolerances, and where it has one a naive double-precision
// reference). Three drivers iterate it (docs/testing-ops.md):
//   op_reference_test.cc   the CPU backend (both GEMM kernels) against the entry's reference;
//   grad_check_test.cc     the CPU backend's backward pass against finite differences;
//   cuda_op_table_test.cc  the CUDA backend against the CPU backend in each dtype plan
//                          (cuda_parity.h; label gpu, skipped without a GPU).
// A new op needs one factory here (op_table.cc) and, for the reference driver, a reference in
// op_reference.cc; every driver picks it up.
//
// Tensors are named; each driver allocates them into an Env and the entry's functions read them
// by name (a name no tensor has gives an empty Tensor: an optional argument left out). The
// gradient of input "x" is "dx", the upstream gradient of output "y" is "dy".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "ax/trainer/backend/backend.h"

namespace ax::train::optable {

using Env = std::map<std::string, Tensor>;

// The dtype of a tensor in a dtype plan: the activation dtype (f32 on the CPU, bf16 or f32 on
// CUDA), always f32 (statistics, parameter gradients, optimizer state), or i32 ids.
enum class Kind : uint8_t { kAct, kF32, kI32 };

// What the backward pass does with an input's gradient "d<name>".
enum class Grad : uint8_t {
  kNone,     // no gradient (ids, or a gradient the case does not ask for)
  kAct,      // accumulates into an activation-dtype tensor
  kF32,      // accumulates into an f32 tensor (parameter gradients)
  kInPlace,  // overwrites the input itself (cross-entropy as the model calls it)
};

struct In {
  std::string name;
  std::vector<int64_t> shape;
  Kind kind = Kind::kAct;
  Grad grad = Grad::kNone;
  // Values: N(mean, scale²), or U(-scale, scale) in a case with uniform values; scale 0: zeros.
  float scale = 1, mean = 0;
  bool positive = false;     // |value| (AdamW's second moment)
  std::vector<int32_t> ids;  // a kI32 input's values
  float grad_scale = 1;      // the gradient's starting values (it must accumulate onto them)
  double grad_tol = 0;       // reference driver: the gradient's tolerance (see Out::tol)
  std::string grad_parity;   // parity driver: the gradient's row in kOutputs (cuda_parity.h)
  // Special values written over the drawn ones (saturated tails, huge logits), in every driver.
  std::function<void(std::vector<float>&)> edit;
};

struct Out {
  std::string name;
  std::vector<int64_t> shape;
  Kind kind = Kind::kAct;
  // Part of the finite-difference loss, with an upstream gradient "d<name>" of kind `dkind`
  // (saved statistics such as lse are not).
  bool projected = true;
  Kind dkind = Kind::kAct;
  bool in_place = false;  // the input of the same name, updated (AdamW, in-place add)
  bool scratch = false;   // set by the case itself (a derived input): compared nowhere
  // Reference driver: passes when |got - want| <= tol · (1 + |want|), infinities equal.
  double tol = 0;
  std::string parity;    // parity driver: its row in kOutputs; empty: not compared
  bool neg_inf = false;  // the case forces some -inf values (queries that see no key)
};

struct FiniteDiff {
  double eps, atol, rtol;  // passes when |analytic - numeric| <= atol + rtol · |numeric|
};

// Host values of a case's inputs (and of the upstream gradients "d<output>").
struct Host {
  std::map<std::string, std::vector<float>> f;
  std::map<std::string, std::vector<int32_t>> i;
  const std::vector<float>& operator[](const std::string& name) const { return f.at(name); }
  const std::vector<int32_t>& ids(const std::string& name) const { return i.at(name); }
  bool has(const std::string& name) const { return f.count(name) > 0 || i.count(name) > 0; }
};
// Wanted values by tensor name: outputs, and for "d<input>" what backward adds to the gradient
// (or, in a case whose backward overwrites, its value).
using Want = std::map<std::string, std::vector<double>>;

enum Driver : unsigned { kReference = 1, kGradient = 2, kParity = 4, kAllDrivers = 7 };

struct OpCase {
  std::string name;  // unique, [A-Za-z0-9_]
  std::vector<In> inputs;
  std::vector<Out> outputs;
  std::function<void(Backend&, Env&)> forward, backward;  // backward may be empty
  std::function<Want(const Host&)> reference;             // may be empty
  std::optional<FiniteDiff> fd;  // the gradient driver's tolerance (needs backward)
  unsigned drivers = kAllDrivers;
  bool uniform = false;  // values U(-scale, scale) instead of normal (the parity suite's cases)
  // The backward pass overwrites its gradients, and every upstream gradient is this scalar (the
  // cross-entropy ops take dloss, not a tensor); 0: gradients accumulate, upstream tensors.
  float dloss = 0;
  // Parity: the CUDA backward pass run again from the same starting gradients gives the same
  // bits (kernels without float atomics).
  bool same_bits_twice = false;
};

// Every case, in table order.
const std::vector<OpCase>& op_table();
// The cases a driver runs: its bit in `drivers`, and what it needs (a reference; a backward
// pass with a finite-difference tolerance).
std::vector<OpCase> cases_for(Driver driver);
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

// Draws an input's values (or an upstream or starting gradient's: `in` with the scale wanted).
std::vector<float> draw(const OpCase& c, const In& in, std::mt19937& rng);
int64_t numel(const std::vector<int64_t>& shape);

}  // namespace ax::train::optable
