// Small text helpers shared by every layer: near-match suggestions ("did you mean ...?"),
// case folding, and parsing of sizes and counts as users write them ("24GB", "80GiB", "7B").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memplan/bytes.hpp"
#include "memplan/result.hpp"

namespace memplan {

// Levenshtein distance, case-insensitive.
std::size_t edit_distance(std::string_view a, std::string_view b);
// Whether `name` is plausibly `candidate` mistyped, `distance` edits away: few edits for its
// length, not half of a short name, not a whole piece added or dropped.
bool plausible_typo(std::string_view name, std::string_view candidate, std::size_t distance);

// The candidate closest to `name` when it is close enough to be a plausible typo
// (distance <= max(2, len/3)), or a candidate that contains `name` as a substring.
std::optional<std::string> closest_match(std::string_view name, const std::vector<std::string>& candidates);

// "; did you mean 'x'?" suffix text or empty.
std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates);

std::string to_lower(std::string_view s);

// `s` safe to print on a terminal: control characters (ESC and the rest of C0 except newline
// and tab, DEL, C1) and bytes that are not UTF-8 become \xNN / \u00NN, so a value quoted from
// a file cannot move the cursor, recolour or retitle the terminal.
std::string escape_control(std::string_view s);
std::string trim(std::string_view s);

// "24GB" (decimal), "24GiB"/"24G" (binary), "24000MiB", "1.5TB", "512" (bytes). Case-insensitive.
// A bare number with no unit is bytes; the error suggests adding a unit when that looks wrong.
Result<Bytes> parse_size(std::string_view text);

// "7B", "1.5b", "350M", "8030261248", "7e9": a positive count (parameters).
Result<std::int64_t> parse_count(std::string_view text);

// Strict integer / float parsing of a whole string; error quotes the text and names `what`.
Result<std::int64_t> parse_int(std::string_view text, std::string_view what);
Result<double> parse_double(std::string_view text, std::string_view what);
Result<bool> parse_bool(std::string_view text, std::string_view what);

}  // namespace memplan
