// Tests src/io/config/hydra.cpp through load_config: defaults lists composed the way Hydra >= 1.1
// composes them (groups placed at their package, `_self_` order, `override` entries, optional
// entries, NeMo-RL's relative file paths), command-line overrides, and the limits. Expected values
// follow Hydra's documented rules (hydra.cc "The Defaults List", "Packages", "Override grammar").
#include <catch2/catch.hpp>

#include "io/edit/apply.hpp"
#include "io/config/config_loader.hpp"
#include "io/config/hydra.hpp"

using namespace memplan;
using namespace memplan::io;

namespace {

Result<LoadedConfig> load(MemoryFileSystem& fs, std::vector<std::string> files, std::vector<std::string> overrides = {}) {
  ConfigRequest req;
  req.files = std::move(files);
  req.overrides = std::move(overrides);
  return load_config(req, fs);
}

LoadedConfig load_ok(MemoryFileSystem& fs, std::vector<std::string> files, std::vector<std::string> overrides = {}) {
  auto r = load(fs, std::move(files), std::move(overrides));
  if (!r) FAIL(r.error().to_string());
  return *r;
}

std::string origin(const LoadedConfig& c, const std::string& key) {
  auto it = c.inputs.origins.find(key);
  return it == c.inputs.origins.end() ? "(none)" : it->second.to_string();
}

std::string error_of(MemoryFileSystem& fs, std::vector<std::string> files, std::vector<std::string> overrides = {}) {
  auto r = load(fs, std::move(files), std::move(overrides));
  if (r) return "(loaded)";
  return r.error().to_string();
}

// Seed 002's layout (its document's own values): the main config's defaults list picks a stage.
void seed_002(MemoryFileSystem& fs, const std::string& self_first = "  - _self_\n") {
  fs.files["conf/config.yaml"] = "defaults:\n" + self_first +
                                 "  - text_curriculum: 01_stage\n"
                                 "\n"
                                 "data_loader:\n"
                                 "  batch_size: 45\n"
                                 "\n"
                                 "training:\n"
                                 "  trainer:\n"
                                 "    accumulate_grad_batches: 5  # Effective batch = 225\n";
  fs.files["conf/text_curriculum/01_stage.yaml"] = "n_positives: 32\nn_negatives: 24\n";
  fs.files["conf/text_curriculum/02_stage.yaml"] = "n_positives: 16\nn_negatives: 8\n";
}

}  // namespace

