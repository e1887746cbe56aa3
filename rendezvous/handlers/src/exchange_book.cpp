#include "ddprun/rendezvous/exchange_book.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "job_keys.hpp"

namespace ddprun::rendezvous {

std::string ExchangeBook::value_key(const Scope& scope, std::string_view topic,
                                    std::string_view node) {
  return fmt::format("{}{}/{}/{}", keys::kExchange, scope.text(), topic, node);
}

std::string ExchangeBook::values_prefix(const Scope& scope, std::string_view topic) {
  return fmt::format("{}{}/{}/", keys::kExchange, scope.text(), topic);
}

std::string ExchangeBook::flag_key(const Scope& scope, std::string_view topic) {
  return fmt::format("{}{}/{}", keys::kFlags, scope.text(), topic);
}

std::string ExchangeBook::flag_text(const Flag& f) {
  return nlohmann::json{{"node", f.node}, {"reason", f.reason}, {"detail", f.detail}}.dump();
}

namespace {

// "<scope>/<last>" split at its last '/': the scope text and the last part.
std::pair<std::string, std::string> split_last(std::string_view rest) {
  const auto slash = rest.rfind('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == rest.size()) {
    throw std::invalid_argument("no scope and name in it");
  }
  return {std::string(rest.substr(0, slash)), std::string(rest.substr(slash + 1))};
}

}  // namespace

bool ExchangeBook::apply(std::string_view key, const std::string& value, bool deleted) {
  if (key.starts_with(keys::kExchange)) {
    if (deleted) return true;  // values are never taken back
    const auto [scope_topic, node] = split_last(keys::after(key, keys::kExchange));
    const auto [scope, topic] = split_last(scope_topic);
    values_[scope][topic][node] = value;
    return true;
  }
  if (key.starts_with(keys::kFlags)) {
    if (deleted) return true;
    const auto [scope, topic] = split_last(keys::after(key, keys::kFlags));
    const auto j = nlohmann::json::parse(value);
    Flag f{j.at("node").get<std::string>(), j.at("reason").get<std::string>(),
           j.value("detail", std::string())};
    flags_[scope].insert_or_assign(topic, std::move(f));  // the store's is the first raise
    return true;
  }
  return false;
}

void ExchangeBook::put_value(const Scope& scope, std::string_view topic, std::string_view node,
                             std::string value) {
  values_[scope.text()][std::string(topic)][std::string(node)] = std::move(value);
}

const ExchangeBook::ByNode* ExchangeBook::find(const Scope& scope, std::string_view topic) const {
  const auto s = values_.find(scope.text());
  if (s == values_.end()) return nullptr;
  const auto t = s->second.find(topic);
  return t == s->second.end() ? nullptr : &t->second;
}

std::vector<std::string> ExchangeBook::values(const Scope& scope, std::string_view topic) const {
  std::vector<std::string> out;
  if (const ByNode* by_node = find(scope, topic)) {
    for (const auto& [node, v] : *by_node) {
      if (scope.counts(node)) out.push_back(v);
    }
  }
  return out;
}

std::size_t ExchangeBook::count(const Scope& scope, std::string_view topic) const {
  const ByNode* by_node = find(scope, topic);
  if (by_node == nullptr) return 0;
  return static_cast<std::size_t>(std::count_if(
      by_node->begin(), by_node->end(), [&](const auto& v) { return scope.counts(v.first); }));
}

void ExchangeBook::put_flag(const Scope& scope, std::string_view topic, Flag f) {
  flags_[scope.text()].try_emplace(std::string(topic), std::move(f));
}

std::optional<Flag> ExchangeBook::flag(const Scope& scope, std::string_view topic) const {
  const auto s = flags_.find(scope.text());
  if (s == flags_.end()) return std::nullopt;
  const auto t = s->second.find(topic);
  if (t == s->second.end() || !scope.counts(t->second.node)) return std::nullopt;
  return t->second;
}

std::optional<Flag> ExchangeBook::peer_flag(const Scope& scope, std::string_view self) const {
  const auto s = flags_.find(scope.text());
  if (s == flags_.end()) return std::nullopt;
  for (const auto& [topic, f] : s->second) {
    if (f.node != self && scope.counts(f.node)) return f;
  }
  return std::nullopt;
}

bool ExchangeBook::flagged(const Scope& scope) const {
  const auto s = flags_.find(scope.text());
  return s != flags_.end() && !s->second.empty();
}

}  // namespace ddprun::rendezvous
