// The seq axis's attention exchange (seq_attention.h). A collective moves each rank's block as one
// piece: the all-gather leaves (S, B, Tl, R), rank by rank, where the attention op reads whole
// rows (B, S·Tl, R); the two differ only for B > 1, where B·S contiguous blocks of Tl rows are
// copied between them (and back for the reduce-scatter). Segment ids (i32) travel as f32 bits:
// an all-gather moves them unchanged.
#include "ax/trainer/parallel/seq_attention.h"

#include <initializer_list>

namespace ax::train {
namespace {

// Backend buffers of one call, freed when it returns. alloc() gives zeroed memory.
class SeqScratch {
 public:
  explicit SeqScratch(Backend& be) : be_(be) {}
  SeqScratch(const SeqScratch&) = delete;
  SeqScratch& operator=(const SeqScratch&) = delete;
  ~SeqScratch() {
    for (void* p : blocks_) be_.free(p);
  }
  StatusOr<Tensor> take(DType dtype, std::initializer_list<int64_t> dims) {
    Tensor t(nullptr, dtype, dims);
    AX_ASSIGN_OR_RETURN(void* p, be_.alloc(t.bytes()));
    blocks_.push_back(p);
    t.data = p;
    return t;
  }

 private:
  Backend& be_;
  std::vector<void*> blocks_;
};

// Rows [t0, t0 + n) of batch row b of a (B, T, R) tensor: one contiguous block.
Tensor row_block(const Tensor& x, int64_t b, int64_t t0, int64_t n) {
  const int64_t T = x.dim(1), R = x.dim(2);
  char* at = static_cast<char*>(x.data) + ((b * T + t0) * R) * dtype_size(x.dtype);
  return Tensor(at, x.dtype, {n, R});
}

// Copies between the collectives' layout (S, B, Tl, R) and whole rows (B, S·Tl, R).
void blocks_to_rows(Backend& be, const Tensor& blocks, const Tensor& rows, int S) {
  const int64_t B = rows.dim(0), Tl = rows.dim(1) / S;
  for (int s = 0; s < S; ++s) {
    for (int64_t b = 0; b < B; ++b) {
      be.copy(row_block(rows, b, s * Tl, Tl), row_block(blocks, s * B + b, 0, Tl));
    }
  }
}
void rows_to_blocks(Backend& be, const Tensor& rows, const Tensor& blocks, int S) {
  const int64_t B = rows.dim(0), Tl = rows.dim(1) / S;
  for (int s = 0; s < S; ++s) {
    for (int64_t b = 0; b < B; ++b) {
      be.copy(row_block(blocks, s * B + b, 0, Tl), row_block(rows, b, s * Tl, Tl));
    }
  }
}

// The same memory as f32 elements of the same size (i32 ids for an all-gather, which moves
// bits).
Tensor as_f32_bits(const Tensor& t) {
  Tensor f = t;
  f.dtype = DType::kF32;
  return f;
}

// The whole rows (B, S·Tl, R) of a slice (B, Tl, R) gathered over the group.
StatusOr<Tensor> gather_rows(Backend& be, comm::Communicator& group, SeqScratch& scratch,
                             const Tensor& slice) {
  const int S = group.size();
  const int64_t B = slice.dim(0), Tl = slice.dim(1), R = slice.dim(2);
  AX_ASSIGN_OR_RETURN(Tensor rows, scratch.take(slice.dtype, {B, S * Tl, R}));
  const bool bits = slice.dtype == DType::kI32;
  if (B == 1) {
    AX_RETURN_IF_ERROR(bits ? group.all_gather(as_f32_bits(rows), as_f32_bits(slice))
                            : group.all_gather(rows, slice));
  } else {
    AX_ASSIGN_OR_RETURN(Tensor blocks, scratch.take(slice.dtype, {S * B, Tl, R}));
    AX_RETURN_IF_ERROR(bits ? group.all_gather(as_f32_bits(blocks), as_f32_bits(slice))
                            : group.all_gather(blocks, slice));
    group.join();  // the copies read what the gather wrote
    blocks_to_rows(be, blocks, rows, S);
    return rows;
  }
  group.join();
  return rows;
}

struct Gathered {
  Tensor kv;
  AttentionSpec spec;  // the slice's queries against the whole row's keys
};

StatusOr<Gathered> gather(Backend& be, comm::Communicator& group, SeqScratch& scratch,
                          const Tensor& q, const Tensor& kv, const AttentionSpec& spec) {
  AX_CHECK(q.ndim == 3 && kv.ndim == 3 && q.dim(0) == kv.dim(0) && q.dim(1) == kv.dim(1))
      << "seq attention: q " << q.shape_string() << " and kv " << kv.shape_string()
      << " are not the same slice of rows";
  AX_CHECK(spec.q_first_position == 0 && spec.k_first_position == 0)
      << "seq attention: the spec is the whole row's; the exchange sets the first positions";
  Gathered g;
  g.spec = spec;
  g.spec.q_first_position = group.rank() * q.dim(1);
  AX_ASSIGN_OR_RETURN(g.kv, gather_rows(be, group, scratch, kv));
  if (!spec.k_segments.empty()) {
    const Tensor ids = spec.k_segments.view({spec.k_segments.dim(0), spec.k_segments.dim(1), 1});
    AX_ASSIGN_OR_RETURN(Tensor all, gather_rows(be, group, scratch, ids));
    g.spec.k_segments = all.view({all.dim(0), all.dim(1)});
  }
  return g;
}

}  // namespace

StatusOr<SeqSlice> seq_slice(int64_t row_length, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) {
    return InvalidArgument("seq slice: rank ", rank, " of a seq group of ", size);
  }
  if (row_length % size != 0) {
    return InvalidArgument("the sequence length ", row_length,
                           " does not split over the seq axis (", size,
                           " ranks): make it a multiple of ", size);
  }
  const int64_t length = row_length / size;
  return SeqSlice{rank * length, length};
}