TEST_CASE("hydra: a defaults list's group is read from group/option.yaml at the group's package") {
  MemoryFileSystem fs;
  seed_002(fs);
  LoadedConfig c = load_ok(fs, {"conf/config.yaml"});
  REQUIRE(c.files.size() == 2);
  CHECK(c.files[1].path == "conf/text_curriculum/01_stage.yaml");
  CHECK(c.files[1].package == std::vector<std::string>{"text_curriculum"});
  // 1 anchor + 32 positives + 24 negatives, from the stage file's own line.
  CHECK(c.inputs.config.contrastive.texts_per_example == 57);
  CHECK(origin(c, "texts_per_example") == "conf/text_curriculum/01_stage.yaml:2");
  CHECK(c.inputs.config.micro_batch == 45);
  CHECK(origin(c, "batch") == "conf/config.yaml:6");
  CHECK(c.inputs.config.grad_accum == 5);
  // The defaults list is followed, so nothing says it is not.
  for (const auto& w : c.inputs.warnings) CHECK(w.find("defaults") == std::string::npos);
  CHECK(c.not_followed.empty());

  // The command line chooses another option of the group.
  LoadedConfig two = load_ok(fs, {"conf/config.yaml"}, {"text_curriculum=02_stage"});
  CHECK(two.inputs.config.contrastive.texts_per_example == 1 + 16 + 8);
  CHECK(origin(two, "texts_per_example") == "conf/text_curriculum/02_stage.yaml:2");
  // A file that is not there: not followed, said at the entry's line, and --apply will refuse.
  LoadedConfig typo = load_ok(fs, {"conf/config.yaml"}, {"text_curriculum=09_stage"});
  REQUIRE(typo.not_followed.size() == 1);
  CHECK(typo.not_followed[0] ==
        "conf/config.yaml:3: defaults: no config '09_stage' in group 'text_curriculum' (looked for "
        "conf/text_curriculum/09_stage.yaml); it is not followed; check the option's spelling, run memplan where the "
        "trainer runs, or pass that file with --config");
  CHECK(typo.inputs.config.contrastive.texts_per_example == 0);
  // hydra.searchpath names where the trainer looks; a directory not found from here is said.
  fs.files["conf/exp.yaml"] = "hydra:\n  searchpath:\n    - file://verl/trainer/config\ndefaults:\n  - ppo_trainer\n"
                              "  - _self_\ndata_loader:\n  batch_size: 2\n";
  LoadedConfig sp = load_ok(fs, {"conf/exp.yaml"});
  REQUIRE(sp.not_followed.size() == 1);
  CHECK(sp.not_followed[0] ==
        "conf/exp.yaml:5: defaults: no config 'ppo_trainer' in group '(top)' (looked for conf/ppo_trainer.yaml and "
        "under hydra.searchpath file://verl/trainer/config); it is not followed; check the option's "
        "spelling, run memplan where the trainer runs, or pass that file with --config");
  fs.files["verl/trainer/config/ppo_trainer.yaml"] = "data_loader:\n  batch_size: 7\n  num_workers: 1\n";
  LoadedConfig found = load_ok(fs, {"conf/exp.yaml"});
  CHECK(found.not_followed.empty());
  CHECK(found.inputs.config.micro_batch == 2);
  CHECK(found.files[0].path == "verl/trainer/config/ppo_trainer.yaml");
  // `group: null` drops it.
  LoadedConfig none = load_ok(fs, {"conf/config.yaml"}, {"text_curriculum=null"});
  (void)none;
}

TEST_CASE("hydra: _self_ decides whether the file's own keys or the composed ones win") {
  MemoryFileSystem fs;
  fs.files["conf/data_loader/small.yaml"] = "# a group file\nbatch_size: 16\n";
  fs.files["conf/stage/global.yaml"] = "# @package _global_\ndata_loader:\n  batch_size: 32\n";
  const std::string body = "data_loader:\n  batch_size: 45\n";
  // _self_ first: the composed files override the main file's keys.
  fs.files["conf/first.yaml"] = "defaults:\n  - _self_\n  - data_loader: small\n" + body;
  LoadedConfig first = load_ok(fs, {"conf/first.yaml"});
  CHECK(first.inputs.config.micro_batch == 16);
  CHECK(origin(first, "batch") == "conf/data_loader/small.yaml:2");
  // _self_ last, or not written (Hydra >= 1.1 appends it): the main file wins.
  fs.files["conf/last.yaml"] = "defaults:\n  - data_loader: small\n  - _self_\n" + body;
  fs.files["conf/implicit.yaml"] = "defaults:\n  - data_loader: small\n" + body;
  CHECK(load_ok(fs, {"conf/last.yaml"}).inputs.config.micro_batch == 45);
  LoadedConfig implicit = load_ok(fs, {"conf/implicit.yaml"});
  CHECK(implicit.inputs.config.micro_batch == 45);
  CHECK(origin(implicit, "batch") == "conf/implicit.yaml:4");
  // `# @package _global_`: the file's keys sit at the root.
  fs.files["conf/global.yaml"] = "defaults:\n  - _self_\n  - stage: global\n" + body;
  LoadedConfig global = load_ok(fs, {"conf/global.yaml"});
  CHECK(global.inputs.config.micro_batch == 32);
  CHECK(origin(global, "batch") == "conf/stage/global.yaml:3");
  CHECK(global.files[1].package.empty());
  // `group@pkg`: placed where the entry says.
  fs.files["conf/at.yaml"] = "defaults:\n  - _self_\n  - data_loader@loader: small\n" + body;
  LoadedConfig at = load_ok(fs, {"conf/at.yaml"});
  CHECK(at.inputs.config.micro_batch == 45);
  CHECK(at.files[1].package == std::vector<std::string>{"loader"});
}

