// PLACEHOLDER ENGINE (scaffolding): a rough closed form so the CLI and planners can be built
// against the final API. Replaced by the op-level step simulator (docs/formulas.md).
#include "memplan/engine.hpp"

namespace memplan {

struct Estimator::Impl {
  ModelSpec model;
  TrainingConfig config;
};

Estimator::Estimator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Estimator::~Estimator() = default;
Estimator::Estimator(Estimator&&) noexcept = default;
Estimator& Estimator::operator=(Estimator&&) noexcept = default;

Result<Estimator> Estimator::create(const ModelSpec& model, const TrainingConfig& config) {
  if (auto s = validate(model); !s) return s.error();
  if (auto s = validate(config); !s) return s.error();
  auto impl = std::make_unique<Impl>();
  impl->model = model;
  impl->config = config;
  return Estimator(std::move(impl));
}

const ModelSpec& Estimator::model() const { return impl_->model; }
const TrainingConfig& Estimator::config() const { return impl_->config; }

Result<Estimate> Estimator::at(std::int64_t micro_batch, std::int64_t seq_len) const {
  TrainingConfig c = impl_->config;
  c.micro_batch = micro_batch;
  c.seq_len = seq_len;
  if (auto s = validate(c); !s) return s.error();
  const ModelSpec& m = impl_->model;
  try {
    const auto counts = count_parameters(m);
    const std::int64_t wbytes = dtype_size(c.torch_dtype);
    Estimate e;
    e.params.total = counts.total;
    e.params.trainable = counts.total;
    e.params.counts = counts;
    const Bytes weights = Bytes::of(counts.total) * wbytes;
    const Bytes grads = weights;
    const Bytes states = Bytes::of(counts.total) * (2 * wbytes);
    const std::int64_t tokens = checked_mul(micro_batch, seq_len);
    const Bytes acts = Bytes::of(tokens) * checked_mul(m.hidden_size, 34LL * m.num_layers);
    const Bytes logits = Bytes::of(tokens) * checked_mul(m.vocab_size, 12);
    e.components = {{"weights", weights, Placement::kPerDevice, ""},
                    {"gradients", grads, Placement::kPerDevice, ""},
                    {"optimizer_states", states, Placement::kPerDevice, ""},
                    {"activations", acts, Placement::kPerDevice, ""},
                    {"logits_and_loss", logits, Placement::kPerDevice, ""}};
    for (const auto& comp : e.components) e.peak += comp.bytes;
    e.peak_phase = Phase::kBackward;
    e.phases = {{Phase::kBackward, e.peak}};
    e.reserved = e.peak;
    e.total = e.reserved;
    return e;
  } catch (const SizeOverflow& ex) {
    return make_error(ErrorCode::kOverflow, ex.what(), "the batch or sequence length is far too large");
  }
}

Result<Bytes> Estimator::peak_bytes(std::int64_t micro_batch, std::int64_t seq_len) const {
  auto e = at(micro_batch, seq_len);
  if (!e) return e.error();
  return e->peak;
}

Result<Estimate> estimate(const ModelSpec& model, const TrainingConfig& config) {
  auto est = Estimator::create(model, config);
  if (!est) return est.error();
  return est->at(config.micro_batch, config.seq_len);
}

}  // namespace memplan
