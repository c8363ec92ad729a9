// Tests for src/io/config/toml.cpp: TOML job configs (torchtitan) as a located tree.
#include <catch2/catch.hpp>

#include <string>

#include "io/config/toml.hpp"

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

// ---- issue 34: what Python's tomllib reads, read the same way (checked with Python 3.11's tomllib) ----

TEST_CASE("TOML (issue 34): lines inside a multi-line string are the string, never keys") {
  const std::string text =
      "[training]\n"                         // 1
      "local_batch_size = 64\n"              // 2
      "notes = \"\"\"\n"                     // 3
      "local_batch_size = 2\n"               // 4
      "[model]\n"                            // 5
      "name = \"x\"\n"                       // 6
      "\"\"\"  # a comment\n"                // 7
      "prompt = '''\n"                       // 8
      "seq_len = 1\\n'''\n"                  // 9
      "seq_len = 4096\n"                     // 10
      "one = \"\"\"a \\\"b\\\" c\"\"\"\n";   // 11
  // tomllib: {'training': {'local_batch_size': 64, 'notes': 'local_batch_size = 2\n[model]\nname = "x"\n',
  //   'prompt': 'seq_len = 1\\n', 'seq_len': 4096, 'one': 'a "b" c'}}
  auto doc = parse_toml(text, "job.toml");
  REQUIRE(doc);
  CHECK(doc->warnings.empty());
  CHECK(doc->root.at({"training", "local_batch_size"})->value == "64");
  CHECK(doc->root.at({"training", "local_batch_size"})->line == 2);
  CHECK(doc->root.at({"training", "notes"})->value == "local_batch_size = 2\n[model]\nname = \"x\"\n");
  CHECK_FALSE(doc->root.at({"training", "notes"})->editable());  // --apply never edits inside
  CHECK(doc->root.at({"training", "prompt"})->value == "seq_len = 1\\n");  // literal: no escapes
  CHECK(doc->root.at({"training", "seq_len"})->value == "4096");
  CHECK(doc->root.at({"training", "seq_len"})->line == 10);
  CHECK(text.substr(doc->root.at({"training", "seq_len"})->begin, 4) == "4096");
  CHECK(doc->root.at({"training", "one"})->value == "a \"b\" c");
  CHECK(doc->root.get("model") == nullptr);
  auto open = parse_toml("[training]\nnotes = \"\"\"\nseq_len = 2\n", "job.toml");
  REQUIRE_FALSE(open);
  CHECK(open.error().to_string() == "job.toml:2: invalid TOML: a string in triple quotes that is never closed");
}

TEST_CASE("TOML (issue 34): a table declared twice is an error at its line") {
  // tomllib: "Cannot declare ('training',) twice (at line 4, column 10)"
  auto doc = parse_toml("[training]\nseq_len = 1\n[model]\n[training]\nsteps = 2\n", "job.toml");
  REQUIRE_FALSE(doc);
  CHECK(doc.error().to_string() == "job.toml:4: invalid TOML: table [training] is declared twice (first at line 1); "
                                   "TOML declares a table once, and Python's tomllib refuses the file");
  // Arrays of tables repeat by design; a sub-table after its parent is no repeat.
  auto ok = parse_toml("[[a]]\nx = 1\n[[a]]\nx = 2\n[t]\ny = 1\n[t.u]\nz = 2\n", "job.toml");
  CHECK(ok);
}

TEST_CASE("TOML (issue 34): 0x, 0o and 0b integers are TOML's; leading zeros get a TOML message") {
  // tomllib: {'a': 8, 'b': 31, 'c': 5, 'd': 255}
  auto doc = parse_toml("[t]\na = 0o10\nb = 0x1F\nc = 0b101\nd = 0xff_ff\n", "job.toml");
  REQUIRE(doc);
  CHECK(doc->root.at({"t", "a"})->value == "8");
  CHECK(doc->root.at({"t", "b"})->value == "31");
  CHECK(doc->root.at({"t", "c"})->value == "5");
  CHECK(doc->root.at({"t", "d"})->value == "65535");
  // tomllib: "Expected newline or end of document after a statement (at line 2, column 6)"
  auto zero = parse_toml("[t]\na = 010\n", "job.toml");
  REQUIRE_FALSE(zero);
  CHECK(zero.error().to_string() ==
        "job.toml:2: invalid TOML: 'a' = 010: TOML integers have no leading zeros (Python's tomllib refuses it); "
        "write it without the leading zeros, or with 0o for octal (0o10 is 8)");
  CHECK(parse_toml("[t]\na = 0\nb = 0.5\nc = -0\n", "job.toml"));  // a lone zero, and floats, are fine
}

TEST_CASE("TOML (issue 34): CR-only line breaks are refused as tomllib refuses them; CRLF is read") {
  // tomllib: 'a = 1\rb = 2\r' -> "Expected newline or end of document after a statement (at line 1, column 6)"
  auto cr = parse_toml("[t]\r\na = 1\rb = 2\r", "job.toml");
  REQUIRE_FALSE(cr);
  CHECK(cr.error().to_string() ==
        "job.toml:2: a carriage return (CR) without a line feed; TOML line breaks are LF or CRLF, and Python's "
        "tomllib refuses the file ('Expected newline or end of document after a statement')");
  auto crlf = parse_toml("[t]\r\na = 1\r\nb = 2\r\n", "job.toml");
  REQUIRE(crlf);
  CHECK(crlf->root.at({"t", "b"})->value == "2");
}