size_t seq_attention_scratch_bytes(int64_t batch, int64_t slice, int64_t columns, int size,
                                   DType dtype, bool segments) {
  // gather_rows: the whole rows, and with several rows the blocks the all-gather writes first.
  const auto gathered = [&](int64_t cols, DType dt) {
    const int64_t rows = batch * size * slice * cols;
    return static_cast<size_t>((batch > 1 ? 2 : 1) * rows) * dtype_size(dt);
  };
  size_t bytes = gathered(columns, dtype);
  if (segments) bytes += gathered(1, DType::kI32);
  // The backward pass: the whole rows' key/value gradient (and its blocks), this slice's sum.
  bytes += gathered(columns, dtype);
  bytes += static_cast<size_t>(batch * slice * columns) * dtype_size(dtype);
  return bytes;
}

Status seq_attention_forward(Backend& be, comm::Communicator& group, Tensor out, Tensor lse,
                             Tensor q, Tensor kv, const AttentionSpec& spec) {
  SeqScratch scratch(be);
  AX_ASSIGN_OR_RETURN(Gathered g, gather(be, group, scratch, q, kv, spec));
  be.attention_forward(out, lse, q, g.kv, g.spec);
  be.synchronize();  // the scratch is freed on return
  return Status::Ok();
}

Status seq_attention_backward(Backend& be, comm::Communicator& group, Tensor dq, Tensor dkv,
                              Tensor dbias, Tensor dout, Tensor out, Tensor lse, Tensor q,
                              Tensor kv, const AttentionSpec& spec) {
  SeqScratch scratch(be);
  AX_ASSIGN_OR_RETURN(Gathered g, gather(be, group, scratch, q, kv, spec));
  const int S = group.size();
  const int64_t B = kv.dim(0), Tl = kv.dim(1), R = kv.dim(2);
  // The whole row's key/value gradient from this slice's queries, then its sum over the group's
  // queries, block by block to the ranks that hold the keys.
  AX_ASSIGN_OR_RETURN(Tensor dkv_rows, scratch.take(kv.dtype, {B, S * Tl, R}));
  be.attention_backward(dq, dkv_rows, dbias, dout, out, lse, q, g.kv, g.spec);
  Tensor blocks = dkv_rows;
  if (B > 1) {
    AX_ASSIGN_OR_RETURN(blocks, scratch.take(kv.dtype, {S * B, Tl, R}));
    rows_to_blocks(be, dkv_rows, blocks, S);
  }
  AX_ASSIGN_OR_RETURN(Tensor mine, scratch.take(kv.dtype, {B, Tl, R}));
  AX_RETURN_IF_ERROR(group.reduce_scatter(mine, blocks));
  group.join();
  // Into dkv (which may be dq: the query columns of `mine` are zero).
  be.add_forward(dkv, dkv, mine);
  be.synchronize();
  return Status::Ok();
}

}  // namespace ax::train