TEST_CASE("hydra: override entries, optional entries, nested defaults, mandatory options") {
  MemoryFileSystem fs;
  fs.files["conf/data_loader/small.yaml"] = "batch_size: 16\n";
  fs.files["conf/data_loader/tiny.yaml"] = "batch_size: 2\n";
  // A nested config selects a group; the primary overrides its choice.
  fs.files["conf/experiment/base.yaml"] = "# @package _global_\ndefaults:\n  - /data_loader: small\n";
  fs.files["conf/config.yaml"] =
      "defaults:\n  - experiment: base\n  - override /data_loader: tiny\n  - optional extra: missing\n";
  LoadedConfig c = load_ok(fs, {"conf/config.yaml"});
  CHECK(c.inputs.config.micro_batch == 2);
  CHECK(origin(c, "batch") == "conf/data_loader/tiny.yaml:1");
  // The command line beats the override entry.
  CHECK(load_ok(fs, {"conf/config.yaml"}, {"data_loader=small"}).inputs.config.micro_batch == 16);
  // An override entry for a group nothing selects is refused, as Hydra refuses it.
  fs.files["conf/stray.yaml"] = "defaults:\n  - override model: big\nx: 1\n";
  CHECK(error_of(fs, {"conf/stray.yaml"}) ==
        "conf/stray.yaml:2: defaults: override 'model' matches no group in the defaults list; remove it, or add the "
        "group without `override`");
  fs.files["conf/mandatory.yaml"] = "defaults:\n  - data_loader: ???\n";
  CHECK(error_of(fs, {"conf/mandatory.yaml"}) ==
        "conf/mandatory.yaml:2: defaults: group 'data_loader' has no option (?\?\?); choose one on the command line: "
        "data_loader=OPTION");
  CHECK(load_ok(fs, {"conf/mandatory.yaml"}, {"data_loader=small"}).inputs.config.micro_batch == 16);
}

TEST_CASE("hydra: NeMo-RL's defaults: a path relative to the file, the child's keys win") {
  MemoryFileSystem fs;
  fs.files["examples/configs/grpo_math_1B.yaml"] =
      "grpo:\n  num_prompts_per_step: 32\npolicy:\n  train_micro_batch_size: 4\n  max_total_sequence_length: 512\n";
  fs.files["examples/configs/recipes/llm/grpo-small.yaml"] =
      "defaults: ../../grpo_math_1B.yaml\npolicy:\n  train_micro_batch_size: 1\n";
  const std::string child = "examples/configs/recipes/llm/grpo-small.yaml";
  auto doc = parse_yaml(fs.files[child], child);
  REQUIRE(doc);
  auto c = compose_hydra(child, fs.files[child], FileInfo{}, *doc, {}, fs);
  REQUIRE(c);
  REQUIRE(c->layers.size() == 2);
  CHECK(c->layers[0].path == "examples/configs/grpo_math_1B.yaml");
  CHECK(c->layers[1].path == child);
  CHECK(c->layers[1].doc.root.get("defaults") == nullptr);
  CHECK(c->layers[0].package.empty());
  fs.files["examples/configs/recipes/llm/broken.yaml"] = "defaults: ../../nope.yaml\n";
  CHECK(error_of(fs, {"examples/configs/recipes/llm/broken.yaml"}) ==
        "examples/configs/recipes/llm/broken.yaml:1: defaults: '../../nope.yaml' not found (looked for "
        "examples/configs/nope.yaml); paths in a defaults list are relative to the file that names them");
}

TEST_CASE("hydra: cycles and depth are refused with the chain") {
  MemoryFileSystem fs;
  fs.files["a.yaml"] = "defaults: b.yaml\nx: 1\n";
  fs.files["b.yaml"] = "defaults: a.yaml\ny: 1\n";
  CHECK(error_of(fs, {"a.yaml"}) ==
        "Hydra defaults lists form a cycle: a.yaml -> b.yaml -> a.yaml; remove the entry that points back");
  // A chain of 20 files, each including the next: deeper than the limit.
  for (int i = 0; i < 20; ++i) fs.files["d" + std::to_string(i) + ".yaml"] = "defaults: d" + std::to_string(i + 1) + ".yaml\n";
  fs.files["d20.yaml"] = "x: 1\n";
  CHECK(error_of(fs, {"d0.yaml"}) == "Hydra defaults lists nest deeper than 16 files at d17.yaml");
}

