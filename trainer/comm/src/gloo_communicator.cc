// The Gloo communicator: one gloo::rendezvous::Context per group over Gloo's TCP transport,
// bootstrapped through our Store under "<tag>/<instance>/gloo/". Gloo reports errors by throwing;
// every exception stops here and becomes a Status that names the missing ranks.
#include "ax/common/build_config.h"
#include "ax/trainer/comm/communicator.h"

#if AX_HAVE_GLOO
#include <arpa/inet.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <optional>
#include <vector>

#include "ax/common/logging.h"
#include "ax/trainer/comm/activity.h"
#include "comm_internal.h"

namespace ax::train::comm {
namespace {

// gloo::rendezvous::Store over ours. Gloo's keys are the group rank ("3") or "rank_3"; a timeout
// names the global ranks whose keys never appeared.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(comm::Store& store, std::string prefix, const std::vector<int>& ranks,
                   Millis timeout)
      : store_(store), prefix_(std::move(prefix)), ranks_(ranks), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    throw_if_error(store_.set(prefix_ + key, std::string_view(data.data(), data.size())));
  }
  std::vector<char> get(const std::string& key) override {
    StatusOr<std::string> v = store_.get(prefix_ + key, timeout_);
    throw_if_error(v.status(), {key});
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    std::vector<std::string> full;
    for (const std::string& k : keys) full.push_back(prefix_ + k);
    throw_if_error(store_.wait(full, std::min<Millis>(t, timeout_)), keys);
  }

 private:
  void throw_if_error(const Status& s, const std::vector<std::string>& keys = {}) const {
    if (s.ok()) return;
    std::vector<int> missing;
    for (std::string k : keys) {
      if (starts_with(k, "rank_")) k = k.substr(5);
      std::optional<int64_t> r = parse_int64(k);
      if (r && *r >= 0 && *r < static_cast<int64_t>(ranks_.size())) missing.push_back(ranks_[*r]);
    }
    std::string who = missing.empty() || s.code() != StatusCode::kDeadlineExceeded
                          ? std::string()
                          : str_cat(missing.size() == 1 ? "rank " : "ranks ",
                                    internal::rank_list(missing), " did not arrive: ");
    throw gloo::IoException(str_cat(who, s.message()));
  }

  comm::Store& store_;
  const std::string prefix_;
  const std::vector<int> ranks_;
  const Millis timeout_;
};

// The address Gloo listens on. Multi-node jobs need one the peers can reach: the local address
// that routes to the coordinator (what `ip route get <coordinator>` would pick), else the address
// the hostname resolves to, else loopback (enough when every rank runs on this machine).
std::string listen_address(const std::string& coordinator) {
  if (!coordinator.empty()) {
    std::string host = coordinator.substr(0, coordinator.rfind(':'));
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    addrinfo hints{};
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), "9", &hints, &res) == 0) {
      std::string found;
      for (addrinfo* a = res; a && found.empty(); a = a->ai_next) {
        int fd = socket(a->ai_family, SOCK_DGRAM, 0);
        if (fd < 0) continue;
        sockaddr_storage local{};
        socklen_t len = sizeof(local);
        char buf[INET6_ADDRSTRLEN] = {};
        // connect() on a UDP socket sends nothing; it only asks the kernel for the route.
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
            getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
            getnameinfo(reinterpret_cast<sockaddr*>(&local), len, buf, sizeof(buf), nullptr, 0,
                        NI_NUMERICHOST) == 0) {
          found = buf;
        }
        close(fd);
      }
      freeaddrinfo(res);
      if (!found.empty()) return found;
    }
  }
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(name, nullptr, &hints, &res) == 0) {
      freeaddrinfo(res);
      return name;
    }
  }
  return "127.0.0.1";
}

