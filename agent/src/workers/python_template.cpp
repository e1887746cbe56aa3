#include "workers/python_template.hpp"

namespace ddprun::agent {
namespace {

bool starts_identifier(char c) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool continues_identifier(char c) { return starts_identifier(c) || (c >= '0' && c <= '9'); }

// The identifier at the start of `s` ("" when none).
std::string_view identifier(std::string_view s) {
  if (s.empty() || !starts_identifier(s[0])) return {};
  size_t n = 1;
  while (n < s.size() && continues_identifier(s[n])) ++n;
  return s.substr(0, n);
}

}  // namespace

std::string safe_substitute(std::string_view text, const std::map<std::string, std::string>& vars) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t dollar = text.find('$', i);
    if (dollar == std::string_view::npos) {
      out.append(text.substr(i));
      break;
    }
    out.append(text.substr(i, dollar - i));
    const std::string_view rest = text.substr(dollar + 1);
    if (rest.starts_with("$")) {
      out.push_back('$');
      i = dollar + 2;
      continue;
    }
    const bool braced = rest.starts_with("{");
    const std::string_view name = identifier(braced ? rest.substr(1) : rest);
    const bool closed = braced && rest.substr(1 + name.size()).starts_with("}");
    const size_t length = 1 + (braced ? name.size() + 2 : name.size());  // "$" + name (+ braces)
    const auto value = vars.find(std::string(name));
    if (!name.empty() && (!braced || closed) && value != vars.end()) {
      out.append(value->second);
      i = dollar + length;
    } else {
      out.push_back('$');
      i = dollar + 1;
    }
  }
  return out;
}

}  // namespace ddprun::agent
