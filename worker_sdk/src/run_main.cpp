#include "ddp/run_main.hpp"

#include <cxxabi.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <string>
#include <typeinfo>

namespace ddp {
namespace {

// Fixed storage for the signal handler, which may not allocate.
char g_error_file[4096];
char g_program[256];

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

void write_error_json(const std::string& message) {
  if (g_error_file[0] == '\0') return;
  const std::string m = json_escape(message);
  std::ofstream out(g_error_file, std::ios::trunc);
  out << R"({"message": {"message": ")" << m << R"(", "extraInfo": {"py_callstack": ")" << m
      << R"(", "timestamp": ")" << std::time(nullptr) << "\"}}}\n";
}

// Async-signal-safe pieces: appends to a fixed buffer.
struct SafeBuf {
  char data[1024];
  size_t len = 0;
  void add(const char* s) {
    while (*s && len < sizeof data) data[len++] = *s++;
  }
  void add_number(long v) {
    char digits[24];
    int n = 0;
    if (v == 0) digits[n++] = '0';
    while (v > 0 && n < 24) {
      digits[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    }
    while (n > 0 && len < sizeof data) data[len++] = digits[--n];
  }
};

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
  if (g_error_file[0] != '\0') {
    SafeBuf msg;
    msg.add("Fatal signal ");
    msg.add_number(sig);
    msg.add(" (");
    msg.add(signal_text(sig));
    msg.add(") in ");
    msg.add(g_program);
    msg.data[msg.len] = '\0';
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    SafeBuf json;
    json.add("{\"message\": {\"message\": \"");
    json.add(msg.data);
    json.add("\", \"extraInfo\": {\"py_callstack\": \"");
    json.add(msg.data);
    json.add("\", \"timestamp\": \"");
    json.add_number(now.tv_sec);
    json.add("\"}}}\n");
    const int fd = ::open(g_error_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      [[maybe_unused]] auto n = ::write(fd, json.data, json.len);
      ::close(fd);
    }
  }
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
    write_error_json(message);
    std::fprintf(stderr, "%s: %s\n", g_program, message.c_str());
    return 1;
  }
}

}  // namespace ddp
