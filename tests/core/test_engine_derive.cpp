// Estimator::derive: an estimator for another config of the same model, sharing the simulated
// programs the two have in common (docs/plan.md#speed). Whatever it shares, it must answer
// exactly as an estimator created from scratch for that config.
#include <catch2/catch.hpp>

#include <string>
#include <thread>
#include <vector>

#include "memplan/engine.hpp"
#include "support/invariants.hpp"
#include "support/models.hpp"

using namespace memplan;
using memplan::testing::require_consistent;
using memplan::testing::toy_llama;

namespace {

TrainingConfig base_config() {
  TrainingConfig c;
  c.micro_batch = 2;
  c.seq_len = 512;
  c.torch_dtype = DType::kBFloat16;
  c.device = Device::kCuda;
  return c;
}

// The configs a plan's suggestions derive: some change only what is applied after the
// simulation (GPUs, sharding, optimizer, accumulation), the others the program itself.
std::vector<TrainingConfig> changed_configs() {
  std::vector<TrainingConfig> out;
  const TrainingConfig base = base_config();
  TrainingConfig c = base;
  c.parallel.num_gpus = 4;
  c.parallel.sharding = ShardingStrategy::kZero3;
  out.push_back(c);
  c.parallel.num_gpus = 8;  // the same program as the one before, another GPU count
  out.push_back(c);
  c = base;
  c.optim.kind = OptimizerKind::kAdamW8bit;
  out.push_back(c);
  c = base;
  c.grad_accum = 4;
  out.push_back(c);
  c = base;
  c.zero_grad_keeps_grads = true;  // torch < 2.0's zero_grad: every .grad kept into the next step
  out.push_back(c);
  c = base;
  c.gradient_checkpointing = true;
  out.push_back(c);
  c = base;
  c.lora.enabled = true;
  c.lora.all_linear = true;
  out.push_back(c);
  c.quant.load_in_4bit = true;
  out.push_back(c);
  c = base;
  c.attn = AttnImpl::kEager;  // b = 1 gets a program of its own under eager attention
  out.push_back(c);
  return out;
}

void require_same(const Estimate& a, const Estimate& b) {
  require_consistent(a);
  CHECK(a.peak == b.peak);
  CHECK(a.peak_phase == b.peak_phase);
  CHECK(a.reserved == b.reserved);
  CHECK(a.total == b.total);
  CHECK(a.params.total == b.params.total);
  CHECK(a.params.trainable == b.params.trainable);
  CHECK(a.assumptions == b.assumptions);
  CHECK(a.warnings == b.warnings);
  REQUIRE(a.components.size() == b.components.size());
  for (std::size_t i = 0; i < a.components.size(); ++i) {
    CHECK(a.components[i].name == b.components[i].name);
    CHECK(a.components[i].bytes == b.components[i].bytes);
  }
  REQUIRE(a.phases.size() == b.phases.size());
  for (std::size_t i = 0; i < a.phases.size(); ++i) CHECK(a.phases[i].peak == b.phases[i].peak);
}

void require_same_everywhere(const Estimator& derived, const Estimator& created) {
  for (std::int64_t b : {1, 2, 5})
    for (std::int64_t s : {1, 64, 777}) {
      auto x = derived.at(b, s);
      auto y = created.at(b, s);
      REQUIRE(x.has_value());
      REQUIRE(y.has_value());
      require_same(*x, *y);
      CHECK(*derived.peak_bytes(b, s, 3) == *created.peak_bytes(b, s, 3));
    }
}

}  // namespace

TEST_CASE("a derived estimator answers exactly as one created for its config") {
  const ModelSpec m = toy_llama(6);
  auto seed = Estimator::create(m, base_config());
  REQUIRE(seed.has_value());
  for (const TrainingConfig& c : changed_configs()) {
    auto derived = seed->derive(c);
    auto created = Estimator::create(m, c);
    REQUIRE(derived.has_value());
    REQUIRE(created.has_value());
    CHECK(derived->config() == c);
    CHECK(derived->model().name == m.name);
    require_same_everywhere(*derived, *created);
  }
}

TEST_CASE("derived estimators share programs with each other, not only with the seed") {
  // A derives B (new program), B derives C (A's program again), C derives D (B's program
  // again): every one still answers as if created on its own.
  const ModelSpec m = toy_llama(5);
  TrainingConfig a = base_config();
  TrainingConfig b = a;
  b.gradient_checkpointing = true;
  TrainingConfig c = a;
  c.parallel.num_gpus = 2;
  c.parallel.sharding = ShardingStrategy::kFsdpFullShard;
  TrainingConfig d = b;
  d.optim.kind = OptimizerKind::kAdafactor;
  auto ea = Estimator::create(m, a);
  REQUIRE(ea.has_value());
  auto eb = ea->derive(b);
  REQUIRE(eb.has_value());
  auto ec = eb->derive(c);
  REQUIRE(ec.has_value());
  auto ed = ec->derive(d);
  REQUIRE(ed.has_value());
  for (const auto& [derived, config] :
       std::vector<std::pair<const Estimator*, TrainingConfig>>{{&*eb, b}, {&*ec, c}, {&*ed, d}}) {
    auto created = Estimator::create(m, config);
    REQUIRE(created.has_value());
    require_same_everywhere(*derived, *created);
  }
}

TEST_CASE("estimators derived from one seed on several threads at once answer as created ones") {
  const ModelSpec m = toy_llama(6);
  auto seed = Estimator::create(m, base_config());
  REQUIRE(seed.has_value());
  const std::vector<TrainingConfig> configs = changed_configs();
  // Each config twice: two threads may simulate one program at the same time.
  std::vector<std::optional<Result<Estimator>>> derived(2 * configs.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < derived.size(); ++i)
    threads.emplace_back([&, i] { derived[i] = seed->derive(configs[i % configs.size()]); });
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < derived.size(); ++i) {
    REQUIRE(derived[i]->has_value());
    auto created = Estimator::create(m, configs[i % configs.size()]);
    REQUIRE(created.has_value());
    require_same_everywhere(**derived[i], *created);
  }
}

TEST_CASE("derive() rejects what create() rejects, with the same error") {
  const ModelSpec m = toy_llama(4);
  auto seed = Estimator::create(m, base_config());
  REQUIRE(seed.has_value());
  TrainingConfig bad = base_config();
  bad.lora.enabled = true;
  bad.lora.target_modules = {"not_a_module"};
  auto derived = seed->derive(bad);
  auto created = Estimator::create(m, bad);
  REQUIRE_FALSE(derived.has_value());
  REQUIRE_FALSE(created.has_value());
  CHECK(derived.error().code == created.error().code);
  CHECK(derived.error().message == created.error().message);
  CHECK(derived.error().message.find("not_a_module") != std::string::npos);
  // The seed is unaffected and still derives.
  auto ok = seed->derive(base_config());
  CHECK(ok.has_value());
}
