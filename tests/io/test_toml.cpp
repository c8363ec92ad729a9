// Tests for src/io/toml.cpp: TOML job configs (torchtitan) as a located tree.
#include <catch2/catch.hpp>

#include <string>

#include "io/toml.hpp"

using namespace memplan::io;

TEST_CASE("TOML tables become maps, each value at its line and the bytes of its text") {
  const std::string text =
      "# a comment\n"                                // 1
      "[model]\n"                                    // 2
      "name = \"llama3\"  # the family\n"           // 3
      "flavor = '8B'\n"                              // 4
      "\n"                                           // 5
      "[training]\n"                                 // 6
      "local_batch_size = 4  # per rank\n"           // 7
      "steps = 10_000\n"                             // 8
      "compile = true\n"                             // 9
      "[quantize.dense.float8]\n"                    // 10
      "filter_fqns = [\"output\", \"router.gate\"]\n";  // 11
  auto doc = parse_toml(text, "job.toml");
  REQUIRE(doc);
  CHECK(doc->warnings.empty());
  const YamlNode* batch = doc->root.at({"training", "local_batch_size"});
  REQUIRE(batch != nullptr);
  CHECK(batch->value == "4");
  CHECK(batch->line == 7);
  CHECK(text.substr(batch->begin, batch->end - batch->begin) == "4");  // the comment is not the value
  CHECK(batch->editable());
  const YamlNode* name = doc->root.at({"model", "name"});
  REQUIRE(name != nullptr);
  CHECK(name->value == "llama3");
  CHECK(name->style == ScalarStyle::kDoubleQuoted);
  CHECK(text.substr(name->begin, name->end - name->begin) == "\"llama3\"");
  CHECK(doc->root.at({"model", "flavor"})->style == ScalarStyle::kSingleQuoted);
  CHECK(doc->root.at({"training", "steps"})->value == "10000");  // TOML's digit separator
  CHECK(doc->root.at({"training", "compile"})->value == "true");
  CHECK(doc->root.get("model")->line == 2);
  const YamlNode* fqns = doc->root.at({"quantize", "dense", "float8", "filter_fqns"});
  REQUIRE(fqns != nullptr);
  REQUIRE(fqns->kind == YamlKind::kSeq);
  REQUIRE(fqns->items.size() == 2);
  CHECK(fqns->items[1].value == "router.gate");
  CHECK_FALSE(fqns->editable());
}

TEST_CASE("TOML that the reader does not take is a located warning, not a wrong value") {
  const std::string text =
      "[model]\n"               // 1
      "converters = [\n"        // 2
      "  \"float8\",\n"         // 3
      "]\n"                     // 4
      "name = \"llama3\"\n"     // 5
      "this is not toml\n"      // 6
      "[training]\n"            // 7
      "seq_len = 8192\n";       // 8
  auto doc = parse_toml(text, "job.toml");
  REQUIRE(doc);
  CHECK(doc->root.at({"model", "converters"}) == nullptr);
  CHECK(doc->root.at({"model", "name"})->value == "llama3");
  CHECK(doc->root.at({"training", "seq_len"})->line == 8);
  REQUIRE(doc->warnings.size() == 2);
  CHECK(doc->warnings[0].where->line == 2);  // the multi-line array
  CHECK(doc->warnings[1].where->line == 6);
  // Not text at all.
  CHECK_FALSE(parse_toml(std::string("a = 1\0", 6), "job.toml"));
  // Tables nested deeper than a config ever is (the tree is destroyed recursively).
  std::string deep = "[t";
  for (int i = 0; i < 99; ++i) deep += ".t";
  deep += "]\nx = 1\n";
  auto d = parse_toml(deep, "deep.toml");
  REQUIRE(d);
  CHECK(d->root.entries.empty());
  CHECK(d->warnings.size() == 1);
}

TEST_CASE("parse_config_text reads .toml as TOML and anything else as YAML") {
  auto toml = parse_config_text("[training]\nseq_len = 4096\n", "x.TOML");
  REQUIRE(toml);
  CHECK(toml->root.at({"training", "seq_len"})->value == "4096");
  CHECK_FALSE(parse_config_text("[training]\nseq_len = 4096\n", "x.yaml"));  // a YAML flow sequence left open
}

TEST_CASE("TOML that repeats a key reads the last one; a header left open is a warning") {
  const std::string text =
      "[training]\n"        // 1
      "seq_len = 4096\n"    // 2
      "seq_len = 8192\n"    // 3
      "[model\n"            // 4
      "name = \"llama3\"\n";  // 5
  auto doc = parse_toml(text, "job.toml");
  REQUIRE(doc);
  const YamlNode* seq = doc->root.at({"training", "seq_len"});
  REQUIRE(seq != nullptr);
  CHECK(seq->value == "8192");
  CHECK(seq->line == 3);
  CHECK(text.substr(seq->begin, seq->end - seq->begin) == "8192");  // --apply rewrites the one read
  // The open header, reported first; the repeat; and the lines after the open header, which
  // CLI11 reads as keys of [training] and which are therefore not read at all.
  REQUIRE(doc->warnings.size() == 4);
  CHECK(doc->warnings[0].where->line == 4);
  CHECK(doc->warnings[1].where->line == 3);
  CHECK(doc->warnings[1].message.find("more than once") != std::string::npos);
  CHECK(doc->root.at({"training", "name"}) == nullptr);
  CHECK(doc->root.at({"model", "name"}) == nullptr);
}
