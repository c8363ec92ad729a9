// OmegaConf interpolation under hostile and advanced use (issue 34; issue 29 item 3): bounded by
// what it builds, relative references from where they are written, nested defaults, and the
// built-in resolvers oc.env, oc.select, oc.decode and oc.create. Expected values are OmegaConf's
// (omegaconf 2.3: OmegaConf.to_container(cfg, resolve=True) on the same YAML, worked by hand from
// its grammar and resolver docs).
#include <algorithm>
#include <string>

#include <catch2/catch.hpp>

#include "io/config/config_loader.hpp"
#include "io/fs.hpp"

using namespace memplan;
using namespace memplan::io;

namespace {

Result<LoadedConfig> load(MemoryFileSystem& fs, const std::string& file) {
  ConfigRequest req;
  req.files = {file};
  return load_config(req, fs);
}

std::vector<std::string> warnings(const LoadedConfig& c) {
  std::vector<std::string> w;
  for (const auto& d : c.diagnostics) w.push_back(d.to_string());
  return w;
}

}  // namespace

TEST_CASE("interpolation (issue 34): bounded by the size of what it builds, refused at its line") {
  MemoryFileSystem fs;
  // big: 64 KiB of text; each level copies the one below ten times: 10^4 x 64 KiB = 640 MiB if built.
  std::string text = "micro_batch_size: 2\nmax_seq_len: 8\nbig: '" + std::string(65536, 'x') + "'\n";
  text += "l1: ['${big}', '${big}', '${big}', '${big}', '${big}', '${big}', '${big}', '${big}', '${big}', '${big}']\n";
  for (int k = 2; k <= 4; ++k) {
    text += "l" + std::to_string(k) + ": [";
    for (int i = 0; i < 10; ++i) text += (i ? ", '${l" : "'${l") + std::to_string(k - 1) + "}'";
    text += "]\n";
  }
  fs.files["bomb.yaml"] = text;
  const auto r = load(fs, "bomb.yaml");
  REQUIRE_FALSE(r.has_value());
  // l1 builds 10 x 64 KiB = 640 KiB; each of l2's ten elements copies l1 and resolves its ten ${big}
  // again (640 KiB each: 6.4 MiB for l2); l3's elements cost 6.4 MiB each, and its second (line 6)
  // passes 16 MiB in all.
  CHECK(r.error().to_string() ==
        "bomb.yaml:6: OmegaConf interpolation here builds more than 16 MiB of values (references that copy large "
        "values many times); memplan refuses it; write the values themselves, or refer to smaller ones");
  // Strings that double: s1 = ${s0}${s0}, ... 2^46 bytes if built; refused near s7 (8 MiB).
  std::string dbl = "micro_batch_size: 2\nmax_seq_len: 8\ns0: '" + std::string(65536, 'y') + "'\n";
  for (int k = 1; k <= 30; ++k)
    dbl += "s" + std::to_string(k) + ": ${s" + std::to_string(k - 1) + "}${s" + std::to_string(k - 1) + "}\n";
  fs.files["double.yaml"] = dbl;
  const auto d = load(fs, "double.yaml");
  REQUIRE_FALSE(d.has_value());
  CHECK(d.error().message.rfind("OmegaConf interpolation here builds more than 16 MiB", 0) == 0);
  // Nesting deeper than 32: refused at its line, never a stack overflow.
  std::string deep = "${oc.env:A,";
  for (int i = 0; i < 40; ++i) deep += "${oc.env:A,";
  deep += "1" + std::string(41, '}');
  fs.files["deep.yaml"] = "max_seq_len: 8\nmicro_batch_size: " + deep + "\n";
  const auto n = load(fs, "deep.yaml");
  REQUIRE_FALSE(n.has_value());
  CHECK(n.error().to_string() ==
        "deep.yaml:2: OmegaConf interpolations nested more than 32 deep; memplan refuses them; write the values "
        "themselves, or refer to smaller ones");
}

