#pragma once
// torchrun's -r/--redirects and -t/--tee values and --local_ranks_filter.
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ddprun::agent {

// Which standard streams a setting applies to (torchrun's Std).
enum class Std : unsigned { kNone = 0, kOut = 1, kErr = 2, kAll = 3 };
inline bool includes_out(Std s) { return (static_cast<unsigned>(s) & 1) != 0; }
inline bool includes_err(Std s) { return (static_cast<unsigned>(s) & 2) != 0; }

// "N" (0-3) for every local rank, or "rank:N,rank:N" (unnamed ranks get 0; a rank beyond `nproc`
// is ignored, as torchrun's to_map does). Ranks may have any number of digits; blanks around a
// piece are allowed. Returns one value per local rank. Throws std::invalid_argument naming the
// problem.
std::vector<Std> parse_std_spec(const std::string& text, int nproc);

// "0,2,5" (or "0, 2, 5") -> {0, 2, 5}; empty -> nullopt (every rank). Throws std::invalid_argument.
std::optional<std::set<int>> parse_rank_filter(const std::string& text);

}  // namespace ddprun::agent
