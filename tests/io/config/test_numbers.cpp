// The number grammar of config files (src/io/config/numbers.cpp): YAML as PyYAML 6.0 reads it (YAML
// 1.1, lib/yaml/resolver.py and constructor.py), JSON as Python's json module, quoted values as
// Python's int()/float(); and what the loaders do with it (issue 11 item 10).
#include <cmath>
#include <string>

#include <catch2/catch.hpp>

#include "io/config/config_loader.hpp"
#include "io/config/numbers.hpp"

using namespace memplan;
using namespace memplan::io;
using Kind = ScalarNumber::Kind;

namespace {

struct Row {
  const char* text;
  Kind kind;
  double value;        // kInt and kFloat
  const char* yaml12;  // "" when YAML 1.2 reads it the same
};

}  // namespace

TEST_CASE("numbers: plain YAML scalars resolve as PyYAML (YAML 1.1) does, with YAML 1.2's reading where it differs") {
  // Expected values are what `yaml.safe_load("v: TEXT")["v"]` gives in PyYAML 6.0, read off its
  // resolver regexes and constructors, and what the YAML 1.2.2 core schema (10.3.2) gives.
  const Row rows[] = {
      {"8", Kind::kInt, 8, ""},
      {"0", Kind::kInt, 0, ""},
      {"-3", Kind::kInt, -3, ""},
      {"+7", Kind::kInt, 7, ""},
      {"010", Kind::kInt, 8, "YAML 1.2 reads it as 10"},          // octal in 1.1
      {"0o10", Kind::kOther, 0, "YAML 1.2 reads it as 8"},        // 1.2's octal is a string in 1.1
      {"08", Kind::kOther, 0, "YAML 1.2 reads it as 8"},          // not octal, not decimal: a string
      {"500_000", Kind::kInt, 500000, "YAML 1.2 reads it as the string '500_000'"},
      {"0x1F", Kind::kInt, 31, ""},
      {"0b101", Kind::kInt, 5, "YAML 1.2 reads it as the string '0b101'"},
      {"1:30", Kind::kInt, 90, "YAML 1.2 reads it as the string '1:30'"},  // sexagesimal
      {"1e3", Kind::kOther, 0, "YAML 1.2 reads it as 1000"},      // 1.1 floats need a dot
      {"1.0e3", Kind::kOther, 0, "YAML 1.2 reads it as 1000"},    // ... and a signed exponent
      {"1.0e+3", Kind::kFloat, 1000, ""},
      {"1.5", Kind::kFloat, 1.5, ""},
      {".5", Kind::kFloat, 0.5, ""},
      {"1.", Kind::kFloat, 1, ""},
      {"1_000.5", Kind::kFloat, 1000.5, "YAML 1.2 reads it as the string '1_000.5'"},
      {"-.inf", Kind::kFloat, -HUGE_VAL, ""},
      {"auto", Kind::kOther, 0, ""},
      {"1,000", Kind::kOther, 0, ""},
      {"8 # no", Kind::kOther, 0, ""},
  };
  for (const auto& r : rows) {
    INFO(r.text);
    const ScalarNumber n = resolve_number(r.text, NumberGrammar::kYaml11);
    CHECK(n.kind == r.kind);
    if (r.kind == Kind::kInt) CHECK(n.integer == static_cast<std::int64_t>(r.value));
    if (r.kind != Kind::kOther) CHECK(n.real == r.value);
    CHECK(n.yaml12_differs == r.yaml12);
  }
  CHECK(std::isnan(resolve_number(".nan", NumberGrammar::kYaml11).real));
}

TEST_CASE("numbers: boundaries of int64, and values beyond a double") {
  CHECK(resolve_number("9223372036854775807", NumberGrammar::kYaml11).integer == INT64_MAX);
  CHECK_FALSE(resolve_number("9223372036854775807", NumberGrammar::kYaml11).out_of_range);
  CHECK(resolve_number("-9223372036854775808", NumberGrammar::kYaml11).integer == INT64_MIN);
  CHECK(resolve_number("9223372036854775808", NumberGrammar::kYaml11).out_of_range);
  CHECK(resolve_number("99999999999999999999999", NumberGrammar::kYaml11).out_of_range);
  CHECK(resolve_number("0x8000000000000000", NumberGrammar::kYaml11).out_of_range);
  CHECK(resolve_number("4294967296", NumberGrammar::kYaml11).integer == (std::int64_t{1} << 32));
  CHECK(resolve_number("1.0e+400", NumberGrammar::kYaml11).out_of_range);
  CHECK(resolve_number("1e400", NumberGrammar::kJson).out_of_range);
  CHECK(resolve_number("1e400", NumberGrammar::kJson).kind == Kind::kFloat);
}

