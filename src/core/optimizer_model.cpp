#include "core/optimizer_model.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "memplan/bytes.hpp"
#include "memplan/text.hpp"

namespace memplan {

namespace {

std::vector<std::string> known_args(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kAdamWTorch:
    case OptimizerKind::kAdamWTorchFused: return {"amsgrad", "foreach", "fused", "betas", "eps", "weight_decay", "maximize"};
    case OptimizerKind::kSgd: return {"momentum", "dampening", "nesterov", "weight_decay", "foreach", "maximize"};
    case OptimizerKind::kAdagrad: return {"lr_decay", "weight_decay", "eps", "initial_accumulator_value", "foreach"};
    case OptimizerKind::kRmsprop: return {"alpha", "eps", "momentum", "centered", "weight_decay", "foreach"};
    case OptimizerKind::kAdafactor: return {"beta1", "eps", "clip_threshold", "decay_rate", "weight_decay", "scale_parameter", "relative_step", "warmup_init"};
    case OptimizerKind::kAdamWTorchao8bit:
    case OptimizerKind::kAdamWTorchao4bit: return {"betas", "eps", "weight_decay", "amsgrad", "block_size", "bf16_stochastic_round"};
    default: return {"betas", "eps", "weight_decay", "min_8bit_size", "percentile_clipping", "block_wise", "is_paged"};
  }
}

double num(const OptimizerConfig& o, const std::string& k, double dflt) {
  auto it = o.args.find(k);
  if (it == o.args.end()) return dflt;
  auto v = parse_double(it->second, k);
  if (v) return *v;
  auto b = parse_bool(it->second, k);
  return b ? (*b ? 1.0 : 0.0) : dflt;
}

bool flag(const OptimizerConfig& o, const std::string& k, bool dflt) {
  auto it = o.args.find(k);
  if (it == o.args.end()) return dflt;
  auto b = parse_bool(it->second, k);
  return b ? *b : dflt;
}

std::int64_t sum_bytes(const std::vector<OptParam>& ps, int elem_override = 0) {
  std::int64_t s = 0;
  for (const auto& p : ps) s = checked_add(s, checked_mul(checked_mul(p.numel, elem_override ? elem_override : p.elem_bytes), p.count));
  return s;
}

std::int64_t max_bytes(const std::vector<OptParam>& ps, int elem_override = 0) {
  std::int64_t m = 0;
  for (const auto& p : ps)
    m = std::max(m, checked_mul(checked_mul(p.numel, elem_override ? elem_override : p.elem_bytes), p.fused));
  return m;
}

// bitsandbytes Optimizer8bit: tensors under min_8bit_size (4096) keep fp32 state; larger ones
// keep one uint8 per value plus an fp32 absmax per 256-value block (block_wise=True).
std::int64_t bnb8_state(const OptParam& p, int states) {
  if (p.numel < 4096) return checked_mul(checked_mul(p.numel, 4LL * states), p.count);
  const std::int64_t blocks = (p.numel + 255) / 256;
  return checked_mul((p.numel + blocks * 4) * states, p.count);
}

// torchao _AdamBase._new_buffer (torchao/optim/adam.py, 0.8-0.13): a tensor with at least 4096
// values and a multiple of block_size gets a quantized state: codes (one byte per value at 8 bits,
// two values per byte at 4 bits), an fp32 scale per block and an fp32 code table (qmap: 256
// entries at 8 bits, 16 at 4 bits); any other tensor gets zeros_like(p) in the parameter's dtype.
std::int64_t torchao_state(const OptParam& p, int bits, std::int64_t block) {
  if (p.numel < 4096 || block <= 0 || p.numel % block != 0) return checked_mul(checked_mul(p.numel, p.elem_bytes), p.count);
  const std::int64_t codes = bits == 8 ? p.numel : p.numel / 2;
  const std::int64_t qmap = bits == 8 ? 256 * 4 : 16 * 4;
  return checked_mul(codes + (p.numel / block) * 4 + qmap, p.count);
}

// bitsandbytes Optimizer8bit.get_state_buffer (0.43-0.49): with is_paged, a state buffer of a
// tensor with at least 1e5 values is F.get_paged (cudaMallocManaged), otherwise zeros_like.
bool paged_buffer(const OptParam& p) { return p.numel >= 100000; }

}  // namespace

