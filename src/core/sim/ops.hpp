// Tensor ops with PyTorch's memory behaviour, on a sim::Graph. Each function mirrors one ATen op:
// the outputs it allocates (dtype by type promotion and autocast rules), the tensors its autograd
// node saves (only those needed for inputs that require grad), and what its derivative allocates
// (docs/formulas.md#op-rules). Outputs are returned with one reference owned by the caller, who
// drops it when the Python variable would die.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <vector>

#include "core/sim/graph.hpp"

namespace memplan::sim {

struct OpsBehaviour {
  // torch 1.13 on the CPU (the measured configuration) vs torch 2.x on CUDA.
  bool cuda = false;
  // aten::slice on a full-range slice allocates a zero-filled gradient in backward (1.13);
  // newer PyTorch returns the tensor itself for trivial slices.
  bool trivial_slices_are_ops = true;
  // torch 1.13's MeanBackward1 keeps its input (for its size); torch 2.x keeps only sizes.
  bool mean_saves_input = true;
  // CPU: TensorIterator promotes a binary op's input of another dtype through a temporary copy in
  // the common dtype (promote_inputs_to_common_dtype), alive while the op runs; CUDA kernels cast
  // as they load. Set from the device (Ops::mul/add, and MulBackward's products).
  bool promote_by_copy = false;
  // torch >= 2.0's InputBuffer adds a second gradient in place when it holds the last reference.
  bool inplace_accumulation = false;
  bool operator==(const OpsBehaviour&) const = default;
};

class Ops {
 public:
  Ops(Graph& g, OpsBehaviour b) : g_(g), b_(b) {}
  Graph& graph() { return g_; }
  const OpsBehaviour& behaviour() const { return b_; }

  Cat cat = Cat::kActivations;  // category for forward outputs created from now on

  // ---- torchtitan's per-op selective checkpointing policy (docs/formulas.md#per-op-selective-checkpointing)
  // Inside a checkpointed layer's forward (kCaching) the outputs of the policy's ops go into the
  // region's storage (Graph::sac_store); in its recomputation (kCached) those ops take them back
  // (Graph::sac_take) instead of allocating. The policy: every aten.mm whose 1-based count within
  // the call is odd (a Linear without bias is one mm; with a bias it is addmm, not counted), and
  // the fused attention kernel's output and logsumexp when `attention` is set (CUDA's flash and
  // memory-efficient SDPA kernels are on the list; the CPU's kernel is not).
  enum class SacMode { kOff, kCaching, kCached };
  struct Sac {
    SacMode mode = SacMode::kOff;
    int mm_count = 0;
    bool attention = false;
  };
  Sac sac;

  // ---- autocast (torch.autocast): lower-precision ops cast their floating inputs; casts of
  // fp32 leaves that require grad are cached until the autocast context exits.
  void enter_autocast(DT dt);
  void exit_autocast();
  std::optional<DT> autocast() const { return autocast_; }
  // Bytes of the cached casts (one per trainable fp32 weight per autocast region): what a
  // second forward in the same region does not allocate again.
  Poly cached_cast_bytes() const;

  // ---- casts and views
  int to(int x, DT dt);                        // Tensor.to(dtype): the same tensor if already dt
  int view(int x);                             // view/reshape of a contiguous tensor
  int transpose_view(int x);                   // a permuted view: its gradient needs a contiguous copy
  int slice(int x, Poly numel, bool trivial);  // x[..., a:b]; trivial = the full range
  int clone(int x);                            // .contiguous() of a non-contiguous tensor, reshape copies
  int pad(int x, Poly numel);                  // F.pad to numel: a copy even with zero padding

  // ---- elementwise
  int mul(int a, int b, Poly out_numel);       // broadcasting a * b
  int add(int a, int b, Poly out_numel);       // broadcasting a + b (no tensors saved)
  int scalar_op(int x);                        // x * c, x + c: allocates, saves nothing
  int pow2(int x);                             // x.pow(2): saves x
  int rsqrt(int x);                            // saves its result
  int mean_last(int x, Poly out_numel);        // x.mean(-1, keepdim=True)
  // x.sum(dims) (also cumsum): saves nothing; SumBackward's grad.expand is a view of the
  // incoming gradient, so nothing is allocated for x's gradient.
  int sum(int x, Poly out_numel);
  int neg(int x);
  int silu(int x);                             // saves x
  int gelu(int x);                             // saves x
  int tanh(int x);                             // saves its result
  int concat(const std::vector<int>& parts);   // torch.cat
  // Fused 3-D expert Parameters read one expert at a time (param[expert_idx], a select view):
  // one view per Parameter, standing for every expert's slice. Its backward replays what
  // SelectBackward and the Parameter's input buffer do for `experts` experts: a zero tensor of
  // the whole Parameter per expert, summed out of place (three whole-Parameter tensors at once;
  // two with in-place accumulation). Several params are one Parameter split in two (gate and up
  // of one gate_up_proj): their zero tensors are one tensor of both sizes.
  Ids expert_parameter_views(const Ids& params, std::int64_t experts);
  // apply_rotary_pos_emb on one of q / k: x * cos + rotate_half(x) * sin, rotate_half(x) =
  // cat(-x2, x1) of x's two halves (slices); the products keep cos and sin for backward.
  int rotary(int x, int cos, int sin, Poly numel);
  int dropout(int x, double p);                // p == 0: identity (returns x)

