// A worker stuck in uninterruptible sleep, as real as a test can make it without a broken device:
// the parent of a vfork() waits in the kernel (state D, wait channel kernel_clone on recent
// kernels) until its child execs or exits, and the child never does. A signal to the process group
// ends the child, and so the wait.
#include <unistd.h>

int main() {
  if (vfork() == 0) {
    for (;;) pause();
  }
  return 0;
}
