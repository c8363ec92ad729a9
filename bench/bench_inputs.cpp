// Speed of reading hostile or very large inputs (issue 11 items 7 and 9). The tests assert only
// how the cost grows (tests/support/cpu_time.hpp); the absolute numbers are measured here.
//
//   cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DMEMPLAN_BUILD_BENCH=ON
//   cmake --build build-bench --target memplan_bench_inputs && build-bench/bench/memplan_bench_inputs
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

#include "io/config/config_loader.hpp"
#include "io/fs.hpp"
#include "io/model/model_source.hpp"
#include "io/edit/yaml_edit.hpp"

namespace {

using namespace memplan;

std::string many_keys(long keys) {
  std::string text = "model_name_or_path: m\nper_device_train_batch_size: 4\n";
  for (long i = 0; i < keys; ++i) {
    const std::string n = std::to_string(i);
    text.append("k").append(n).append(": ").append(n).append("\n");
  }
  return text;
}

// 200,000 keys in one file (about a second of CPU on the machines of 2026), and as two layers.
void BM_LoadConfigKeys(benchmark::State& state) {
  io::MemoryFileSystem fs;
  fs.files["big.yaml"] = many_keys(state.range(0));
  fs.files["stage.yaml"] = fs.files["big.yaml"];
  io::ConfigRequest req;
  req.files = {"big.yaml"};
  if (state.range(1) == 2) req.files.push_back("stage.yaml");
  for (auto _ : state) {
    auto c = io::load_config(req, fs);
    if (!c) std::abort();
    benchmark::DoNotOptimize(c);
  }
}
BENCHMARK(BM_LoadConfigKeys)->Args({200000, 1})->Args({200000, 2})->Unit(benchmark::kMillisecond);

// A billion-laughs document (9 levels of 9 aliases), refused after 100,000 nodes.
void BM_YamlAliasBomb(benchmark::State& state) {
  std::string text = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  const std::string names = "abcdefghij";
  for (std::size_t i = 1; i < names.size(); ++i) {
    text.append(1, names[i]).append(": &").append(1, names[i]).append(" [");
    for (int k = 0; k < 9; ++k) text.append(k ? ", *" : "*").append(1, names[i - 1]);
    text += "]\n";
  }
  for (auto _ : state) {
    auto doc = io::parse_yaml(text, "bomb.yaml");
    if (doc) std::abort();
    benchmark::DoNotOptimize(doc);
  }
}
BENCHMARK(BM_YamlAliasBomb)->Unit(benchmark::kMicrosecond);

// num_hidden_layers 2^40, refused before any per-layer loop.
void BM_HfConfigHugeLayers(benchmark::State& state) {
  const std::string text =
      "{\"model_type\": \"qwen2_moe\", \"vocab_size\": 1000, \"hidden_size\": 64, \"num_hidden_layers\": 1099511627776,"
      " \"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"intermediate_size\": 128, \"num_experts\": 4,"
      " \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32}";
  for (auto _ : state) {
    auto m = io::parse_hf_config(text, "config.json");
    if (m) std::abort();
    benchmark::DoNotOptimize(m);
  }
}
BENCHMARK(BM_HfConfigHugeLayers)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
