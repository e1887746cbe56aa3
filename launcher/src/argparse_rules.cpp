#include "argparse_rules.hpp"

#include <algorithm>
#include <cctype>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launch_config.hpp"

namespace ddprun::launcher {
namespace {

// argparse's own -h/--help, the first option of every parser.
const OptionSpec kHelp{"-h,--help", "help", nullptr, "show this help message and exit"};
// ddprun's --version, an argparse "version" action (torchrun has none, so no torchrun command line
// means anything else by it).
const OptionSpec kVersion{"--version", "version", nullptr,
                          "show ddprun's version, commit and store dialects, and exit"};

// What one argument could be: an option by one of its spellings (with the value written into the
// same argument, if any), or nothing known (spec == nullptr).
struct Match {
  const OptionSpec* spec = nullptr;
  std::string spelling;
  std::optional<std::string> attached;  // the text after '=' or after a one-letter option
  bool after_equals = true;             // false: -r3, the value right after the letter
};

// argparse's name of an option in its messages: every spelling, joined by '/'.
std::string action_name(const OptionSpec& spec) {
  std::string names = spec.names;
  std::replace(names.begin(), names.end(), ',', '/');
  return names;
}

class Reader {
 public:
  explicit Reader(const std::vector<const OptionSpec*>& specs) {
    add(kHelp);
    add(kVersion);
    for (const OptionSpec* spec : specs) add(*spec);
  }

  ArgparseResult read(const std::vector<std::string>& args) {
    ArgparseResult out;
    size_t i = 0;
    while (i < args.size()) {
      if (args[i] == "--") {  // everything after it is the script and its arguments
        if (i + 1 < args.size()) take_script(args, i + 1, false, out);
        break;
      }
      const auto matches = classify(args[i]);
      if (!matches) {
        take_script(args, i, true, out);
        break;
      }
      i = consume(args, i, *matches, out);
    }
    return out;
  }

 private:
  struct Spelling {
    std::string name;
    const OptionSpec* spec;
  };

  void add(const OptionSpec& spec) {
    std::string_view names = spec.names;
    while (!names.empty()) {
      const size_t comma = names.find(',');
      spellings_.push_back({std::string(names.substr(0, comma)), &spec});
      names = comma == std::string_view::npos ? std::string_view() : names.substr(comma + 1);
    }
  }

  const Spelling* exact(std::string_view name) const {
    const auto it = std::find_if(spellings_.begin(), spellings_.end(),
                                 [&](const Spelling& s) { return s.name == name; });
    return it == spellings_.end() ? nullptr : &*it;
  }

  // argparse's _parse_optional: nullopt where the argument is no option (it starts the script);
  // else the options it could be, or one Match without a spec where it is an unknown option.
  std::optional<std::vector<Match>> classify(const std::string& arg) const {
    if (arg.empty() || arg[0] != '-') return std::nullopt;
    if (const Spelling* s = exact(arg)) return std::vector<Match>{{s->spec, s->name, {}, true}};
    if (arg.size() == 1) return std::nullopt;
    const size_t equals = arg.find('=');
    if (equals != std::string::npos) {
      if (const Spelling* s = exact(std::string_view(arg).substr(0, equals))) {
        return std::vector<Match>{{s->spec, s->name, arg.substr(equals + 1), true}};
      }
    }
    if (auto matches = prefix_matches(arg); !matches.empty()) return matches;
    const bool negative_number =
        std::isdigit(static_cast<unsigned char>(arg[1])) ||
        (arg[1] == '.' && arg.size() > 2 && std::isdigit(static_cast<unsigned char>(arg[2])));
    if (negative_number || arg.find(' ') != std::string::npos) return std::nullopt;
    return std::vector<Match>{{nullptr, arg, {}, true}};
  }

