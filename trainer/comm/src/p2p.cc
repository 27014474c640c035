// The transport-free pieces of point-to-point (communicator.h's exchange): a batch's checks, its
// names in failure messages, its peers and bytes, and the copies a rank sends to itself.
#include <algorithm>
#include <cstring>

#include "comm_internal.h"

namespace ax::train::comm::internal {
namespace {

bool is_send(const P2POp& op) { return op.kind == P2POp::Kind::kSend; }

// The sends to `rank` and the receives from it, in batch order.
void self_ops(const std::vector<P2POp>& ops, int rank, std::vector<const P2POp*>& sends,
              std::vector<const P2POp*>& recvs) {
  for (const P2POp& op : ops) {
    if (op.peer == rank) (is_send(op) ? sends : recvs).push_back(&op);
  }
}

}  // namespace

std::string p2p_name(const P2POp& op, const std::vector<int>& ranks) {
  const bool inside = op.peer >= 0 && op.peer < static_cast<int>(ranks.size());
  const int global = inside ? ranks[static_cast<size_t>(op.peer)] : op.peer;
  return str_cat(is_send(op) ? "send to rank " : "recv from rank ", global);
}

std::string exchange_name(const std::vector<P2POp>& ops, const std::vector<int>& ranks) {
  if (ops.size() == 1) return p2p_name(ops[0], ranks);
  std::string list;
  for (const P2POp& op : ops) list += (list.empty() ? "" : ", ") + p2p_name(op, ranks);
  return str_cat("exchange (", list, ")");
}

Status check_exchange(const std::string& group, int size, int rank, const std::vector<P2POp>& ops,
                      bool allow_bf16) {
  for (const P2POp& op : ops) {
    const std::string what =
        str_cat(is_send(op) ? "send to" : "recv from", " group rank ", op.peer, " on ", group);
    if (op.peer < 0 || op.peer >= size) {
      return InvalidArgument(what, ": peer ", op.peer, " is not a group rank (0..", size - 1, ")");
    }
    if (op.buf.dtype != DType::kF32 && !(allow_bf16 && op.buf.dtype == DType::kBF16)) {
      return InvalidArgument(what, ": tensor ", op.buf.shape_string(), " has dtype ",
                             dtype_name(op.buf.dtype), "; this backend takes f32",
                             allow_bf16 ? " or bf16" : "");
    }
    if (op.buf.numel() > 0 && op.buf.empty()) {
      return InvalidArgument(what, ": tensor ", op.buf.shape_string(), " has no data");
    }
  }
  std::vector<const P2POp*> sends, recvs;
  self_ops(ops, rank, sends, recvs);
  for (size_t i = 0; i < std::max(sends.size(), recvs.size()); ++i) {
    if (i >= sends.size() || i >= recvs.size()) {
      return InvalidArgument("exchange on ", group, ": ", sends.size(), " send(s) to this rank (",
                             rank, ") and ", recvs.size(),
                             " recv(s) from it; each send to itself needs a recv in the same call");
    }
    const Tensor &s = sends[i]->buf, &r = recvs[i]->buf;
    if (s.dtype != r.dtype || s.numel() != r.numel()) {
      return InvalidArgument("exchange on ", group, ": send ", i, " to this rank is ",
                             s.shape_string(), " but the recv that meets it is ", r.shape_string());
    }
  }
  return Status::Ok();
}

std::vector<int> exchange_peers(const std::vector<P2POp>& ops, int rank) {
  std::vector<int> peers;
  for (const P2POp& op : ops) {
    if (op.peer != rank) peers.push_back(op.peer);
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

int64_t exchange_bytes(const std::vector<P2POp>& ops) {
  int64_t bytes = 0;
  for (const P2POp& op : ops) bytes += static_cast<int64_t>(op.buf.bytes());
  return bytes;
}

void copy_to_self(const std::vector<P2POp>& ops, int rank) {
  std::vector<const P2POp*> sends, recvs;
  self_ops(ops, rank, sends, recvs);
  for (size_t i = 0; i < std::min(sends.size(), recvs.size()); ++i) {
    const Tensor &s = sends[i]->buf, &r = recvs[i]->buf;
    if (s.bytes() > 0 && s.data != r.data) std::memmove(r.data, s.data, s.bytes());
  }
}

}  // namespace ax::train::comm::internal