Status validate_optim_args(const OptimizerConfig& o) {
  const auto known = known_args(o.kind);
  for (const auto& [k, v] : o.args) {
    if (std::find(known.begin(), known.end(), k) == known.end())
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("--optim-args: '{}' is not an argument of {}", k, to_string(o.kind)),
                        did_you_mean(k, known));
  }
  if (o.kind == OptimizerKind::kAdamWTorchao8bit || o.kind == OptimizerKind::kAdamWTorchao4bit) {
    const double block = num(o, "block_size", 256);
    if (!(block >= 2 && block <= 1e9) || block != static_cast<double>(static_cast<std::int64_t>(block)))
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("--optim-args: block_size of {} must be an integer >= 2", to_string(o.kind)),
                        "torchao's defaults are 256 (8-bit) and 128 (4-bit)");
  }
  return Ok{};
}

OptimizerFootprint optimizer_footprint(const OptimizerConfig& o, Device device, const std::vector<OptParam>& ps) {
  OptimizerFootprint f;
  const bool cuda = device == Device::kCuda;
  // torch.optim's default implementation: foreach on CUDA (torch >= 2.0 when every parameter is
  // on CUDA), the single-tensor loop on the CPU (torch 1.13 defaults foreach to False).
  const bool foreach = flag(o, "foreach", cuda);
  // A 0-dim `step` tensor per parameter: on the parameter's device on the CPU; torch 2.x keeps it
  // on the CPU for CUDA parameters unless fused/capturable.
  std::int64_t step_tensors = 0;
  for (const auto& p : ps) step_tensors += 4LL * (p.count / std::max(p.fused, 1));
  const std::int64_t total = sum_bytes(ps), biggest = max_bytes(ps);
  switch (o.kind) {
    case OptimizerKind::kAdamWTorch:
    case OptimizerKind::kAdamWTorchFused: {
      const bool fused = o.kind == OptimizerKind::kAdamWTorchFused || flag(o, "fused", false);
      const int n = flag(o, "amsgrad", false) ? 3 : 2;
      f.state_bytes = checked_mul(total, n) + (cuda && !fused ? 0 : step_tensors);
      if (fused) {
        f.implementation = "fused";
      } else if (foreach) {
        // _multi_tensor_adamw: torch 2.x sqrt()s every exp_avg_sq into a new list (one
        // parameter-sized copy of everything); torch 1.13 also adds eps out of place (two).
        f.temp_bytes = checked_mul(total, cuda ? 1 : 2);
        f.implementation = "foreach";
      } else {
        // _single_tensor_adamw: denom = (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps) holds two
        // copies of the largest parameter at once.
        f.temp_bytes = checked_mul(biggest, 2);
        f.implementation = "single-tensor (foreach=False)";
      }
      break;
    }
    case OptimizerKind::kPagedAdamW32bit:
      // bitsandbytes 32-bit states are fp32 whatever the param dtype; large ones are paged.
      for (const auto& p : ps) {
        const std::int64_t b = checked_mul(checked_mul(p.numel, 8), p.count);
        if (paged_buffer(p)) f.paged_bytes = checked_add(f.paged_bytes, b);
        else f.state_bytes = checked_add(f.state_bytes, b);
      }
      f.paged = true;
      f.implementation = "bitsandbytes paged 32-bit";
      break;
    case OptimizerKind::kAdamW8bit:
    case OptimizerKind::kPagedAdamW8bit:
      f.paged = o.kind == OptimizerKind::kPagedAdamW8bit;
      for (const auto& p : ps) {
        if (f.paged && p.numel >= 4096 && paged_buffer(p)) {
          // the two uint8 buffers are paged; the fp32 absmax per block stays in the allocator
          const std::int64_t q = checked_mul(checked_mul(p.numel, 2), p.count);
          f.paged_bytes = checked_add(f.paged_bytes, q);
          f.state_bytes = checked_add(f.state_bytes, bnb8_state(p, 2) - q);
        } else {
          f.state_bytes = checked_add(f.state_bytes, bnb8_state(p, 2));
        }
      }
      f.implementation = f.paged ? "bitsandbytes paged 8-bit blockwise" : "bitsandbytes 8-bit blockwise";
      break;
    case OptimizerKind::kLion8bit:
      for (const auto& p : ps) f.state_bytes = checked_add(f.state_bytes, bnb8_state(p, 1));
      f.implementation = "bitsandbytes 8-bit blockwise";
      break;
    case OptimizerKind::kLion32bit:
      f.state_bytes = sum_bytes(ps, 4);
      f.implementation = "bitsandbytes 32-bit";
      break;
    case OptimizerKind::kAdamWTorchao8bit:
    case OptimizerKind::kAdamWTorchao4bit: {
      // docs/formulas.md (torchao low-bit AdamW): exp_avg, exp_avg_sq (+ max_exp_avg_sq with
      // amsgrad) per parameter; `step` and `lr` are CPU tensors. single_param_adam runs under
      // torch.compile one parameter at a time: Inductor fuses the fp32 arithmetic into its
      // kernels, and the in-place copy_s into the states and the parameter become new buffers
      // copied back (functionalization): for the parameter being updated, a new state of each
      // kind (codes and scales) and a new parameter in its dtype.
      const int bits = o.kind == OptimizerKind::kAdamWTorchao8bit ? 8 : 4;
      const auto block = static_cast<std::int64_t>(num(o, "block_size", bits == 8 ? 256 : 128));
      const int n = flag(o, "amsgrad", false) ? 3 : 2;
      for (const auto& p : ps) {
        const std::int64_t one = torchao_state(p, bits, block);
        f.state_bytes = checked_add(f.state_bytes, checked_mul(one, n));
        const std::int64_t per_copy = p.count > 0 ? one / p.count : one;
        f.temp_bytes = std::max(f.temp_bytes, checked_add(checked_mul(per_copy, n), checked_mul(p.numel, p.elem_bytes)));
      }
      f.implementation = fmt::format("torchao {}-bit block-wise (blocks of {})", bits, block);
      break;
    }
    case OptimizerKind::kSgd: {
      const bool momentum = num(o, "momentum", 0.0) != 0.0;
      f.state_bytes = momentum ? total : 0;
      const bool wd = num(o, "weight_decay", 0.0) != 0.0;
      const bool nesterov = flag(o, "nesterov", false);
      // d_p = d_p.add(param, alpha=wd) and nesterov's d_p.add(buf) allocate a new gradient.
      if (wd || nesterov) f.temp_bytes = foreach ? total : biggest;
      f.implementation = foreach ? "foreach" : "single-tensor (foreach=False)";
      break;
    }
    case OptimizerKind::kAdagrad:
      f.state_bytes = total + step_tensors;
      f.temp_bytes = foreach ? total : biggest;  // std = state_sum.sqrt().add_(eps)
      f.implementation = foreach ? "foreach" : "single-tensor (foreach=False)";
      break;
    case OptimizerKind::kRmsprop: {
      int n = 1;
      if (num(o, "momentum", 0.0) != 0.0) ++n;
      if (flag(o, "centered", false)) ++n;
      f.state_bytes = checked_mul(total, n) + step_tensors;
      f.temp_bytes = foreach ? total : biggest;  // avg = square_avg.sqrt().add_(eps)
      f.implementation = foreach ? "foreach" : "single-tensor (foreach=False)";
      break;
    }
    case OptimizerKind::kAdafactor: {
      // transformers.optimization.Adafactor (HF Trainer: scale_parameter=False,
      // relative_step=False, beta1=None): factored row/column second moments for matrices, a
      // full one for vectors, in fp32 when gradients are half precision; a 0-dim RMS per param.
      const bool beta1 = o.args.count("beta1") > 0;
      std::int64_t temps = 0;
      for (const auto& p : ps) {
        const std::int64_t st_elem = 4;  // grad.float() for bf16/fp16, else fp32 already
        const std::int64_t n = p.numel;
        std::int64_t s = p.rows > 0 ? (p.rows + p.cols) * st_elem : n * st_elem;
        if (beta1) s += n * st_elem;
        s += 4;  // state["RMS"]
        f.state_bytes = checked_add(f.state_bytes, checked_mul(s, p.count));
        // update = grad**2 + eps (two copies at once), later the approximation and -update.
        std::int64_t t = 2 * n * 4;
        if (p.elem_bytes < 4) t += 2 * n * 4;  // grad.float() and p.float() copies
        temps = std::max(temps, t);
      }
      f.temp_bytes = temps;
      f.implementation = "transformers Adafactor";
      break;
    }
  }
  if (!cuda) {  // no unified memory without CUDA: the buffers are ordinary tensors
    f.state_bytes = checked_add(f.state_bytes, f.paged_bytes);
    f.paged_bytes = 0;
  }
  return f;
}

}  // namespace memplan