TEST_CASE("interpolation (issue 34): a chain too long to resolve is refused, never read as absent (the default)") {
  MemoryFileSystem fs;
  // a39 = ${a38}${a38}, ...: 2^39 references of a 3-byte string. It was "refers to itself", a
  // warning, and the micro-batch silently took HF's default 8.
  std::string text = "model_name_or_path: gpt2\nper_device_train_batch_size: ${a39}\na0: xyz\n";
  for (int k = 1; k < 40; ++k)
    text += "a" + std::to_string(k) + ": ${a" + std::to_string(k - 1) + "}${a" + std::to_string(k - 1) + "}\n";
  fs.files["chain.yaml"] = text;
  const auto r = load(fs, "chain.yaml");
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().to_string().rfind("chain.yaml:", 0) == 0);
  CHECK(r.error().message.find("memplan refuses it") != std::string::npos);
  // Repeating a reference is no cycle: b = ${a}${a} is "11" (OmegaConf), and c = ${b}${b} "1111".
  fs.files["twice.yaml"] =
      "model_name_or_path: gpt2\na: 1\nb: ${a}${a}\nc: ${b}${b}\nper_device_train_batch_size: ${c}\n";
  const auto t = load(fs, "twice.yaml");
  REQUIRE(t.has_value());
  CHECK(t->inputs.config.micro_batch == 1111);
  // A real cycle is refused at its line.
  fs.files["cycle.yaml"] = "model_name_or_path: gpt2\na: ${b}\nb: ${a}\nper_device_train_batch_size: ${a}\n";
  const auto c = load(fs, "cycle.yaml");
  REQUIRE_FALSE(c.has_value());
  CHECK(c.error().message.find("refers to itself") != std::string::npos);
}

TEST_CASE("interpolation (issue 34): ${.x} inside another interpolation's target is relative to where it is written") {
  MemoryFileSystem fs;
  // OmegaConf: cfg.micro_batch_size -> cfg.train.mbs -> ${.base} in `train` -> train.base = 8 (the root's
  // base is 2, which the old code took).
  fs.files["rel.yaml"] = "base: 2\nmax_seq_len: 8\ntrain:\n  base: 8\n  mbs: ${.base}\n  up: ${..base}\n"
                         "micro_batch_size: ${train.mbs}\ngradient_accumulation_steps: ${train.up}\n";
  const auto r = load(fs, "rel.yaml");
  REQUIRE(r.has_value());
  CHECK(r->inputs.config.micro_batch == 8);
  CHECK(r->inputs.config.grad_accum == 2);  // ${..base} from train: the root's base
}

TEST_CASE("interpolation (issue 29 item 3): nested defaults and the built-in resolvers") {
  MemoryFileSystem fs;
  fs.files["r.yaml"] =
      "defaults_mbs: 4\nmax_seq_len: 8\n"
      "micro_batch_size: ${oc.env:MEMPLAN_TEST_SURELY_UNSET,${defaults_mbs}}\n"   // the nested default: 4
      "gradient_accumulation_steps: ${oc.select:train.ga,3}\n"                    // no train.ga: 3
      "sizes: \"${oc.create:{seq: 512}}\"\n"
      "decoded: ${oc.decode:'16'}\n";
  const auto r = load(fs, "r.yaml");
  REQUIRE(r.has_value());
  CHECK(r->inputs.config.micro_batch == 4);
  CHECK(r->inputs.config.grad_accum == 3);
  const auto w = warnings(*r);
  CHECK(std::find(w.begin(), w.end(),
                  "r.yaml:3: ${oc.env:MEMPLAN_TEST_SURELY_UNSET,${defaults_mbs}} depends on the environment variable "
                  "MEMPLAN_TEST_SURELY_UNSET; memplan uses its default '4'") != w.end());
  // oc.select finds the key when it is there; oc.decode reads a string as YAML; oc.create a mapping.
  fs.files["s.yaml"] = "train:\n  ga: 5\nmax_seq_len: ${oc.select:cfg.seq,${oc.decode:'256'}}\n"
                       "gradient_accumulation_steps: ${oc.select:train.ga,3}\n";
  const auto s = load(fs, "s.yaml");
  REQUIRE(s.has_value());
  CHECK(s->inputs.config.grad_accum == 5);
  CHECK(s->inputs.config.seq_len == 256);
}
