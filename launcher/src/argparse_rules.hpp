#pragma once
// Reads a launcher command line by the rules of Python's argparse (3.14), which torchrun's and
// torch.distributed.launch's parsers follow: options, then the training script and everything
// after it (argparse's REMAINDER). Private to the launcher.
//
// - An option is `--name=value`, `--name value`, or for one letter `-rVALUE` and `-r VALUE`; one-
//   letter flags combine (`-mt3` is `-m -t 3`).
// - An unambiguous prefix of a long option is that option (`--nnode=1`); a prefix several spellings
//   share is an error naming them, as argparse's (`--nproc` could be either spelling of
//   --nproc-per-node). Where a prefix fits torchrun's options and ddprun's own, it means
//   torchrun's: every abbreviation torchrun takes means the same here, but for the one that is
//   ddprun's option in full (--event_log, --event-log: its event log file; docs/cli.md).
// - An option given twice keeps its last value; a `repeated` option keeps every value.
// - A value is the next argument unless that looks like an option (a negative number or text with
//   a space does not); `--` ends the options, and the first `--` right after the script is dropped.
#include <optional>
#include <string>
#include <vector>

#include "option_table.hpp"

namespace ddprun::launcher {

// One option as given: for an option with a value, the value; for a flag, "".
struct GivenOption {
  const OptionSpec* spec;
  std::string value;
};

struct ArgparseResult {
  std::vector<GivenOption> options;  // in the order given
  std::optional<std::string> training_script;
  std::vector<std::string> training_script_args;
  std::vector<std::string> unrecognized;  // arguments before the script that are no option

  // argparse's last checks, once what acts at once (--print-completion) has had its turn: throws
  // UsageError for a missing training script, then for the unrecognized arguments.
  void check_complete() const;
};

// Throws HelpRequested where -h/--help (or a prefix of --help) is reached, VersionRequested where
// --version is, and UsageError with
// argparse's message for an ambiguous prefix, a missing value or a value given to a flag, each
// where it is reached.
ArgparseResult parse_like_argparse(const std::vector<std::string>& args,
                                   const std::vector<const OptionSpec*>& specs);

}  // namespace ddprun::launcher
