// Fuzzes the training-config loaders (every dialect, YAML, JSON and TOML) and --apply on top of them:
// any bytes must load or fail with an Error, and a plan that loads must write a file that loads.
// The first byte picks the dialect and the file name's extension.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/edit/apply.hpp"
#include "io/config/config_loader.hpp"
#include "io/inputs.hpp"

using namespace memplan::io;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static const char* const kDialects[] = {"", "hf", "axolotl", "llama-factory", "torchtune", "lightning",
                                          "flat", "deepspeed", ""};
  const std::uint8_t pick = data[0];
  const std::string dialect = kDialects[pick % 9];
  const std::string name = (pick & 0x80) != 0 ? "train.json" : (pick & 0x40) != 0 ? "train.toml" : "train.yaml";
  MemoryFileSystem fs;
  fs.files[name] = std::string(reinterpret_cast<const char*>(data + 1), size - 1);
  ConfigRequest req;
  req.files = {name};
  req.dialect = dialect;
  auto loaded = load_config(req, fs);
  if (!loaded) return 0;
  (void)check_inputs(loaded->inputs);
  Edits edits;
  edits.micro_batch = 3;
  edits.grad_accum = 5;
  edits.seq_len = 777;
  auto plan = plan_apply(*loaded, edits);
  if (!plan) return 0;
  (void)render_dry_run(*plan);
  auto written = commit_apply(*plan, fs, ApplyOptions{/*backup=*/false});
  if (!written) return 0;
  (void)render_apply_result(*plan, *written);
  // What --apply wrote was parsed back before writing; it must still parse.
  auto again = load_config(req, fs);
  if (!again && again.error().code == memplan::ErrorCode::kParseError) __builtin_trap();
  return 0;
}
