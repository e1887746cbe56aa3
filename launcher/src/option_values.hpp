#pragma once
// Reading option text as values, one way for each kind, wherever the text comes from: the command
// line, a PET_* variable or a --rdzv_conf entry. Each throws UsageError naming `what` and the text.
#include <chrono>
#include <string>
#include <string_view>

#include "ddprun/agent/preload_spec.hpp"

namespace ddprun::launcher {

// torchrun's spellings (RendezvousParameters.get_as_bool): 1/true/t/yes/y and 0/false/f/no/n in
// any case, and any integer (non-zero is true: argparse_util reads PET_ flags as int()).
bool parse_bool(std::string_view text, std::string_view what);
// `text` in lower case (ASCII), as Python's str.lower() makes a value torchrun compares.
std::string lowered(std::string_view text);

// Whether `text` is one or more decimal digits and nothing else (no sign, no space).
bool all_digits(std::string_view text);

// A whole decimal integer as Python's int() reads it (python_number.hpp: " 7", "+7", "1_000").
long parse_integer(std::string_view text, std::string_view what);

// A finite number as Python's float() reads it ("0.1", "2", "1e-3", " 5.", "1_0"); "inf" and
// "nan", which float() takes, are refused.
double parse_double(std::string_view text, std::string_view what);

// Non-negative seconds, fractions allowed, as milliseconds.
std::chrono::milliseconds parse_seconds(std::string_view text, std::string_view what);

// --preload: "auto", or comma-separated dotted Python module names ("torch,numpy.linalg"); ""
// none. Empty names, names that are not identifiers, and auto among names are errors.
agent::PreloadSpec parse_preload(std::string_view text);

}  // namespace ddprun::launcher
