#pragma once
// A worker's heartbeat channel for hang detection: a file of 8 bytes, one per worker, named by
// DDPRUN_HEARTBEAT_FILE in its environment. The worker beats by changing it: a counter written
// through a shared mapping (libddp's ddp::heartbeat(), the wheel's ddprun.heartbeat module, a few
// lines of any language: no system call per beat), or by touching it (a shell's `touch`). Which
// worker beat is which file changed, so a beat carries no claim of identity to trust. The agent
// reads it on its own schedule; a beat costs the agent nothing.
//
// The counter's top bit says the worker's program has ended (its interpreter is exiting): ddprun's
// warm interpreter sets it in a worker it forked once every exit handler has run. Setting it is not
// a beat. (A counter never reaches it; a worker that writes 8 arbitrary bytes may.)
#include <cstdint>
#include <string>

#include <sys/types.h>

namespace ddprun::agent {

class HeartbeatFile {
 public:
  // Creates the file (mode 0600, 8 zero bytes), replacing what is there. Throws std::system_error.
  explicit HeartbeatFile(std::string path);
  // Removes it.
  ~HeartbeatFile();
  HeartbeatFile(const HeartbeatFile&) = delete;
  HeartbeatFile& operator=(const HeartbeatFile&) = delete;

  const std::string& path() const { return path_; }
  // Whether the worker beat since the last call: the counter, the size or the modification time
  // changed.
  bool beat();
  // Whether the worker said, by the last call to beat(), that its program has ended.
  bool ended() const { return ended_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t counter_ = 0;  // without the top bit
  bool ended_ = false;
  off_t size_ = 8;
  int64_t mtime_ns_ = 0;
};

}  // namespace ddprun::agent
