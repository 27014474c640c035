#include "cpu_blas.h"

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <optional>
#include <vector>

#include "ax/common/build_config.h"
#include "ax/common/check.h"
#include "ax/common/env.h"
#include "ax/common/logging.h"
#include "ax/common/strings.h"
#include "cpu_math.h"

#if AX_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace ax::train::cpu {
namespace {

// GEMMs smaller than this (M·N·K) run in the loop kernel: the OpenBLAS call costs more.
constexpr int64_t kMinBlasWork = 32 * 32 * 32;

#if AX_HAVE_OPENBLAS
const EnvKnob<std::string> kOpenBlasCoreType(
    "AX_OPENBLAS_CORETYPE", "auto",
    "OpenBLAS kernels for the CPU backend, chosen before it loads the library: 'auto' lets "
    "OpenBLAS detect the CPU and ignores an inherited OPENBLAS_CORETYPE (some images set "
    "Haswell, which halves sgemm speed on AVX-512 CPUs); 'env' keeps OPENBLAS_CORETYPE; any "
    "other value is an OpenBLAS core name (SkylakeX, Cooperlake, Haswell, Zen, ...)");

// Sets environment variables for the duration of a scope and restores them after.
class ScopedEnv {
 public:
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      const auto& [name, old] = *it;
      if (old) {
        setenv(name.c_str(), old->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  void set(const std::string& name, const std::optional<std::string>& value) {
    const char* old = std::getenv(name.c_str());
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value) {
      setenv(name.c_str(), value->c_str(), 1);
    } else {
      unsetenv(name.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

struct OpenBlas {
  void* sgemm = nullptr;
  std::string description;
};

OpenBlas load_openblas() {
  constexpr const char* kSoname = "libopenblas.so.0";
  std::string how;
  void* lib = dlopen(kSoname, RTLD_NOW | RTLD_NOLOAD);
  if (lib != nullptr) {
    how = "linked into the program, so its kernels were chosen at start-up (OPENBLAS_CORETYPE)";
  } else {
    auto core = kOpenBlasCoreType.get();
    AX_CHECK(core.ok()) << core.status().to_string();
    const char* env_core = std::getenv("OPENBLAS_CORETYPE");
    std::string inherited = env_core ? env_core : "";
    ScopedEnv env;
    if (*core == "auto") {
      env.set("OPENBLAS_CORETYPE", std::nullopt);
      how = inherited.empty() ? "cpu detected"
                              : str_cat("cpu detected, inherited OPENBLAS_CORETYPE=", inherited,
                                        " ignored (AX_OPENBLAS_CORETYPE=env keeps it)");
    } else if (*core == "env") {
      how = inherited.empty() ? "cpu detected" : str_cat("OPENBLAS_CORETYPE=", inherited);
    } else {
      env.set("OPENBLAS_CORETYPE", *core);
      how = str_cat("AX_OPENBLAS_CORETYPE=", *core);
    }
    // The pool calls OpenBLAS single-threaded: do not let it start idle threads of its own.
    if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) env.set("OPENBLAS_NUM_THREADS", "1");
    lib = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      AX_LOG(kWarn, "cpu") << "cannot load " << kSoname << " (" << dlerror()
                           << "): GEMMs use the builtin kernel, several times slower";
      return {};
    }
  }
  void* sgemm = dlsym(lib, "cblas_sgemm");
  auto set_threads = reinterpret_cast<void (*)(int)>(dlsym(lib, "openblas_set_num_threads"));
  auto config = reinterpret_cast<const char* (*)()>(dlsym(lib, "openblas_get_config"));
  auto corename = reinterpret_cast<const char* (*)()>(dlsym(lib, "openblas_get_corename"));
  if (sgemm == nullptr || set_threads == nullptr || config == nullptr || corename == nullptr) {
    AX_LOG(kWarn, "cpu") << kSoname << " lacks cblas_sgemm or the openblas_* functions: GEMMs "
                         << "use the builtin kernel";
    return {};
  }
  set_threads(1);
  auto words = str_split(config(), ' ');
  std::string version = words.size() >= 2 ? words[0] + " " + words[1] : "OpenBLAS";
  OpenBlas ob{sgemm, str_cat(version, " core ", corename())};
  AX_LOG(kInfo, "cpu") << ob.description << ": " << how;
  return ob;
}

const OpenBlas& openblas() {
  static const OpenBlas ob = load_openblas();
  return ob;
}
#endif  // AX_HAVE_OPENBLAS

// Per-thread buffer for packed panels of B.
float* pack_buffer(size_t floats) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < floats) buffer.resize(floats);
  return buffer.data();
}

// C[0:M, 0:nc] += op(A)[0:M, k0:k0+kc] · bp, bp (kc, nc) packed. Four rows of C at a time
// share each load of bp; the inner loop over columns vectorises.
AX_CPU_KERNEL
void gemm_block(int64_t M, int64_t nc, int64_t kc, const float* A, int64_t lda, bool ta, int64_t k0,
                const float* bp, float* C, int64_t ldc) {
  auto a_at = [&](int64_t i, int64_t k) { return ta ? A[k * lda + i] : A[i * lda + k]; };
  int64_t i = 0;
  for (; i + 4 <= M; i += 4) {
    float* __restrict c0 = C + i * ldc;
    float* __restrict c1 = c0 + ldc;
    float* __restrict c2 = c1 + ldc;
    float* __restrict c3 = c2 + ldc;
    for (int64_t k = 0; k < kc; ++k) {
      const float* __restrict b = bp + k * nc;
      float a0 = a_at(i, k0 + k), a1 = a_at(i + 1, k0 + k);
      float a2 = a_at(i + 2, k0 + k), a3 = a_at(i + 3, k0 + k);
      for (int64_t j = 0; j < nc; ++j) {
        c0[j] += a0 * b[j];
        c1[j] += a1 * b[j];
        c2[j] += a2 * b[j];
        c3[j] += a3 * b[j];
      }
    }
  }
  for (; i < M; ++i) {
    float* __restrict c = C + i * ldc;
    for (int64_t k = 0; k < kc; ++k) {
      const float* __restrict b = bp + k * nc;
      float a = a_at(i, k0 + k);
      for (int64_t j = 0; j < nc; ++j) c[j] += a * b[j];
    }
  }
}

// The loop kernel: C = beta · C, then blocks of op(B) packed (scaled by alpha) and multiplied in.
void gemm_builtin(const GemmArgs& g) {
  constexpr int64_t kKc = 128, kNc = 512;
  for (int64_t i = 0; i < g.M; ++i) {
    float* c = g.C + i * g.ldc;
    if (g.beta == 0) {
      std::fill(c, c + g.N, 0.0f);
    } else if (g.beta != 1) {
      for (int64_t j = 0; j < g.N; ++j) c[j] *= g.beta;
    }
  }
  if (g.alpha == 0) return;
  float* bp = pack_buffer(kKc * kNc);
  for (int64_t k0 = 0; k0 < g.K; k0 += kKc) {
    int64_t kc = std::min(kKc, g.K - k0);
    for (int64_t j0 = 0; j0 < g.N; j0 += kNc) {
      int64_t nc = std::min(kNc, g.N - j0);
      for (int64_t k = 0; k < kc; ++k) {
        for (int64_t j = 0; j < nc; ++j) {
          int64_t kk = k0 + k, jj = j0 + j;
          float b = g.tb == Trans::kNo ? g.B[kk * g.ldb + jj] : g.B[jj * g.ldb + kk];
          bp[k * nc + j] = g.alpha * b;
        }
      }
      gemm_block(g.M, nc, kc, g.A, g.lda, g.ta == Trans::kYes, k0, bp, g.C + j0, g.ldc);
    }
  }
}

}  // namespace

Gemm::Gemm(bool use_openblas) : description_("builtin GEMM") {
#if AX_HAVE_OPENBLAS
  if (use_openblas && openblas().sgemm != nullptr) {
    sgemm_ = openblas().sgemm;
    description_ = openblas().description;
  }
#endif
}

void Gemm::operator()(const GemmArgs& g) const {
  if (g.M <= 0 || g.N <= 0) return;
  flops_.fetch_add(2 * g.M * g.N * g.K, std::memory_order_relaxed);
#if AX_HAVE_OPENBLAS
  if (sgemm_ != nullptr && g.M * g.N * g.K >= kMinBlasWork) {
    for (int64_t v : {g.M, g.N, g.K, g.lda, g.ldb, g.ldc}) AX_CHECK_LE(v, INT_MAX);
    auto sgemm = reinterpret_cast<decltype(&cblas_sgemm)>(sgemm_);
    auto trans = [](Trans t) { return t == Trans::kYes ? CblasTrans : CblasNoTrans; };
    sgemm(CblasRowMajor, trans(g.ta), trans(g.tb), static_cast<int>(g.M), static_cast<int>(g.N),
          static_cast<int>(g.K), g.alpha, g.A, static_cast<int>(g.lda), g.B,
          static_cast<int>(g.ldb), g.beta, g.C, static_cast<int>(g.ldc));
    return;
  }
#endif
  gemm_builtin(g);
}

}  // namespace ax::train::cpu
