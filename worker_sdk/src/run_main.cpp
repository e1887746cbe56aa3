#include "ddp/run_main.hpp"

#include <cxxabi.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <string>
#include <typeinfo>
#include <vector>

namespace ddp {
namespace {

// Fixed storage for the signal handler, which may not allocate.
char g_error_file[4096];
char g_program[256];

// Appends to a caller's fixed buffer, never allocating (the fatal-signal handler uses it).
struct SafeBuf {
  char* data;
  size_t cap;
  size_t len = 0;
  void add(const char* s) {
    while (*s && len < cap) data[len++] = *s++;
  }
  // `s` as a JSON string's contents.
  void add_escaped(const char* s) {
    static const char kHex[] = "0123456789abcdef";
    for (; *s; ++s) {
      const auto c = static_cast<unsigned char>(*s);
      if (c == '"' || c == '\\') {
        const char pair[] = {'\\', static_cast<char>(c), '\0'};
        add(pair);
      } else if (c == '\n') {
        add("\\n");
      } else if (c == '\t') {
        add("\\t");
      } else if (c < 0x20) {
        const char code[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15], '\0'};
        add(code);
      } else {
        const char one[] = {static_cast<char>(c), '\0'};
        add(one);
      }
    }
  }
  void add_number(long v) {
    char digits[24];
    int n = 0;
    if (v == 0) digits[n++] = '0';
    while (v > 0 && n < 24) {
      digits[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    }
    while (n > 0 && len < cap) data[len++] = digits[--n];
  }
};

// torch's error file ({"message": {"message", "extraInfo": {"py_callstack", "timestamp"}}}) with
// `message` in both texts, built in `buf` (6 bytes a character is the most escaping takes) and
// written over TORCHELASTIC_ERROR_FILE. Async-signal-safe.
void write_error_file(const char* message, char* buf, size_t cap) {
  if (g_error_file[0] == '\0') return;
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  SafeBuf json{buf, cap};
  json.add("{\"message\": {\"message\": \"");
  json.add_escaped(message);
  json.add("\", \"extraInfo\": {\"py_callstack\": \"");
  json.add_escaped(message);
  json.add("\", \"timestamp\": \"");
  json.add_number(now.tv_sec);
  json.add("\"}}}\n");
  const int fd = ::open(g_error_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  [[maybe_unused]] auto n = ::write(fd, json.data, json.len);
  ::close(fd);
}

const char* signal_text(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
  }
  return "signal";
}

void on_fatal_signal(int sig) {
  char text[512];
  SafeBuf msg{text, sizeof text - 1};
  msg.add("Fatal signal ");
  msg.add_number(sig);
  msg.add(" (");
  msg.add(signal_text(sig));
  msg.add(") in ");
  msg.add(g_program);
  text[msg.len] = '\0';
  char json[4096];
  write_error_file(text, json, sizeof json);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

std::string describe_current_exception() {
  const std::type_info* type = abi::__cxa_current_exception_type();
  std::string name = "unknown exception";
  if (type != nullptr) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(type->name(), nullptr, nullptr, &status);
    name = status == 0 && demangled ? demangled : type->name();
    std::free(demangled);
  }
  try {
    throw;
  } catch (const std::exception& e) {
    return name + ": " + e.what();
  } catch (...) {
    return name;
  }
}

}  // namespace

int run_main(int argc, char** argv, const std::function<int(int, char**)>& fn) {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  std::snprintf(g_error_file, sizeof g_error_file, "%s", path ? path : "");
  const char* slash = argc > 0 ? std::strrchr(argv[0], '/') : nullptr;
  std::snprintf(g_program, sizeof g_program, "%s", slash ? slash + 1 : argc > 0 ? argv[0] : "?");
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::signal(sig, on_fatal_signal);
  try {
    return fn(argc, argv);
  } catch (...) {
    const std::string message = describe_current_exception();
    std::vector<char> json(6 * message.size() + 256);
    write_error_file(message.c_str(), json.data(), json.size());
    std::fprintf(stderr, "%s: %s\n", g_program, message.c_str());
    return 1;
  }
}

}  // namespace ddp
