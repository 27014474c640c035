# Every external dependency is found here, once. A required one that is missing, or an optional
# one that was asked for and is missing, stops configuration naming the Debian package to install
# (scripts/setup.sh installs them all). Each optional dependency sets one AX_HAVE_X, which
# common/include/ax/common/build_config.h.in turns into a definition read in one place.
include_guard(GLOBAL)
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

function(ax_missing what debian_package)
  message(FATAL_ERROR "ax: ${what} not found. Install the Debian package '${debian_package}' "
                      "(bash scripts/setup.sh installs every dependency), or turn the option off.")
endfunction()

# pkg-config dependency as an imported target ax::<name>.
function(ax_pkg name module debian_package)
  pkg_check_modules(AX_PC_${name} QUIET IMPORTED_TARGET GLOBAL ${module})
  if(NOT AX_PC_${name}_FOUND)
    ax_missing("${module} (pkg-config)" ${debian_package})
  endif()
  add_library(ax::${name} ALIAS PkgConfig::AX_PC_${name})
endfunction()

# Header + library found by path, for packages that ship no pkg-config or CMake file.
function(ax_lib name header library debian_package)
  find_path(AX_${name}_INCLUDE ${header} PATH_SUFFIXES ${ARGN})
  find_library(AX_${name}_LIBRARY ${library} PATHS /usr/lib /usr/lib/x86_64-linux-gnu)
  if(NOT AX_${name}_INCLUDE OR NOT AX_${name}_LIBRARY)
    ax_missing("${header} / lib${library}" ${debian_package})
  endif()
  add_library(ax_dep_${name} INTERFACE)
  target_include_directories(ax_dep_${name} SYSTEM INTERFACE ${AX_${name}_INCLUDE})
  target_link_libraries(ax_dep_${name} INTERFACE ${AX_${name}_LIBRARY})
  add_library(ax::${name} ALIAS ax_dep_${name})
endfunction()

# Required by every build.
ax_pkg(zstd libzstd libzstd-dev)
ax_pkg(sentencepiece sentencepiece libsentencepiece-dev)
ax_pkg(xxhash libxxhash libxxhash-dev)
# Hugging Face tokenizer.json: the pre-tokenizers' regular expressions (Unicode properties,
# lookahead) and Unicode normalization (NFC, NFKC, grapheme clusters) (docs/tokenization.md).
ax_pkg(pcre2 libpcre2-8 libpcre2-dev)
ax_pkg(utf8proc libutf8proc libutf8proc-dev)
ax_pkg(crypto libcrypto libssl-dev)  # HMAC-SHA256 of the TCP store's handshake
find_package(nlohmann_json 3 QUIET)
if(NOT nlohmann_json_FOUND)
  ax_missing("nlohmann_json" nlohmann-json3-dev)
endif()
# Header-only: every program's command line (common/include/ax/common/cli.h).
find_package(CLI11 2 QUIET CONFIG)
if(NOT CLI11_FOUND)
  ax_missing("CLI11" libcli11-dev)
endif()
if(AX_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    ax_missing("GoogleTest" libgtest-dev)
  endif()
  # protoc + libprotobuf: the independent TensorBoard event decoder of the trainer's config tests.
  ax_pkg(protobuf protobuf libprotobuf-dev)
  find_program(AX_PROTOC protoc)
  if(NOT AX_PROTOC)
    ax_missing("protoc" protobuf-compiler)
  endif()
endif()

# Optional, one option each.
set(AX_HAVE_HWLOC OFF)
if(AX_WITH_HWLOC)
  ax_pkg(hwloc hwloc libhwloc-dev)
  set(AX_HAVE_HWLOC ON)
endif()
set(AX_HAVE_PMIX OFF)
if(AX_WITH_PMIX)
  ax_pkg(pmix pmix libpmix-dev)
  set(AX_HAVE_PMIX ON)
endif()
set(AX_HAVE_SLURM OFF)
if(AX_WITH_SLURM)
  find_path(AX_SLURM_INCLUDE slurm/spank.h)
  if(NOT AX_SLURM_INCLUDE)
    ax_missing("slurm/spank.h" libslurm-dev)
  endif()
  add_library(ax_dep_slurm INTERFACE)
  target_include_directories(ax_dep_slurm SYSTEM INTERFACE ${AX_SLURM_INCLUDE})
  add_library(ax::slurm ALIAS ax_dep_slurm)
  set(AX_HAVE_SLURM ON)
endif()
set(AX_HAVE_GLOO OFF)
if(AX_WITH_GLOO)
  ax_lib(gloo gloo/config.h gloo libgloo-dev)
  set(AX_HAVE_GLOO ON)
endif()
set(AX_HAVE_OPENBLAS OFF)
if(AX_WITH_OPENBLAS)
  ax_lib(openblas cblas.h openblas libopenblas-dev x86_64-linux-gnu/openblas-pthread openblas-pthread)
  set(AX_HAVE_OPENBLAS ON)
endif()

# CUDA: AUTO enables it when a compiler was found (see the top-level CMakeLists.txt).
set(AX_HAVE_CUDA OFF)
if(NOT AX_ENABLE_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90 CACHE STRING "sm_80 (A100) and sm_90 (H100/H200)")
    endif()
    # The backend's bf16 kernels and tensor-core attention (wmma bf16) need sm_80: code built
    # for an older architecture would be JIT-compiled on a newer device into kernels that trap.
    foreach(arch IN LISTS CMAKE_CUDA_ARCHITECTURES)
      string(REGEX MATCH "^[0-9]+" arch_number "${arch}")
      if(arch STREQUAL "all" OR arch STREQUAL "all-major" OR
         (arch_number AND arch_number LESS 80))
        message(FATAL_ERROR "CMAKE_CUDA_ARCHITECTURES has ${arch}: ax's CUDA backend needs "
                            "sm_80 or later (bf16 tensor cores)")
      endif()
    endforeach()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    # NCCL ships with the toolkit image (/usr/local/cuda/lib) or as Debian's libnccl-dev.
    find_path(AX_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(AX_NCCL_LIBRARY nccl
                 HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib
                       ${CUDAToolkit_LIBRARY_ROOT}/lib64)
    if(NOT AX_NCCL_INCLUDE OR NOT AX_NCCL_LIBRARY)
      ax_missing("nccl.h / libnccl" libnccl-dev)
    endif()
    add_library(ax_dep_nccl INTERFACE)
    target_include_directories(ax_dep_nccl SYSTEM INTERFACE ${AX_NCCL_INCLUDE})
    target_link_libraries(ax_dep_nccl INTERFACE ${AX_NCCL_LIBRARY} CUDA::cudart)
    add_library(ax::nccl ALIAS ax_dep_nccl)
    set(AX_HAVE_CUDA ON)
  elseif(AX_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ax: AX_ENABLE_CUDA=ON but no CUDA toolkit was found at /usr/local/cuda. "
                        "Install the CUDA toolkit or pass -DAX_ENABLE_CUDA=OFF.")
  endif()
endif()
