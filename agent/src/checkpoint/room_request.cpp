#include "checkpoint/room_request.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <fstream>
#include <string>
#include <system_error>

namespace ddprun::agent {
namespace {
std::filesystem::path request_of(const std::filesystem::path& folder, int local_rank) {
  return folder / (".room-" + std::to_string(local_rank));
}

std::filesystem::path grant_of(const std::filesystem::path& folder, int local_rank) {
  return folder / (".room-" + std::to_string(local_rank) + ".granted");
}

void remove_file(const std::filesystem::path& file) {
  std::error_code ignored;
  std::filesystem::remove(file, ignored);
}

// A file `file` of `bytes` bytes, its memory reserved; none where the file system refuses it.
void hold(const std::filesystem::path& file, uint64_t bytes) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const bool held = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)) == 0;
  ::close(fd);
  if (!held) remove_file(file);
}
}  // namespace

std::optional<uint64_t> room_wanted(const std::filesystem::path& folder, int local_rank) {
  std::ifstream in(request_of(folder, local_rank));
  std::string text;
  if (!in || !std::getline(in, text)) return std::nullopt;
  uint64_t bytes = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), bytes);
  if (ec != std::errc() || end == text.data()) {  // not a request: answered (removed) as one
    remove_file(request_of(folder, local_rank));
    return std::nullopt;
  }
  return bytes;
}

void room_answered(const std::filesystem::path& folder, int local_rank, uint64_t granted) {
  if (granted > 0) hold(grant_of(folder, local_rank), granted);
  remove_file(request_of(folder, local_rank));
}

void room_grant_released(const std::filesystem::path& folder, int local_rank) {
  remove_file(grant_of(folder, local_rank));
}

void room_withdrawn(const std::filesystem::path& folder, int local_rank) {
  remove_file(request_of(folder, local_rank));
}

}  // namespace ddprun::agent