  // ---- matrix products (lower-precision ops under autocast)
  int linear(int x, int w, int bias, Poly out_numel);
  // A convolution whose stride is its kernel (a ViT's patch embedding), computed as that GEMM;
  // ConvolutionBackward saves its input and its weight whichever needs a gradient (under
  // autocast: the weight's bf16 copy, kept until the tower's backward ends).
  int patch_conv(int x, int w, int bias, Poly out_numel);
  // torch.matmul of 4-D tensors: autocast casts first (keeping layouts), then folding the batch
  // dimensions into bmm copies an operand that cannot be viewed that way (copy_a / copy_b).
  int matmul(int a, int b, Poly out_numel, bool copy_a = false, bool copy_b = false);
  // Eager attention, transformers' eager_attention_forward: scores = matmul(q, kT) (kT is taken;
  // copy_q / copy_k: the bmm folds that copy), * scaling, Gemma 2's tanh soft-capping (softcap:
  // / cap, tanh, * cap), + mask (-1: none), softmax in fp32, .to(q's dtype): the probabilities,
  // recorded as attention scores.
  int eager_probs(int q, int kT, int mask, const Poly& scores, bool copy_q, bool copy_k, bool softcap = false);
  // matmul(probs, v).transpose(1, 2).contiguous() (probs is taken; copy_v: the bmm fold copies
  // v): the output, recorded as activations.
  int attention_output(int probs, int v, const Poly& out_numel, bool copy_v);
  // SDPA's flash / memory-efficient / cuDNN kernels and flash_attention_2, on q, k, v already cast
  // for autocast: the output (out_numel, q's dtype); the kernel saves q, k, v, the output and an
  // fp32 logsumexp per row and head (`rows`); backward allocates dq, dk, dv, an fp32 dq
  // accumulator and per-row softmax sums (measured on an H100: tests/data/measurements/cuda_h100.json).
  // bias >= 0: an additive mask the memory-efficient kernel saves for backward.
  int fused_attention(int q, int k, int v, Poly out_numel, Poly rows, int bias = -1);
  // expand + reshape: a copy when n_rep > 1, unless there is one KV head (then a stride-0 view).
  int repeat_kv(int x, int n_rep, bool single_kv_head);

  // ---- reductions, softmax, loss
  int softmax_f32(int x);                      // softmax(x, dtype=float32)
  // softmax(x) without a dtype: under autocast on CUDA it is on the fp32 list (softmax_f32); the
  // CPU's autocast (torch 1.13) leaves it in the input's dtype (checked: bf16 in, bf16 out).
  int softmax(int x);
  int log_softmax(int x);
  int nll_loss(int logp, int target);          // scalar output
  int embedding(int ids, int w, Poly out_numel);

 // Autocast's cast of an input to an op on the lower-precision list (a held copy, or x itself).
  int cast_for_autocast(int x);

 private:
  int gemm(int x, int w, int bias, Poly out_numel, bool conv);
  DT promote(int a, int b) const;
  // The temporary copies promote_by_copy makes of `inputs` whose dtype is not `common`.
  InlineVec<int, 2> promoted_copies(std::initializer_list<int> inputs, DT common);
  // Delivers gradient `full` (shaped like the op output) to `input`, reducing/casting like
  // autograd's validate_outputs when the input is smaller or of another dtype.
  void give_reduced(Bwd& ctx, int input, int full, const Poly& out_numel, DT out_dt);

  Graph& g_;
  OpsBehaviour b_;
  std::optional<DT> autocast_;
  // fp32 leaf -> its cached low-precision copy, sorted by leaf (a flat map: tens of entries).
  std::vector<std::pair<int, int>> cast_cache_;
};

}  // namespace memplan::sim
