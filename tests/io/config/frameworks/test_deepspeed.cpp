// DeepSpeed values whose products overflow (issue 11 items 5 and 13): 2^32 x 2^32 wrapped to 0
// and then `% 0` (SIGFPE); 2^63-1 overflowed signed arithmetic; a train_batch_size of 4.6e18
// became 1024 GPUs. Each is now an error at the value's line.
#include <string>

#include <catch2/catch.hpp>

#include "io/config/config_loader.hpp"

using namespace memplan;
using namespace memplan::io;

namespace {

Error load_error(const std::string& name, const std::string& text) {
  MemoryFileSystem fs;
  fs.files[name] = text;
  ConfigRequest req;
  req.files = {name};
  auto c = load_config(req, fs);
  REQUIRE_FALSE(c.has_value());
  return c.error();
}

}  // namespace

TEST_CASE("deepspeed (issue 11 item 5): micro-batch x accumulation of 2^32 x 2^32 is an error, not SIGFPE") {
  CHECK(load_error("ds.json", "{\"train_batch_size\": 8,\n \"train_micro_batch_size_per_gpu\": 4294967296,\n"
                              " \"gradient_accumulation_steps\": 4294967296}\n")
            .to_string() == "ds.json:1: micro-batch x accumulation = 4294967296 x 4294967296 is out of range");
  // The same through an HF YAML's inline `deepspeed:` mapping.
  CHECK(load_error("train.yaml", "model_name_or_path: m\nper_device_train_batch_size: 4294967296\n"
                                 "gradient_accumulation_steps: 4294967296\ndeepspeed:\n  train_batch_size: 8\n")
            .to_string() == "train.yaml:5: micro-batch x accumulation = 4294967296 x 4294967296 is out of range");
  // 2^63-1 accumulation: the product overflows signed int64 (UBSan), now refused.
  CHECK(load_error("train.yaml", "model_name_or_path: m\nper_device_train_batch_size: 2\n"
                                 "gradient_accumulation_steps: 9223372036854775807\n"
                                 "deepspeed: {train_batch_size: 6}\n")
            .to_string() == "train.yaml:4: micro-batch x accumulation = 2 x 9223372036854775807 is out of range");
}

TEST_CASE("deepspeed (issue 11 item 13): a train_batch_size of 4.6e18 is an error, not 1024 GPUs") {
  CHECK(load_error("ds.json", "{\"train_micro_batch_size_per_gpu\": 1,\n \"gradient_accumulation_steps\": 1,\n"
                              " \"train_batch_size\": 4600000000000000000}\n")
            .to_string() ==
        "ds.json:3: train_batch_size = 4600000000000000000 means 4600000000000000000 GPUs (micro-batch x accumulation "
        "x GPUs = 1 x 1 x 4600000000000000000); memplan models at most 1024 GPUs per node x 65536 nodes");
}

namespace {

LoadedConfig load_ok(const std::string& name, const std::string& text) {
  MemoryFileSystem fs;
  fs.files[name] = text;
  ConfigRequest req;
  req.files = {name};
  auto c = load_config(req, fs);
  REQUIRE(c.has_value());
  return *c;
}

}  // namespace

TEST_CASE("deepspeed: the zero_optimization buffer sizes, their defaults, auto and the stage3_ aliases") {
  // Absent: DeepSpeed's own defaults (deepspeed/runtime/zero/config.py).
  const LoadedConfig d = load_ok("ds.json", "{\"zero_optimization\": {\"stage\": 3}}\n");
  const ZeroConfig& z0 = d.inputs.config.parallel.zero;
  CHECK(z0.reduce_bucket_size == 500'000'000);
  CHECK(z0.allgather_bucket_size == 500'000'000);
  CHECK(z0.prefetch_bucket_size == 50'000'000);
  CHECK(z0.max_live_parameters == 1'000'000'000);
  CHECK(z0.max_reuse_distance == 1'000'000'000);
  CHECK(z0.param_persistence_threshold == 100'000);
  CHECK(z0.sub_group_size == 1'000'000'000);
  CHECK(z0.contiguous_gradients);
  CHECK_FALSE(z0.overlap_comm.has_value());
  CHECK(d.inputs.origins.count("zero.reduce_bucket_size") == 0);
  // Written: numbers as JSON writes them (5e7 is pp_int's 50000000), "auto" and the alias.
  const LoadedConfig w = load_ok(
      "ds.json",
      "{\"zero_optimization\": {\"stage\": 3, \"overlap_comm\": false, \"contiguous_gradients\": false,\n"
      " \"reduce_bucket_size\": \"auto\", \"allgather_bucket_size\": 2e8,\n"
      " \"stage3_prefetch_bucket_size\": 5e7, \"max_live_parameters\": 300000000,\n"
      " \"stage3_param_persistence_threshold\": \"auto\", \"round_robin_gradients\": true}}\n");
  const ZeroConfig& z = w.inputs.config.parallel.zero;
  CHECK(z.reduce_bucket_auto);
  CHECK(z.allgather_bucket_size == 200'000'000);
  CHECK(z.prefetch_bucket_size == 50'000'000);
  CHECK_FALSE(z.prefetch_bucket_auto);
  CHECK(z.max_live_parameters == 300'000'000);
  CHECK(z.persistence_threshold_auto);
  CHECK_FALSE(z.contiguous_gradients);
  CHECK(z.overlap_comm == std::optional<bool>(false));
  CHECK(z.round_robin_gradients);
  CHECK(w.inputs.origins.at("zero.allgather_bucket_size").to_string() == "ds.json:2");
  CHECK(w.inputs.origins.at("zero.stage3_max_live_parameters").to_string() == "ds.json:3");
  // Negative sizes are DeepSpeed's Field(ge=0) error.
  CHECK(load_error("ds.json", "{\"zero_optimization\": {\"stage\": 2,\n \"reduce_bucket_size\": -1}}\n").to_string() ==
        "ds.json:2: reduce_bucket_size = -1 must be between 0 and 1e15 elements");
}
