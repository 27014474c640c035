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
  static StatusOr<std::unique_ptr<TcpServer>> start(const std::string& ip, int port,
                                                    const std::string& secret,
                                                    const std::string& host);
  // Stops accepting and serves the admitted clients until they have all gone, or 10 s.
  virtual ~TcpServer() = default;
  virtual int port() const = 0;
};

}  // namespace ax::train::comm