TEST_CASE("numbers: JSON files use JSON's grammar; quoted values Python's int() and float()") {
  CHECK(resolve_number("010", NumberGrammar::kJson).kind == Kind::kOther);  // json.loads refuses it
  CHECK(resolve_number("10", NumberGrammar::kJson).integer == 10);
  CHECK(resolve_number("1e3", NumberGrammar::kJson).kind == Kind::kFloat);
  CHECK(resolve_number("1e3", NumberGrammar::kJson).real == 1000);
  CHECK(resolve_number("4600000000000000000", NumberGrammar::kJson).integer == 4600000000000000000);
  CHECK(convert_quoted("010").integer == 10);  // int("010") == 10
  CHECK(convert_quoted(" 8 ").integer == 8);
  CHECK(convert_quoted("1_000").integer == 1000);
  CHECK(convert_quoted("1__0").kind == Kind::kOther);
  CHECK(convert_quoted("0x10").kind == Kind::kOther);
  CHECK(convert_quoted("1e-5").real == 1e-5);
  CHECK(convert_quoted("1.2.").kind == Kind::kOther);
}

TEST_CASE("numbers (issue 11 item 10): per_device_train_batch_size: 010 is 8, as TRL reads it, with a warning") {
  MemoryFileSystem fs;
  fs.files["train.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: 010\ngradient_accumulation_steps: 500_000\n";
  ConfigRequest req;
  req.files = {"train.yaml"};
  auto c = load_config(req, fs);
  REQUIRE(c.has_value());
  CHECK(c->inputs.config.micro_batch == 8);
  CHECK(c->inputs.config.grad_accum == 500000);
  REQUIRE(c->inputs.warnings.size() == 3);  // the third: TRL's bf16 / gradient_checkpointing defaults
  CHECK(c->inputs.warnings[0] ==
        "train.yaml:2: '010' is read as 8 (YAML 1.1, as PyYAML and so the trainer read it); YAML 1.2 reads it as 10; "
        "write 8 to say the same thing in every YAML version");
  CHECK(c->inputs.warnings[1] ==
        "train.yaml:3: '500_000' is read as 500000 (YAML 1.1, as PyYAML and so the trainer read it); YAML 1.2 reads "
        "it as the string '500_000'; write 500000 to say the same thing in every YAML version");

  fs.files["train.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: 08\n";
  CHECK(load_config(req, fs).error().to_string() ==
        "train.yaml:2: per_device_train_batch_size must be an integer, got \"08\" (YAML 1.1, which PyYAML and so the "
        "trainer use, reads it as the string '08'; YAML 1.2 reads it as 8)");
  fs.files["train.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: 1e3\n";
  CHECK(load_config(req, fs).error().to_string() ==
        "train.yaml:2: per_device_train_batch_size must be an integer, got \"1e3\" (YAML 1.1, which PyYAML and so the "
        "trainer use, reads it as the string '1e3'; YAML 1.2 reads it as 1000)");
  fs.files["train.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: 9223372036854775808\n";
  CHECK(load_config(req, fs).error().to_string() ==
        "train.yaml:2: per_device_train_batch_size = 9223372036854775808 is out of range (-2^63 to 2^63-1)");
  // Quoted, it is a string the trainer's argument parser converts with int(): decimal.
  fs.files["train.yaml"] = "model_name_or_path: m\nper_device_train_batch_size: \"010\"\n";
  CHECK(load_config(req, fs)->inputs.config.micro_batch == 10);
}

TEST_CASE("numbers: a DeepSpeed JSON reads 010 as JSON does (an error), not as YAML") {
  MemoryFileSystem fs;
  fs.files["ds.json"] = "{\n  \"train_micro_batch_size_per_gpu\": 010,\n  \"gradient_accumulation_steps\": 1\n}\n";
  ConfigRequest req;
  req.files = {"ds.json"};
  CHECK(load_config(req, fs).error().to_string() ==
        "ds.json:2: train_micro_batch_size_per_gpu must be an integer, got \"010\"");
}
