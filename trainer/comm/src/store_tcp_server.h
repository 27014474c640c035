// The TCP store's server: one poll() loop in a thread of rank 0's process (docs/bootstrap.md).
// A connection is served only after it proved the job secret (store_auth.h); what admitted
// clients may make it hold is bounded (AX_STORE_MAX_KEYS, AX_STORE_MAX_BYTES).
#pragma once

#include <memory>
#include <string>

#include "ax/common/status.h"

namespace ax::train::comm {

class TcpServer {
 public:
  // Listens on `ip` (numeric IPv4, what `host` resolved to) at `port` (0 = a free one); log lines
  // name the store "host:port". InvalidArgument for a malformed AX_STORE_MAX_* value.
  // `world` sizes it: the descriptors it needs (ensure_descriptors), the accept queue, how many
  // connections may be unproven at once (max(64, world)).
  static StatusOr<std::unique_ptr<TcpServer>> start(const std::string& ip, int port,
                                                    const std::string& secret,
                                                    const std::string& host, int world);
  // Stops accepting and serves the admitted clients until they have all gone, or 10 s.
  virtual ~TcpServer() = default;
  virtual int port() const = 0;
};

// Descriptors rank 0's process keeps besides one per rank's store connection (its own client,
// logs, checkpoint files, the communicators' sockets of a GPU job).
inline constexpr int kStoreSpareDescriptors = 256;

// Makes sure this process may open world + kStoreSpareDescriptors files: raises the soft
// RLIMIT_NOFILE up to the hard limit when it is lower, else FailedPrecondition in one line that
// says how many are needed and how to raise the limit (ulimit -n, Slurm's
// PropagateResourceLimits). `where` names the store in the message.
Status ensure_descriptors(int world, const std::string& where);

}  // namespace ax::train::comm
