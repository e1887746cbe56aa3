#pragma once
// Every rank's stack on a hang. Python workers: started with PYTHONFAULTHANDLER=1, a worker that
// gets SIGABRT has faulthandler write every thread's Python stack to its stderr before it dies.
// Native workers: gdb, where it is installed, attaches and prints every thread's backtrace. These
// read that text back.
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun::agent {

struct WorkerStack {
  std::string innermost;  // the main thread's innermost frame: "train.py:14 in load_batch"
  std::string text;       // the whole dump, every thread
};

// The last faulthandler dump in `output` (the end of a worker's stderr); nullopt when it holds
// none.
std::optional<WorkerStack> last_python_stack(std::string_view output);
// A faulthandler dump of every thread (faulthandler.dump_traceback(all_threads=True): what an
// in-process worker writes before it aborts its attempt after a hang); nullopt: no frame in it.
std::optional<WorkerStack> python_threads_stack(std::string_view dump);

// The main thread's innermost frame of worker `pid` in gdb's `thread apply all bt` output: the
// innermost in the program's own code (a source file outside /usr and outside the C library's
// sources), else the innermost with a source file, else the innermost; with every thread as text.
// nullopt when the output holds no frame (gdb could not attach).
std::optional<WorkerStack> gdb_stack(std::string_view output, int pid);

// Ranks grouped by their innermost frame, ranges folded, the groups in the order of their first
// rank: "rank 1: train.py:14 in stuck_in_data_loading; ranks 0, 2-7: graph.py:829 in backward".
std::string ranks_by_frame(const std::map<int, std::string>& frame_of_rank);

// The hang's culprit, for the summary's first line: where most ranks are in one place (the
// collective they wait in) and the rest elsewhere, the rest named with their node and where they
// are ("rank 5 on node 1 is in `load_batch` (data_loader.py:88); the 7 others are in `all_reduce`
// (distributed_c10d.py:2050)"); where all are in one place, that; where no place holds most ranks,
// that no rank stands out. `node_of_rank`: each rank's node rank (a rank missing: not said). Empty
// for fewer than two ranks.
std::string hang_culprit(const std::map<int, std::string>& frame_of_rank,
                         const std::map<int, int>& node_of_rank);

// A node's ranks' innermost frames as the text it shares with the other nodes after a hang (one
// "rank<TAB>frame" line each), and back. A line that is not one is skipped.
std::string frames_to_text(const std::map<int, std::string>& frame_of_rank);
std::map<int, std::string> frames_from_text(std::string_view text);

}  // namespace ddprun::agent