TEST_CASE("hydra: key=value overrides after the file, with their own origin") {
  MemoryFileSystem fs;
  seed_002(fs);
  LoadedConfig c = load_ok(fs, {"conf/config.yaml"},
                           {"data_loader.batch_size=8", "+training.trainer.devices=2", "text_curriculum.n_negatives=4"});
  CHECK(c.inputs.config.micro_batch == 8);
  CHECK(origin(c, "batch") == "command line:1");
  CHECK(c.inputs.config.parallel.num_gpus == 2);
  CHECK(origin(c, "num_gpus") == "command line:2");
  CHECK(c.inputs.config.contrastive.texts_per_example == 1 + 32 + 4);
  CHECK(origin(c, "texts_per_example") == "command line:3");
  CHECK(c.files.back().command_line);
  CHECK(c.files.back().text == "data_loader.batch_size=8\n+training.trainer.devices=2\ntext_curriculum.n_negatives=4\n");

  CHECK(error_of(fs, {"conf/config.yaml"}, {"data_loader.batch_sise=8"}) ==
        "command line:1: cannot override 'data_loader.batch_sise': it is not in the composed config; to add it, "
        "write +data_loader.batch_sise=8; did you mean 'batch_size'?");
  CHECK(error_of(fs, {"conf/config.yaml"}, {"+data_loader.batch_size=8"}) ==
        "command line:1: cannot add 'data_loader.batch_size': it is already in the composed config; write "
        "data_loader.batch_size=8 to change it");
  CHECK(load_ok(fs, {"conf/config.yaml"}, {"++data_loader.batch_size=8"}).inputs.config.micro_batch == 8);
  CHECK(load_ok(fs, {"conf/config.yaml"}, {"~data_loader.batch_size"}).inputs.config.micro_batch == 1);
  CHECK(error_of(fs, {"conf/config.yaml"}, {"data loader=1"}) ==
        "override 'data loader=1' is not KEY=VALUE; write a.b=VALUE, +a.b=VALUE to add a key, ~a.b to remove one, "
        "or group=option");

  CHECK(is_override("a.b=1"));
  CHECK(is_override("+a=x"));
  CHECK(is_override("~a.b"));
  CHECK_FALSE(is_override("conf/config.yaml"));
  CHECK_FALSE(is_override("=1"));
}

TEST_CASE("hydra: --apply writes a value where it was read, without the file's package") {
  MemoryFileSystem fs;
  fs.files["conf/data_loader/small.yaml"] = "batch_size: 16  # a group file\n";
  fs.files["conf/config.yaml"] =
      "defaults:\n  - _self_\n  - data_loader: small\ntraining:\n  trainer:\n    accumulate_grad_batches: 5\n";
  LoadedConfig c = load_ok(fs, {"conf/config.yaml"});
  const ValueSite* b = c.primary_site(Knob::kBatch);
  REQUIRE(b != nullptr);
  CHECK(b->file == 1);
  CHECK(b->path == std::vector<std::string>{"batch_size"});
  CHECK(b->key() == "batch_size");
  auto plan = plan_apply(c, Edits{8, 10, std::nullopt});
  REQUIRE(plan);
  REQUIRE(plan->files.size() == 2);
  CHECK(plan->files[0].path == "conf/config.yaml");
  CHECK(plan->files[0].after ==
        "defaults:\n  - _self_\n  - data_loader: small\ntraining:\n  trainer:\n    accumulate_grad_batches: 10\n");
  CHECK(plan->files[1].path == "conf/data_loader/small.yaml");
  CHECK(plan->files[1].after == "batch_size: 8  # a group file\n");

  // A value set on the command line cannot be written back.
  LoadedConfig cl = load_ok(fs, {"conf/config.yaml"}, {"data_loader.batch_size=4"});
  auto refused = plan_apply(cl, Edits{8, std::nullopt, std::nullopt});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().to_string() ==
        "command line:1: cannot write micro-batch = 8: data_loader.batch_size is set by an override on the command "
        "line; change it there: data_loader.batch_size=8");
}
