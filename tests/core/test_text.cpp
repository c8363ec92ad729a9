#include <catch2/catch.hpp>

#include "memplan/text.hpp"

using namespace memplan;

TEST_CASE("parse_size distinguishes decimal and binary units") {
  CHECK(parse_size("24GB")->count() == 24'000'000'000);
  CHECK(parse_size("24GiB")->count() == 24LL * 1073741824);
  CHECK(parse_size("24G")->count() == 24LL * 1073741824);
  CHECK(parse_size(" 80 gib ")->count() == 80LL * 1073741824);
  CHECK(parse_size("1.5TB")->count() == 1'500'000'000'000);
  CHECK(parse_size("512")->count() == 512);
  CHECK(parse_size("0")->count() == 0);
}

TEST_CASE("parse_size errors quote the text") {
  CHECK(parse_size("10x").error().message == "invalid size unit in \"10x\"");
  CHECK(parse_size("abc").error().message == "invalid size: \"abc\"");
  CHECK(parse_size("-1GB").error().message == "invalid size: \"-1GB\"");
  CHECK(parse_size("").error().message == "invalid size: \"\"");
  CHECK(parse_size("1e30TB").error().message == "size too large: \"1e30TB\"");
}

TEST_CASE("parse_count reads parameter counts") {
  CHECK(*parse_count("7B") == 7'000'000'000);
  CHECK(*parse_count("1.5b") == 1'500'000'000);
  CHECK(*parse_count("350M") == 350'000'000);
  CHECK(*parse_count("8030261248") == 8'030'261'248);
  CHECK(parse_count("0").error().message == "invalid count: \"0\"");
  CHECK(parse_count("7Q").error().message == "invalid count suffix in \"7Q\"");
}

TEST_CASE("closest_match suggests near spellings only") {
  const std::vector<std::string> names = {"llama-3.1-8b", "llama-3.1-70b", "mistral-7b-v0.1"};
  CHECK(closest_match("llama-3-8b", names) == std::optional<std::string>("llama-3.1-8b"));
  CHECK(closest_match("LLAMA-3.1-8B", names) == std::optional<std::string>("llama-3.1-8b"));
  CHECK(closest_match("mistral", names) == std::optional<std::string>("mistral-7b-v0.1"));
  CHECK_FALSE(closest_match("gpt-j", names).has_value());
  CHECK(did_you_mean("adamw_torh", {"adamw_torch", "sgd"}) == "did you mean 'adamw_torch'?");
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("abc", "abc") == 0);
  CHECK(edit_distance("bf61", "bf16") == 1);  // two neighbours swapped
  // Suggestions seen on real configs that were not typos: a two-letter key is not a misspelt
  // three-letter one, and a key with a word added is another key.
  CHECK(did_you_mean("lr", {"lam", "r"}).empty());
  CHECK(did_you_mean("bf61", {"bf16", "fp16"}) == "did you mean 'bf16'?");
  CHECK(did_you_mean("peft_model_name_or_path", {"model_name_or_path"}).empty());
  CHECK(did_you_mean("model_name_or_pth", {"model_name_or_path"}) == "did you mean 'model_name_or_path'?");
}

TEST_CASE("strict number parsing") {
  CHECK(*parse_int("42", "batch") == 42);
  CHECK(parse_int("4x", "batch").error().message == "batch must be an integer, got \"4x\"");
  CHECK(*parse_double("0.05", "dropout") == Approx(0.05));
  CHECK(parse_double("nan", "dropout").error().message == "dropout must be a number, got \"nan\"");
  CHECK(*parse_bool("True", "x"));
  CHECK_FALSE(*parse_bool("off", "x"));
  CHECK(parse_bool("maybe", "bf16").error().message == "bf16 must be true or false, got \"maybe\"");
}

TEST_CASE("escape_control (issue 11 item 13): control characters cannot reach the terminal") {
  CHECK(escape_control("plain text, ünïcödé, 中文") == "plain text, ünïcödé, 中文");
  CHECK(escape_control("a\nb\tc") == "a\nb\tc");
  CHECK(escape_control("\x1b[2J\x1b]0;title\x07") == "\\x1b[2J\\x1b]0;title\\x07");
  CHECK(escape_control(std::string("nul\0x", 5)) == "nul\\x00x");
  CHECK(escape_control("\x7f") == "\\x7f");
  CHECK(escape_control("\xc2\x9b" "31m") == "\\u009b31m");  // C1 CSI as UTF-8
  CHECK(escape_control("\x9b" "31m") == "\\x9b31m");        // C1 CSI as a raw byte
  CHECK(escape_control("\xff\xfe") == "\\xff\\xfe");
  Error e = make_error(ErrorCode::kInvalidArgument, "unknown model '\x1b[31mred'");
  CHECK(e.to_string() == "unknown model '\\x1b[31mred'");
}
