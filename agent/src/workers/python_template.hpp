#pragma once
// Python's string.Template.safe_substitute, which torchrun applies to each worker argument (the
// ${local_rank} macro) and to --log-line-prefix-template: "$name" and "${name}" are replaced where
// `vars` has the name (ASCII letters, digits and '_', not starting with a digit; case-sensitive
// lookup), "$$" becomes "$", and anything else, an unknown name included, stays as written.
#include <map>
#include <string>
#include <string_view>

namespace ddprun::agent {

std::string safe_substitute(std::string_view text, const std::map<std::string, std::string>& vars);

}  // namespace ddprun::agent
