#pragma once
// What one node knows of the round-scoped exchange (Rendezvous::publish, raise): every value and
// flag seen, as the store's keys say. The key layout, under the job's prefix:
//   exchange/<scope>/<topic>/<node>   a node's value for a topic ("<scope>" as Scope::text())
//   flags/<scope>/<topic>             {"node", "reason", "detail"}: the first raise of a flag
// Handlers over a store feed it the keys they see; the single-node handler writes it directly.
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/rendezvous/rendezvous.hpp"

namespace ddprun::rendezvous {

class ExchangeBook {
 public:
  static std::string value_key(const Scope& scope, std::string_view topic, std::string_view node);
  // What every value of `topic` in `scope` is under (for following them).
  static std::string values_prefix(const Scope& scope, std::string_view topic);
  static std::string flag_key(const Scope& scope, std::string_view topic);
  static std::string flag_text(const Flag& f);

  // Takes a store key and its value; false where the key is not the exchange's. Throws
  // std::exception for an exchange key or flag that is malformed.
  bool apply(std::string_view key, const std::string& value, bool deleted);
  void put_value(const Scope& scope, std::string_view topic, std::string_view node,
                 std::string value);
  // The values of `topic` in `scope` of the nodes that count there (Scope::counts), in node id
  // order, and how many.
  std::vector<std::string> values(const Scope& scope, std::string_view topic) const;
  std::size_t count(const Scope& scope, std::string_view topic) const;
  // Records `f` unless the flag is raised already (the first raise stays).
  void put_flag(const Scope& scope, std::string_view topic, Flag f);
  // The flag `topic` in `scope`, where a node that counts there raised it.
  std::optional<Flag> flag(const Scope& scope, std::string_view topic) const;
  // A flag in `scope` raised by a node other than `self` that counts there, if any (the first by
  // topic).
  std::optional<Flag> peer_flag(const Scope& scope, std::string_view self) const;
  // Whether any node raised a flag in `scope`.
  bool flagged(const Scope& scope) const;

 private:
  // scope text -> topic -> node -> value; scope text -> topic -> flag.
  using ByNode = std::map<std::string, std::string>;
  const ByNode* find(const Scope& scope, std::string_view topic) const;
  std::map<std::string, std::map<std::string, ByNode, std::less<>>, std::less<>> values_;
  std::map<std::string, std::map<std::string, Flag, std::less<>>, std::less<>> flags_;
};

}  // namespace ddprun::rendezvous
