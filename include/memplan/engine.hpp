// The formula engine: a pure function from (model, training config) to an Estimate.
// No I/O, no globals. Every term is derived in docs/formulas.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "memplan/estimate.hpp"
#include "memplan/model.hpp"
#include "memplan/result.hpp"
#include "memplan/training.hpp"

namespace memplan {

// One configuration's full breakdown.
Result<Estimate> estimate(const ModelSpec& model, const TrainingConfig& config);

// Image tokens each sequence carries for a vision-language model (images x tokens per image at
// the configured resolution; docs/formulas.md#image-tokens); 0 for text-only models and batches.
std::int64_t image_tokens_per_sequence(const ModelSpec& model, const TrainingConfig& config);

// A prepared estimator for fast repeated queries over micro-batch and sequence length
// (plan, sweep). Construction validates and precomputes everything that does not depend on
// (batch, seq_len); peak_bytes() is then allocation-free.
class Estimator {
 public:
  static Result<Estimator> create(const ModelSpec& model, const TrainingConfig& config);
  // An estimator for another config of the same model. The step programs the two have in
  // common (a config that changes only what is applied after the simulation: GPU count,
  // sharding, optimizer, accumulation) are simulated once and shared by every estimator derived
  // from the same one (docs/plan.md#speed). Safe to call from several threads at once.
  Result<Estimator> derive(const TrainingConfig& config) const;
  ~Estimator();
  Estimator(Estimator&&) noexcept;
  Estimator& operator=(Estimator&&) noexcept;

  // Peak live tensor bytes (Estimate::peak) at the given micro-batch and sequence length.
  Result<Bytes> peak_bytes(std::int64_t micro_batch, std::int64_t seq_len) const;
  // The same with `grad_accum` micro-batches per step instead of the config's: later
  // micro-batches hold the earlier ones' gradients, and a pipeline schedule holds up to that
  // many micro-batches' activations (docs/formulas.md#gradient-accumulation).
  Result<Bytes> peak_bytes(std::int64_t micro_batch, std::int64_t seq_len, std::int64_t grad_accum) const;
  // The full Estimate at that point (same numbers as estimate()).
  Result<Estimate> at(std::int64_t micro_batch, std::int64_t seq_len) const;
  // The breakdown at the peak of one phase (peak = that phase's peak); an error if the phase
  // does not run for this configuration.
  Result<Estimate> at_phase(std::int64_t micro_batch, std::int64_t seq_len, Phase phase) const;

  // The caching allocator replayed over the step at (micro_batch, seq_len) and the config's
  // lengths (docs/formulas.md#the-caching-allocator), with cudaMalloc limited to `capacity` bytes
  // (nullopt: unlimited): whether the allocator runs out of memory after releasing its cache.
  // nullopt on the CPU and where no allocation trace exists (encoders).
  struct AllocatorReplay {
    Bytes peak_allocated;  // the replay's own (the unsharded step of the worst pipeline stage)
    Bytes peak_reserved;
    bool out_of_memory = false;
  };
  std::optional<AllocatorReplay> replay_allocator(std::int64_t micro_batch, std::int64_t seq_len,
                                                  std::optional<Bytes> capacity = std::nullopt) const;

  const ModelSpec& model() const;
  const TrainingConfig& config() const;

 private:
  struct Impl;
  struct Programs;  // the simulated programs an estimator and those derived from it share
  explicit Estimator(std::unique_ptr<Impl> impl);
  static Result<Estimator> build(const ModelSpec& model, const TrainingConfig& config,
                                 std::shared_ptr<Programs> programs);
  Result<Estimate> at_impl(std::int64_t micro_batch, std::int64_t seq_len, std::optional<Phase> only) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memplan
