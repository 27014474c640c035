// Attention over the `seq` mesh axis (context parallelism, docs/sharding.md "Sequence parallelism
// (context parallel)"): each of the S ranks of a seq group holds a contiguous slice of T/S
// positions of every row, rank r the positions [r·T/S, (r+1)·T/S). Its queries attend to the keys
// and values of the whole row: all-gather of the key/value rows over the group (Llama 3's way:
// exact, one collective), then Backend::attention_forward of the slice's queries against the
// gathered row with the slice's first position (AttentionSpec::q_first_position), so causal masks
// are those of the whole row. The backward pass gathers again (the gathered rows are not kept
// between the passes), runs Backend::attention_backward and reduce-scatters the gradient of the
// whole row's keys and values back to the ranks that hold them.
#pragma once

#include <cstdint>

#include "ax/common/status.h"
#include "ax/trainer/backend/backend.h"
#include "ax/trainer/comm/communicator.h"

namespace ax::train {

// Positions [first, first + length) of a row of `row_length` that rank `rank` of a seq group of
// `size` holds. InvalidArgument when the row does not split evenly (one line saying so).
struct SeqSlice {
  int64_t first = 0, length = 0;
};
StatusOr<SeqSlice> seq_slice(int64_t row_length, int rank, int size);

// This rank's slice of the attention of whole rows. q (B, Tl, Rq) holds the slice's queries, kv
// (B, Tl, Rkv) the slice's rows of keys and values (q itself for packed self-attention: then the
// query columns travel with them); out (B, Tl, NH·HD), lse (B, NH, Tl) as attention_forward's.
// `spec` is the whole row's (first positions 0); its segment ids are the slice's, (B, Tl) each
// (k_segments are gathered like the keys); a bias holds the slice's rows against every key,
// (Bb, NH, Tl, Tl·S) (T5: the buckets of the slice's positions). The group's collectives must be
// issued in the same order on every rank of it; errors are the communicator's.
Status seq_attention_forward(Backend& be, comm::Communicator& group, Tensor out, Tensor lse,
                             Tensor q, Tensor kv, const AttentionSpec& spec);
// dq (like q) += the slice's query gradient; dkv (like kv, may be dq) += the gradient of the
// slice's keys and values from the queries of every rank of the group; dbias (like spec.bias,
// f32) += the gradient of the slice's bias rows, or empty. dout, out, lse: the slice's.
Status seq_attention_backward(Backend& be, comm::Communicator& group, Tensor dq, Tensor dkv,
                              Tensor dbias, Tensor dout, Tensor out, Tensor lse, Tensor q,
                              Tensor kv, const AttentionSpec& spec);

// The most bytes the backend holds at once for one call of seq_attention_backward (which holds
// more than the forward pass) beside the model's own buffers: a slice of `batch` rows of `slice`
// positions and `columns` key/value columns in `dtype` over a group of `size`, with the segment
// ids gathered too when `segments`. `ax-train plan` adds it to a seq rank's memory.
size_t seq_attention_scratch_bytes(int64_t batch, int64_t slice, int64_t columns, int size,
                                   DType dtype, bool segments);

}  // namespace ax::train
