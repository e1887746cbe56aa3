// Token::from_file: reading a secret or a token from the file an operator gave.
#include <sys/stat.h>

#include <cctype>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddprun/store/auth.hpp"
#include "ddprun/store/errors.hpp"

namespace ddprun::store {

Token Token::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw StoreError(fmt::format("cannot read the token file {}", path));
  std::ostringstream text;
  text << in.rdbuf();
  std::string bytes = text.str();
  while (!bytes.empty() && std::isspace(static_cast<unsigned char>(bytes.back()))) bytes.pop_back();
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    spdlog::warn("the token file {} can be read by others than its owner (chmod 600 {})", path,
                 path);
  }
  try {
    return Token(std::move(bytes));
  } catch (const StoreError& e) {
    throw StoreError(fmt::format("the token file {}: {}", path, e.what()));
  }
}

}  // namespace ddprun::store
