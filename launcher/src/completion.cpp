#include "completion.hpp"

#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "option_table.hpp"

namespace ddprun::launcher {
namespace {

std::vector<std::string> spellings(const OptionSpec& spec) {
  std::vector<std::string> out;
  std::string_view names = spec.names;
  while (!names.empty()) {
    const size_t comma = names.find(',');
    out.emplace_back(names.substr(0, comma));
    names = comma == std::string_view::npos ? std::string_view() : names.substr(comma + 1);
  }
  return out;
}

std::vector<const OptionSpec*> public_options() {
  std::vector<const OptionSpec*> out;
  for (const OptionSpec& spec : option_table()) {
    if (std::string_view(spec.dest) != "head_control") out.push_back(&spec);
  }
  return out;
}

std::string bash_script() {
  std::vector<std::string> words{"-h", "--help"};
  std::string cases;
  for (const OptionSpec* spec : public_options()) {
    const auto names = spellings(*spec);
    words.insert(words.end(), names.begin(), names.end());
    if (!spec->choices.empty()) {
      cases += fmt::format(
          "    {})\n      COMPREPLY=($(compgen -W \"{}\" -- \"$cur\"))\n      return ;;\n",
          fmt::join(names, "|"), fmt::join(spec->choices, " "));
    }
  }
  return fmt::format(
      "# bash completion for ddprun (ddprun --print-completion bash)\n"
      "_ddprun() {{\n"
      "  local cur=\"${{COMP_WORDS[COMP_CWORD]}}\" prev=\"${{COMP_WORDS[COMP_CWORD-1]}}\"\n"
      "  case \"$prev\" in\n{}  esac\n"
      "  if [[ $cur == -* ]]; then\n"
      "    COMPREPLY=($(compgen -W \"{}\" -- \"$cur\"))\n"
      "  else\n"
      "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
      "  fi\n"
      "}}\n"
      "complete -o default -F _ddprun ddprun\n",
      cases, fmt::join(words, " "));
}

// zsh's _arguments specs: the help's first clause, with the characters _arguments reads escaped.
std::string zsh_text(std::string_view help) {
  help = help.substr(0, std::min(help.find(';'), help.find(':')));
  std::string out;
  for (char ch : help) {
    if (ch == '[' || ch == ']' || ch == '\\' || ch == ':') out += '\\';
    if (ch == '\'') {
      out += "'\\''";
      continue;
    }
    out += ch;
  }
  return out;
}

std::string zsh_script() {
  std::string specs = "  '(- *)'{-h,--help}'[show the options and exit]' \\\n";
  for (const OptionSpec* spec : public_options()) {
    for (const std::string& name : spellings(*spec)) {
      const std::string text = zsh_text(spec->help);
      if (spec->metavar == nullptr) {
        specs += fmt::format("  '{}[{}]' \\\n", name, text);
      } else if (!spec->choices.empty()) {
        specs += fmt::format("  '{}=[{}]:{}:({})' \\\n", name, text, spec->dest,
                             fmt::join(spec->choices, " "));
      } else {
        specs += fmt::format("  '{}=[{}]:{}:_files' \\\n", name, text, spec->dest);
      }
    }
  }
  return "#compdef ddprun\n# zsh completion for ddprun (ddprun --print-completion zsh)\n"
         "_arguments -s \\\n" +
         specs + "  ':training script:_files' \\\n  '*::script arguments:_files'\n";
}

std::string tcsh_script() {
  std::vector<std::string> words{"h", "-help"};
  std::string values;
  for (const OptionSpec* spec : public_options()) {
    for (const std::string& name : spellings(*spec)) {
      words.push_back(name.substr(1));  // tcsh's c/-/ pattern consumes the first dash
      if (!spec->choices.empty()) {
        values += fmt::format(" 'n/{}/({})/'", name, fmt::join(spec->choices, " "));
      }
    }
  }
  return fmt::format(
      "# tcsh completion for ddprun (ddprun --print-completion tcsh)\n"
      "complete ddprun{} 'c/-/({})/' 'p/*/f/'\n",
      values, fmt::join(words, " "));
}

}  // namespace

std::string completion_script(const std::string& shell) {
  if (shell == "bash") return bash_script();
  if (shell == "zsh") return zsh_script();
  if (shell == "tcsh") return tcsh_script();
  return "";
}

}  // namespace ddprun::launcher