// Gloo writes to sockets with plain writev(); a peer that died must produce an error, not
// SIGPIPE killing this process. Installed once, only over the default action.
void ignore_sigpipe() {
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

// The f32 values of an f32 or bf16 buffer: the buffer itself, or a widened copy that store()
// rounds back into it.
class Widened {
 public:
  explicit Widened(const Tensor& t) : t_(t) {
    if (t.dtype != DType::kBF16) return;
    const uint16_t* p = static_cast<const uint16_t*>(t.data);
    copy_.resize(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < copy_.size(); ++i) copy_[i] = f32_from_bf16(p[i]);
  }
  float* data() { return t_.dtype == DType::kBF16 ? copy_.data() : t_.as<float>(); }
  void store() {
    if (t_.dtype != DType::kBF16) return;
    uint16_t* p = static_cast<uint16_t*>(t_.data);
    for (size_t i = 0; i < copy_.size(); ++i) p[i] = bf16_from_f32(copy_[i]);
  }

 private:
  Tensor t_;
  std::vector<float> copy_;
};

// Gloo slot prefixes of our ring reduce-scatter and of point-to-point transfers (Gloo's own
// collectives use 0x01..0x08).
constexpr uint8_t kReduceScatterSlotPrefix = 0x40;
constexpr uint8_t kP2PSlotPrefix = 0x41;

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<comm::Store> store, std::string prefix, std::string name,
                   std::vector<int> ranks, int rank, Millis timeout,
                   std::shared_ptr<gloo::transport::Device> device,
                   std::shared_ptr<gloo::rendezvous::Context> context)
      : store_(std::move(store)),
        prefix_(std::move(prefix)),
        name_(std::move(name)),
        ranks_(std::move(ranks)),
        rank_(rank),
        timeout_(timeout),
        device_(std::move(device)),
        context_(std::move(context)),
        activity_(GroupActivity::track(prefix_, name_)),
        sent_(ranks_.size(), 0),
        received_(ranks_.size(), 0) {
    std::weak_ptr<gloo::rendezvous::Context> weak = context_;
    domain_id_ = internal::join_failure_domain(*store_, ranks_[static_cast<size_t>(rank_)],
                                               {prefix_, rank_, [weak] {
                                                  if (auto c = weak.lock()) close_quietly(*c);
                                                }});
  }
  ~GlooCommunicator() override { internal::leave_failure_domain(*store_, domain_id_); }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ranks_.size()); }
  std::string name() const override { return name_; }
  int64_t bytes_moved() const override { return bytes_; }

  // bf16 buffers (the cpu-bf16 plan: tensor-parallel activations, FSDP weights) are summed in
  // f32 and rounded once; gathers and broadcasts move their bits unchanged.
  Status all_reduce(Tensor buf, ReduceOp op) override {
    AX_RETURN_IF_ERROR(internal::check_all_reduce(name_, buf, true));
    bytes_ += static_cast<int64_t>(buf.bytes());
    if (buf.numel() == 0) return Status::Ok();
    Widened wide(buf);
    return run("all_reduce", [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(wide.data(), static_cast<size_t>(buf.numel()));
      using Fn = void (*)(void*, const void*, const void*, size_t);
      opts.setReduceFunction(op == ReduceOp::kSum ? static_cast<Fn>(&gloo::sum<float>)
                                                  : static_cast<Fn>(&gloo::max<float>));
      gloo::allreduce(opts);
      wide.store();
    });
  }

  Status reduce_scatter(Tensor out, Tensor in) override {
    AX_RETURN_IF_ERROR(internal::check_reduce_scatter(name_, size(), out, in, true));
    bytes_ += static_cast<int64_t>(in.bytes());
    if (out.numel() == 0) return Status::Ok();
    Widened wide_in(in), wide_out(out);
    return run("reduce_scatter", [&] {
      ring_reduce_scatter(wide_out.data(), wide_in.data(), static_cast<size_t>(out.numel()));
      wide_out.store();
    });
  }

  Status all_gather(Tensor out, Tensor in) override {
    AX_RETURN_IF_ERROR(internal::check_all_gather(name_, size(), out, in, true));
    bytes_ += static_cast<int64_t>(out.bytes());
    if (in.numel() == 0) return Status::Ok();
    return run("all_gather", [&] {
      const size_t n = static_cast<size_t>(in.numel()), size = dtype_size(in.dtype);
      char* mine = static_cast<char*>(out.data) + static_cast<size_t>(rank_) * n * size;
      // Gloo's allgather copies `in` into this rank's block first; in-place needs no copy.
      if (in.data != mine) std::memmove(mine, in.data, n * size);
      gloo::AllgatherOptions opts(context_);
      if (in.dtype == DType::kBF16) {
        opts.setOutput(static_cast<uint16_t*>(out.data), n * ranks_.size());
      } else {
        opts.setOutput(out.as<float>(), n * ranks_.size());
      }
      gloo::allgather(opts);
    });
  }

  Status broadcast(Tensor buf, int root) override {
    AX_RETURN_IF_ERROR(internal::check_broadcast(name_, size(), buf, root, true));
    bytes_ += static_cast<int64_t>(buf.bytes());
    if (buf.numel() == 0) return Status::Ok();
    return run("broadcast", [&] {
      gloo::BroadcastOptions opts(context_);
      if (buf.dtype == DType::kBF16) {
        opts.setOutput(static_cast<uint16_t*>(buf.data), static_cast<size_t>(buf.numel()));
      } else {
        opts.setOutput(buf.as<float>(), static_cast<size_t>(buf.numel()));
      }
      opts.setRoot(root);
      gloo::broadcast(opts);
    });
  }

  Status barrier() override {
    return run("barrier", [&] {
      gloo::BarrierOptions opts(context_);
      gloo::barrier(opts);
    });
  }

  // Every transfer is posted on an unbound buffer of its own before any is waited for, so the
  // batch's order does not matter; the n-th transfer from a to b uses slot n of the p2p prefix on
  // both sides. The waits share one deadline: the whole batch gets `timeout`. A failure names the
  // transfer that failed, and the alive round looks for its peer only.
  Status exchange(const std::vector<P2POp>& ops) override {
    AX_RETURN_IF_ERROR(internal::check_exchange(name_, size(), rank_, ops, true));
    if (!failed_.ok()) return failed_;
    bytes_ += internal::exchange_bytes(ops);
    internal::copy_to_self(ops, rank_);
    struct Posted {
      const P2POp* op;
      std::unique_ptr<gloo::transport::UnboundBuffer> buf;
    };
    std::vector<Posted> posted;
    const P2POp* current = nullptr;
    CollectiveScope scope(activity_.get(), internal::exchange_name(ops, ranks_));
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    try {
      for (const P2POp& op : ops) {
        if (op.peer == rank_ || op.buf.bytes() == 0) continue;
        current = &op;
        auto buf = context_->createUnboundBuffer(op.buf.data, op.buf.bytes());
        const size_t peer = static_cast<size_t>(op.peer);
        if (op.kind == P2POp::Kind::kSend) {
          buf->send(op.peer, gloo::Slot::build(kP2PSlotPrefix, sent_[peer]++));
        } else {
          buf->recv(op.peer, gloo::Slot::build(kP2PSlotPrefix, received_[peer]++));
        }
        posted.push_back({&op, std::move(buf)});
      }
      for (Posted& p : posted) {
        current = p.op;
        const Millis left = std::max(Millis(0), std::chrono::duration_cast<Millis>(
                                                    deadline - std::chrono::steady_clock::now()));
        if (p.op->kind == P2POp::Kind::kSend) {
          p.buf->waitSend(left);
        } else {
          p.buf->waitRecv(left);
        }
      }
    } catch (const std::exception& e) {
      posted.clear();
      return fail(internal::p2p_name(*current, ranks_), e.what(), scope.seq(), {current->peer});
    }
    return Status::Ok();
  }

 private:
  template <typename Fn>
  Status run(std::string_view op, Fn&& fn) {
    if (!failed_.ok()) return failed_;
    CollectiveScope scope(activity_.get(), op);
    try {
      fn();
      return Status::Ok();
    } catch (const std::exception& e) {
      return fail(op, e.what(), scope.seq());
    }
  }

  // Closing this rank's connections of every group (fail_rank) wakes the peers that wait on
  // it, so every live rank reaches its alive round within moments instead of after its own
  // timeout. The caller reports the Status (one line per rank); the log has it at debug level.
  // `seq`: the call's number in the group (activity.h). `peers`: the group ranks a
  // point-to-point call waited for (empty for a collective).
  Status fail(std::string_view op, const std::string& what, int64_t seq,
              const std::vector<int>& peers = {}) {
    internal::TransportError err = internal::classify_gloo_error(what, timeout_);
    err.seq = seq;
    AX_LOG(kDebug, "comm") << op << " on " << name_ << ": gloo: " << what;
    close_quietly(*context_);
    failed_ = internal::fail_rank(*store_, op, name_, prefix_, ranks_, rank_, err, timeout_, peers);
    AX_LOG(kDebug, "comm") << failed_.message();
    return failed_;
  }

  static void close_quietly(gloo::rendezvous::Context& context) {
    try {
      context.closeConnections();
    } catch (const std::exception& e) {
      AX_LOG(kDebug, "comm") << "closing a gloo context: " << e.what();
    }
  }

  // Ring reduce-scatter without touching `in`: at step s this rank sends its running sum of
  // block (rank - s - 1) to the right and adds the left neighbour's running sum of block
  // (rank - s - 2) to its own input block; after size - 1 steps it holds the total of block rank.
  void ring_reduce_scatter(float* out, const float* in, size_t n) {
    const int p = size();
    const int right = (rank_ + 1) % p, left = (rank_ + p - 1) % p;
    auto block = [&](int b) { return in + static_cast<size_t>((b % p + p) % p) * n; };
    std::vector<float> send_buf(block(rank_ - 1), block(rank_ - 1) + n), recv_buf(n);
    auto tx = context_->createUnboundBuffer(send_buf.data(), n * sizeof(float));
    auto rx = context_->createUnboundBuffer(recv_buf.data(), n * sizeof(float));
    const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, 0);
    for (int s = 0; s < p - 1; ++s) {
      tx->send(right, slot + s);
      rx->recv(left, slot + s);
      rx->waitRecv(timeout_);
      tx->waitSend(timeout_);
      const float* mine = block(rank_ - s - 2);
      float* dst = s == p - 2 ? out : send_buf.data();
      for (size_t i = 0; i < n; ++i) dst[i] = mine[i] + recv_buf[i];
    }
  }

  std::shared_ptr<comm::Store> store_;
  const std::string prefix_;  // "<tag>/<instance>"
  const std::string name_;
  const std::vector<int> ranks_;
  const int rank_;
  const Millis timeout_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::shared_ptr<GroupActivity> activity_;  // the group's collective count (activity.h)
  // Point-to-point transfers so far to / from each group rank: the next one's slot.
  std::vector<uint32_t> sent_, received_;
  int64_t bytes_ = 0;
  int domain_id_ = 0;
  Status failed_;  // once a collective failed, the group is unusable: every later call returns it
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> make_gloo_communicator(std::shared_ptr<Store> store,
                                                               const std::string& tag,
                                                               const std::vector<int>& ranks,
                                                               int global_rank,
                                                               const CommOptions& options) {
  AX_ASSIGN_OR_RETURN(int rank, internal::check_group(tag, ranks, global_rank));
  if (ranks.size() == 1) return internal::make_local_communicator("gloo", tag, global_rank, true);
  const std::string name = internal::group_name("gloo", tag, ranks);
  AX_ASSIGN_OR_RETURN(int64_t instance,
                      internal::group_instance(*store, tag, static_cast<int>(ranks.size())));
  const std::string prefix = str_cat(tag, "/", instance);
  ignore_sigpipe();
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = listen_address(options.coordinator);
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context =
        std::make_shared<gloo::rendezvous::Context>(rank, static_cast<int>(ranks.size()));
    context->setTimeout(options.timeout);
    GlooStoreAdapter adapter(*store, prefix + "/gloo/", ranks, options.timeout);
    context->connectFullMesh(adapter, device);
    AX_LOG(kDebug, "comm") << "connected " << name << " on " << device->str();
    return std::unique_ptr<Communicator>(new GlooCommunicator(
        std::move(store), prefix, name, ranks, rank, options.timeout, device, context));
  } catch (const std::exception& e) {
    const std::string what = internal::gloo_message(e.what());
    const bool late =
        what.find("did not arrive") != std::string::npos ||
        internal::classify_gloo_error(what, options.timeout).code == StatusCode::kDeadlineExceeded;
    return Status(late ? StatusCode::kDeadlineExceeded : StatusCode::kUnavailable,
                  str_cat("creating ", name, ": ", what));
  }
}

}  // namespace ax::train::comm

#else  // !AX_HAVE_GLOO

namespace ax::train::comm {

StatusOr<std::unique_ptr<Communicator>> make_gloo_communicator(std::shared_ptr<Store>,
                                                               const std::string& tag,
                                                               const std::vector<int>&, int,
                                                               const CommOptions&) {
  return Unimplemented("gloo communicator ", tag, ": ax was built without Gloo (AX_WITH_GLOO=OFF)");
}

}  // namespace ax::train::comm

#endif  // AX_HAVE_GLOO
