// io::check_inputs: one range check for every numeric input, whatever its origin (issue 11
// items 12 and 13): the same ranges and message for a flag, a file value (with its file:line)
// and a default or derived value; NaN and infinities never pass.
#include <cmath>
#include <string>

#include <catch2/catch.hpp>

#include "io/config/config_loader.hpp"
#include "io/inputs.hpp"

using namespace memplan;
using namespace memplan::io;

namespace {

ResolvedInputs from_flag(const char* input, const char* flag) {
  ResolvedInputs in;
  in.set_origin(input, Origin{OriginKind::kFlag, {}, flag});
  return in;
}

}  // namespace

TEST_CASE("check_inputs: boundary values of each range") {
  ResolvedInputs in;
  CHECK(check_inputs(in).has_value());  // the defaults pass
  struct Case {
    const char* input;
    double value;
    bool ok;
  };
  auto set = [](TrainingConfig& c, const std::string& input, double v) {
    if (input == "lora_dropout") c.lora.dropout = v;
    if (input == "lora_alpha") c.lora.alpha = v;
    if (input == "beta") c.grpo.beta = v;
    if (input == "temperature") c.grpo.temperature = v;
    if (input == "vllm_gpu_memory_utilization") c.grpo.vllm_gpu_memory_utilization = v;
    if (input == "batch") c.micro_batch = static_cast<std::int64_t>(v);
    if (input == "num_gpus") c.parallel.num_gpus = static_cast<int>(v);
  };
  const Case cases[] = {
      {"lora_dropout", 0, true},           {"lora_dropout", 0.999, true},  {"lora_dropout", 1, false},
      {"lora_dropout", -1e-9, false},      {"lora_dropout", NAN, false},   {"lora_alpha", 1e-9, true},
      {"lora_alpha", 0, false},            {"lora_alpha", -1, false},      {"lora_alpha", HUGE_VAL, false},
      {"beta", 0, true},                   {"beta", -0.1, false},          {"beta", NAN, false},
      {"temperature", 1e-6, true},         {"temperature", 0, false},      {"temperature", -1, false},
      {"vllm_gpu_memory_utilization", 0.99, true}, {"vllm_gpu_memory_utilization", 1, false},
      {"vllm_gpu_memory_utilization", NAN, false}, {"batch", 1, true},     {"batch", 1 << 20, true},
      {"batch", (1 << 20) + 1, false},     {"batch", 0, false},            {"num_gpus", 1024, true},
      {"num_gpus", 1025, false},
  };
  for (const auto& k : cases) {
    INFO(k.input << " = " << k.value);
    ResolvedInputs r;
    set(r.config, k.input, k.value);
    CHECK(check_inputs(r).has_value() == k.ok);
  }
}

TEST_CASE("check_inputs (issue 11 item 12): a flag and a file value get the same message, each with its origin") {
  ResolvedInputs flag = from_flag("lora_dropout", "--lora-dropout");
  flag.config.lora.dropout = NAN;
  CHECK(check_inputs(flag).error().to_string() == "--lora-dropout = nan is not a finite number (0 <= p < 1)");

  MemoryFileSystem fs;
  fs.files["train.yaml"] = "model_name_or_path: m\nuse_peft: true\nlora_dropout: .nan\n";
  ConfigRequest req;
  req.files = {"train.yaml"};
  auto c = load_config(req, fs);
  REQUIRE(c.has_value());
  CHECK(check_inputs(c->inputs).error().to_string() ==
        "train.yaml:3: lora_dropout = nan is not a finite number (0 <= p < 1)");

  ResolvedInputs alpha = from_flag("lora_alpha", "--lora-alpha");
  alpha.config.lora.alpha = -1;
  CHECK(check_inputs(alpha).error().to_string() == "--lora-alpha = -1 is out of range (> 0)");
  fs.files["train.yaml"] = "model_name_or_path: m\nuse_peft: true\nlora_alpha: -1\n";
  CHECK(check_inputs(load_config(req, fs)->inputs).error().to_string() ==
        "train.yaml:3: lora_alpha = -1 is out of range (> 0)");

  ResolvedInputs temp = from_flag("temperature", "--temperature");
  temp.config.grpo.temperature = -1;
  CHECK(check_inputs(temp).error().to_string() == "--temperature = -1 is out of range (> 0)");
  ResolvedInputs beta = from_flag("beta", "--beta");
  beta.config.grpo.beta = NAN;
  CHECK(check_inputs(beta).error().to_string() == "--beta = nan is not a finite number (>= 0)");
  ResolvedInputs vllm = from_flag("vllm_gpu_memory_utilization", "--vllm-gpu-memory-utilization");
  vllm.config.grpo.vllm_gpu_memory_utilization = NAN;
  CHECK(check_inputs(vllm).error().to_string() ==
        "--vllm-gpu-memory-utilization = nan is not a finite number (0 < x < 1)");
}

TEST_CASE("check_inputs (issue 11 item 13): out-of-range file values keep their file:line; derived ones say so") {
  MemoryFileSystem fs;
  fs.files["train.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: 2000000\n";
  ConfigRequest req;
  req.files = {"train.yaml"};
  CHECK(check_inputs(load_config(req, fs)->inputs).error().to_string() ==
        "train.yaml:2: per_device_train_batch_size = 2000000 is out of range (1 to 1048576)");
  ResolvedInputs derived;
  derived.config.parallel.num_gpus = 5000;
  derived.set_origin("num_gpus", Origin{OriginKind::kDerived, {}, "train_batch_size 5000 / (1 x 1)"});
  CHECK(check_inputs(derived).error().to_string() ==
        "num_gpus = 5000 is out of range (1 to 1024) (derived (train_batch_size 5000 / (1 x 1)))");
}

TEST_CASE("check_inputs: an int64 near 2^63 is quoted exactly (found by fuzz_config_loader)") {
  MemoryFileSystem fs;
  fs.files["train.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: 2\n"
                           "gradient_accumulation_steps: 9223372036854775807\n";
  ConfigRequest req;
  req.files = {"train.yaml"};
  CHECK(check_inputs(load_config(req, fs)->inputs).error().to_string() ==
        "train.yaml:3: gradient_accumulation_steps = 9223372036854775807 is out of range (1 to 16777216)");
}
