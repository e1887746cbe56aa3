#pragma once
// Numbers as Python's float() and int() read them, the way torchrun takes every number it is given
// (argparse's type=float and type=int, PET_* variables, --rdzv_conf entries, its environment):
// blanks around the number are read past, a sign may lead, and single underscores may stand
// between digits ("1_000"). float() takes "inf", "infinity" and "nan" in any case, ".5", "5." and
// an exponent ("1e-3"); int() takes base-10 digits only ("0x10" and "1.0" are no int). Python's
// non-ASCII digits are not taken.
#include <optional>
#include <string_view>

namespace ddprun::launcher {

// float(text); nullopt where Python raises ValueError.
std::optional<double> python_float(std::string_view text);
// int(text) where it fits a long; nullopt where Python raises ValueError or the value does not fit.
std::optional<long> python_int(std::string_view text);

}  // namespace ddprun::launcher