  // argparse's _get_option_tuples: the spellings `arg` (up to a '=') is a prefix of, and for a
  // single dash the one-letter option its first letter names. Narrowed to torchrun's options where
  // any of them fits.
  std::vector<Match> prefix_matches(const std::string& arg) const {
    const size_t equals = arg.find('=');
    const std::string prefix = arg.substr(0, equals);
    std::optional<std::string> value;
    if (equals != std::string::npos) value = arg.substr(equals + 1);
    const bool long_form = arg[1] == '-';
    std::vector<Match> out;
    for (const Spelling& s : spellings_) {
      if (!long_form && s.name == arg.substr(0, 2)) {
        out.push_back({s.spec, s.name, arg.substr(2), false});
      } else if (s.name.starts_with(prefix)) {
        out.push_back({s.spec, s.name, value, true});
      }
    }
    const bool torchruns =
        std::any_of(out.begin(), out.end(), [](const Match& m) { return !m.spec->ddprun_only; });
    if (torchruns) {
      std::erase_if(out, [](const Match& m) { return m.spec->ddprun_only; });
    }
    return out;
  }

  // argparse's consume_optional for the option at args[i]; returns the index after it and its
  // value.
  size_t consume(const std::vector<std::string>& args, size_t i, const std::vector<Match>& matches,
                 ArgparseResult& out) {
    if (matches.size() > 1) {
      std::vector<std::string> names;
      for (const Match& m : matches) names.push_back(m.spelling);
      throw UsageError(
          fmt::format("ambiguous option: {} could match {}", args[i], fmt::join(names, ", ")));
    }
    Match m = matches.front();
    if (m.spec == nullptr) {
      out.unrecognized.push_back(args[i]);
      return i + 1;
    }
    std::vector<GivenOption> taken;
    size_t next = i + 1;
    for (;;) {
      const bool takes_value = m.spec->metavar != nullptr;
      if (!m.attached) {
        if (takes_value) {
          if (next >= args.size() || args[next] == "--" || classify(args[next])) {
            throw UsageError(
                fmt::format("argument {}: expected one argument", action_name(*m.spec)));
          }
          taken.push_back({m.spec, args[next++]});
        } else {
          taken.push_back({m.spec, ""});
        }
        break;
      }
      const std::string& value = *m.attached;
      if (!takes_value && m.spelling[1] != '-' && !value.empty()) {
        // -mt3: more one-letter options in the same argument.
        if (m.after_equals || value[0] == '-') throw ignored(*m.spec, value);
        taken.push_back({m.spec, ""});
        const std::string letter = std::string("-") + value[0];
        const Spelling* s = exact(letter);
        if (s == nullptr) {
          out.unrecognized.push_back("-" + value);
          break;
        }
        const std::string rest = value.substr(1);
        m = {s->spec, s->name, {}, true};
        if (!rest.empty()) {
          m.after_equals = rest[0] == '=';
          m.attached = m.after_equals ? rest.substr(1) : rest;
        }
        continue;
      }
      if (!takes_value) throw ignored(*m.spec, value);
      taken.push_back({m.spec, value});
      break;
    }
    for (GivenOption& option : taken) {
      if (option.spec == &kHelp) throw HelpRequested{};
      if (option.spec == &kVersion) throw VersionRequested{};
      out.options.push_back(std::move(option));
    }
    return next;
  }

  static UsageError ignored(const OptionSpec& spec, const std::string& value) {
    return UsageError(
        fmt::format("argument {}: ignored explicit argument '{}'", action_name(spec), value));
  }

  // The script at args[i] and the rest after it, without a `--` right after it when no `--` came
  // before (argparse's training_script takes the dashes around it and drops the first).
  void take_script(const std::vector<std::string>& args, size_t i, bool drop_dashes,
                   ArgparseResult& out) {
    out.training_script = args[i];
    size_t rest = i + 1;
    if (drop_dashes && rest < args.size() && args[rest] == "--") ++rest;
    out.training_script_args.assign(args.begin() + static_cast<std::ptrdiff_t>(rest), args.end());
  }

  std::vector<Spelling> spellings_;
};

}  // namespace

void ArgparseResult::check_complete() const {
  if (!training_script) throw UsageError("the following arguments are required: training_script");
  if (!unrecognized.empty()) {
    throw UsageError(fmt::format("unrecognized arguments: {}", fmt::join(unrecognized, " ")));
  }
}

ArgparseResult parse_like_argparse(const std::vector<std::string>& args,
                                   const std::vector<const OptionSpec*>& specs) {
  return Reader(specs).read(args);
}

}  // namespace ddprun::launcher
