#include "ddprun/rendezvous/elastic_rendezvous.hpp"

#include <algorithm>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <nlohmann/json.hpp>

#include "ddprun/rendezvous/job_records.hpp"
#include "ddprun/store/errors.hpp"
#include "ddprun/store/local_address.hpp"
#include "job_keys.hpp"

namespace ddprun::rendezvous {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

ElasticRendezvous::ElasticRendezvous(asio::io_context& io, RendezvousConfig config,
                                     std::string node_id, std::shared_ptr<JobStore> store,
                                     std::unique_ptr<store::StoreThread> server)
    : JobSession(io.get_executor(), std::move(store)),
      config_(std::move(config)),
      node_id_(std::move(node_id)),
      server_(std::move(server)) {}

std::shared_ptr<ElasticRendezvous> ElasticRendezvous::create(
    asio::io_context& io, RendezvousConfig config, std::string node_id,
    std::shared_ptr<JobStore> store, std::unique_ptr<store::StoreThread> server) {
  return std::shared_ptr<ElasticRendezvous>(new ElasticRendezvous(
      io, std::move(config), std::move(node_id), std::move(store), std::move(server)));
}

ElasticRendezvous::~ElasticRendezvous() = default;

namespace {

// (Outside the coroutines: g++ 12 miscompiles braced initializer lists inside one.)
JobSession::Settings elastic_settings(const RendezvousConfig& c) {
  return {{"--nnodes", fmt::format("{}:{}", c.min_nodes, c.max_nodes)},
          {"--max_restarts", std::to_string(c.max_restarts)}};
}

// The addresses of round `r`'s members, from their presence records; empty where one does not say
// (an agent that predates them), which leaves the worker store open to every peer.
std::vector<boost::asio::ip::address> members_addresses(const Round& r,
                                                        const std::vector<KeyEvent>& records) {
  std::map<std::string, std::string> addr_of;
  for (const auto& e : records) {
    if (const auto node = records::parse_node(e.value)) {
      addr_of[std::string(keys::after(e.key, keys::kNodes))] = node->addr;
    }
  }
  std::vector<boost::asio::ip::address> out;
  if (r.members.empty()) {
    spdlog::warn("round {}: its record names no members: its worker store is open to every peer",
                 r.number);
  }
  for (const auto& member : r.members) {
    boost::system::error_code ec;
    const auto it = addr_of.find(member);
    const auto a = it == addr_of.end() ? boost::asio::ip::address()
                                       : boost::asio::ip::make_address(it->second, ec);
    if (it == addr_of.end() || ec) {
      spdlog::warn(
          "round {}: node {} did not say its address: its worker store is open to every "
          "peer",
          r.number, member);
      return {};
    }
    out.push_back(a);
  }
  return out;
}

// Round `r`'s worker store, open to `peers` (and loopback). (Outside the coroutines: g++ 12 warns
// of a mismatched delete of the coroutine frame that holds the options.)
std::unique_ptr<store::StoreThread> worker_store_server(
    const Round& r, std::vector<boost::asio::ip::address> peers) {
  store::ServerOptions options;
  options.expected_clients = static_cast<size_t>(r.world_size) * 2;  // torch 1.13: 2 each
  options.allowed_peers = std::move(peers);
  return std::make_unique<store::StoreThread>(options);
}

// What every agent follows besides its own keys.
WatchSet followed_by_all(const std::string& node_id) {
  WatchSet w;
  for (std::string_view k : {keys::kSettings, keys::kLeader, keys::kRound, keys::kRestarts,
                             keys::kClosed, keys::kMaster, keys::kInterrupt, keys::kFinished}) {
    w.keys.emplace_back(k);
  }
  w.keys.push_back(keys::key(keys::kPlace, node_id));
  return w;
}

// What the leader follows besides.
std::vector<std::string> followed_by_leader() {
  std::vector<std::string> prefixes;
  for (std::string_view p : {keys::kNodes, keys::kRounds, keys::kDone}) {
    prefixes.emplace_back(p);
  }
  return prefixes;
}

}  // namespace

asio::awaitable<void> ElasticRendezvous::join() {
  Settings settings = elastic_settings(config_);
  co_await agree_on(std::move(settings));
  addr_ = config_.local_addr.empty()
              ? store::local_address_towards(config_.endpoint_host, config_.endpoint_port)
              : config_.local_addr;
  co_await open(keys::key(keys::kNodes, node_id_),
                records::node_text(config_.nproc, config_.host, addr_), followed_by_all(node_id_));
  // Counters start at 0 (the first node creates them): compare-and-set never creates a key whose
  // expected value is not empty.
  const std::string round = co_await store().compare_set(std::string(keys::kRound), "", "0");
  round_ = std::max(round_, std::stoi(round));
  const std::string restarts = co_await store().compare_set(std::string(keys::kRestarts), "", "0");
  restarts_ = std::max(restarts_, std::stoi(restarts));
  // Every agent asks once: the first becomes the leader (and each knows the key is a claim).
  const std::string leader = co_await store().claim(std::string(keys::kLeader), node_id_);
  if (!leader.empty()) leader_ = leader;
  asio::co_spawn(executor(), leadership(), asio::detached);
}

records::Round ElasticRendezvous::parse_record(const std::string& text) {
  auto round = records::parse_round(text);
  if (!round) throw std::invalid_argument("a round's record is not one: " + text);
  return std::move(*round);
}

ElasticRendezvous::Placement ElasticRendezvous::parse_placement(const std::string& json) {
  const auto j = nlohmann::json::parse(json);
  Placement p;
  p.round = j.at("round").get<int>();
  p.spare = j.value("spare", false);
  p.node_rank = j.value("node_rank", 0);
  p.num_nodes = j.value("num_nodes", 0);
  p.base_rank = j.value("base_rank", 0);
  p.world_size = j.value("world_size", 0);
  p.restarts = j.value("restarts", 0);
  return p;
}

std::string ElasticRendezvous::placement_record(const records::Round& rec, int round,
                                                const std::string& id) {
  nlohmann::json j;
  j["round"] = round;
  const auto me = std::find(rec.participants.begin(), rec.participants.end(), id);
  if (me == rec.participants.end()) {
    j["spare"] = true;
    return j.dump();
  }
  const auto rank = static_cast<size_t>(me - rec.participants.begin());
  int base = 0, world = 0;
  for (size_t i = 0; i < rec.nproc.size(); ++i) {
    if (i < rank) base += rec.nproc[i];
    world += rec.nproc[i];
  }
  j["node_rank"] = rank;
  j["num_nodes"] = rec.participants.size();
  j["base_rank"] = base;
  j["world_size"] = world;
  j["restarts"] = rec.restarts;
  return j.dump();
}

ElasticRendezvous::Tagged ElasticRendezvous::parse_tagged(const std::string& value) {
  const auto space = value.find(' ');
  Tagged t;
  t.round = std::stoi(value.substr(0, space));
  if (space != std::string::npos) t.text = value.substr(space + 1);
  return t;
}

void ElasticRendezvous::on_event(const KeyEvent& e) {
  ++events_;
  const std::string& k = e.key;
  if (k.starts_with(keys::kNodes)) {
    ++membership_;
    const std::string id(keys::after(k, keys::kNodes));
    if (e.deleted) {
      nodes_.erase(id);
    } else {
      nodes_[id] = nproc_of_record(e.value);
    }
  } else if (k == keys::kLeader) {
    leader_ = e.deleted ? std::nullopt : std::optional<std::string>(e.value);
  } else if (e.deleted) {
    return;
  } else if (k == keys::kRound) {
    round_ = std::max(round_, std::stoi(e.value));
  } else if (k == keys::kRestarts) {
    restarts_ = std::max(restarts_, std::stoi(e.value));
  } else if (k == keys::kClosed) {
    closed_ = e.value;
  } else if (k == keys::kMaster) {
    master_ = parse_tagged(e.value);
  } else if (k == keys::kInterrupt) {
    interrupt_ = parse_tagged(e.value);
  } else if (k == keys::kFinished) {
    finished_ = std::max(finished_, std::stoi(e.value));
  } else if (k.starts_with(keys::kPlace)) {
    if (keys::after(k, keys::kPlace) == node_id_) place_ = parse_placement(e.value);
  } else if (k.starts_with(keys::kRounds)) {
    rounds_[std::stoi(std::string(keys::after(k, keys::kRounds)))] = parse_record(e.value);
  } else if (k.starts_with(keys::kReady)) {
    const auto [n, node] = keys::round_and_node(keys::after(k, keys::kReady));
    ready_[n].insert(node);
  } else if (k.starts_with(keys::kDone)) {
    const auto [n, node] = keys::round_and_node(keys::after(k, keys::kDone));
    done_[n].insert(node);
  }
}

// Survivors of the previous round keep their order (stable node ranks); newcomers follow in id
// order; the rest are spares.
std::string ElasticRendezvous::propose(int round) const {
  // Stable ranks: a node of the previous round keeps its place; a place whose node left goes to a
  // node that joined since (in the order of their ids), so that a replacement takes the lost
  // node's ranks and the survivors keep theirs; places left empty close up; further newcomers
  // follow.
  std::vector<std::optional<std::string>> places;
  std::set<std::string> before;
  if (auto prev = rounds_.find(round - 1); prev != rounds_.end()) {
    for (const auto& id : prev->second.participants) {
      before.insert(id);
      places.push_back(nodes_.contains(id) ? std::optional<std::string>(id) : std::nullopt);
    }
  }
  std::vector<std::string> newcomers;
  for (const auto& [id, _] : nodes_) {
    if (!before.contains(id)) newcomers.push_back(id);
  }
  auto next = newcomers.begin();
  std::vector<std::string> chosen;
  for (auto& place : places) {
    if (!place && next != newcomers.end()) place = *next++;
    if (place) chosen.push_back(*place);
  }
  chosen.insert(chosen.end(), next, newcomers.end());
  if (static_cast<int>(chosen.size()) > config_.max_nodes) chosen.resize(config_.max_nodes);
  std::vector<int> nproc;
  for (const auto& id : chosen) nproc.push_back(nodes_.at(id));
  return records::round_text(records::Round{chosen, nproc, restarts_});
}

bool ElasticRendezvous::ended(bool ran) {
  if (!closed_) return false;
  if (*closed_ == "failed") {
    ending_ = JobEnd{JobEnd::Kind::kRestartsExhausted, "no restarts remain"};
  } else if (*closed_ == "succeeded" && ran) {
    ending_ = JobEnd{JobEnd::Kind::kSucceeded, *closed_};
  } else {
    ending_ = JobEnd{JobEnd::Kind::kClosed, *closed_};
  }
  return true;
}

asio::awaitable<void> ElasticRendezvous::leadership() {
  const auto self = shared_from_this();  // the session outlives this coroutine
  try {
    for (;;) {
      co_await wait_until([this] { return !leader_ || leading(); }, Clock::time_point::max());
      if (!leader_) {
        const std::string holder = co_await store().claim(std::string(keys::kLeader), node_id_);
        if (!holder.empty()) leader_ = holder;
        continue;
      }
      co_await lead();
    }
  } catch (const std::exception& e) {
    spdlog::debug("rendezvous leadership ended: {}", e.what());  // the session ended
  }
}

asio::awaitable<void> ElasticRendezvous::lead() {
  spdlog::info("this node leads the job's rendezvous");
  checked_.reset();  // another leader may have acted meanwhile: look at everything again
  co_await follow(followed_by_leader());
  while (leading()) {
    const uint64_t seen = events_;
    const Clock::time_point next = co_await lead_step();
    co_await wait_until([&] { return events_ != seen || !leading(); }, next);
  }
}

std::string ElasticRendezvous::reason_to_end(int n, const records::Round& rec) const {
  const auto done = done_.find(n);
  for (const auto& id : rec.participants) {
    const bool said_done = done != done_.end() && done->second.contains(id);
    if (!nodes_.contains(id) && !said_done) {
      return fmt::format("node {} left the job (its agent died or was cut off)", id);
    }
  }
  if (static_cast<int>(rec.participants.size()) < config_.max_nodes &&
      nodes_.size() > rec.participants.size() && done == done_.end()) {
    return "a new node is waiting to join (scale-up)";
  }
  return "";
}

bool ElasticRendezvous::held_leadership(bool held) {
  if (!held && !std::exchange(deposed_, true)) {
    spdlog::warn(
        "this node no longer holds the job's leadership (its presence lapsed while it was paused "
        "or cut off, or another node took it): it writes nothing for the job as its leader until "
        "the store says who leads");
  }
  if (held) deposed_ = false;
  return held;
}

Clock::time_point ElasticRendezvous::after_refusal(Clock::time_point now) const {
  return now + config_.heartbeat_timeout / 4;
}

asio::awaitable<bool> ElasticRendezvous::write_as_leader(
    std::vector<std::pair<std::string, std::string>> entries) {
  co_return held_leadership(
      co_await store().set_all_holding(std::string(keys::kLeader), std::move(entries)));
}

asio::awaitable<bool> ElasticRendezvous::end_led_round(int n, std::string why, int restarts) {
  if (interrupt_.round != n) {
    std::vector<std::pair<std::string, std::string>> interrupt;
    interrupt.emplace_back(keys::kInterrupt, fmt::format("{} {}", n, why));
    if (!co_await write_as_leader(std::move(interrupt))) co_return false;
  }
  // A round a node flagged (a hang, a slow node replaced) spends a restart even where the leader
  // ends it first, for the flagged node leaving: its next round's restart count is the same
  // whichever comes first.
  co_await advance_round(n, round_flagged(n), restarts);
  co_return true;
}

asio::awaitable<Clock::time_point> ElasticRendezvous::lead_step() {
  const auto now = Clock::now();
  if (closed_) co_return Clock::time_point::max();
  const auto refused = after_refusal(now);
  const int n = round_;
  if (!rounds_.contains(n) && (place_.round == n || master_.round == n)) {
    // Round n formed, and its record is gone: the store restarted and the leader that knew it did
    // not come back. Nobody can tell its participants now; it ends, and the next round re-forms.
    const bool ended = co_await end_led_round(
        n,
        "the job's leader did not come back after the store restarted, and the round's record "
        "went with it",
        restarts_);
    co_return ended ? now : refused;
  }
  if (!rounds_.contains(n)) co_return co_await form_round(n, now);
  const records::Round& rec =
      rounds_.at(n);  // (map nodes stay put: no copy of an O(N) record per event)
  if (finished_ < n) {
    const auto done = done_.find(n);
    if (done != done_.end() && done->second.size() >= rec.participants.size() &&
        std::all_of(rec.participants.begin(), rec.participants.end(),
                    [&](const std::string& id) { return done->second.contains(id); })) {
      std::vector<std::pair<std::string, std::string>> finished;
      finished.emplace_back(keys::kFinished, std::to_string(n));
      co_return co_await write_as_leader(std::move(finished)) ? now : refused;
    }
  }
  // What follows depends on the membership and the round only: an exit barrier's stream of done/
  // events does not redo it, O(N) each.
  if (checked_ == std::make_pair(n, membership_)) co_return Clock::time_point::max();
  if (const std::string why = reason_to_end(n, rec); !why.empty()) {
    co_return co_await end_led_round(n, why, rec.restarts) ? now : refused;
  }
  co_return co_await place_nodes(n, rec) ? Clock::time_point::max() : refused;
}

// Round n, not formed yet: its record proposed once enough nodes are here and none is only
// kept by a store restart's grace (then `now`: look again), else when to look again.
asio::awaitable<Clock::time_point> ElasticRendezvous::form_round(int n, Clock::time_point now) {
  if (static_cast<int>(nodes_.size()) < config_.min_nodes) co_return Clock::time_point::max();
  // The last call gathers the first round (round 0: the round advances only from a formed one):
  // more nodes may come until MAX or last_call_timeout. A re-formed round (after a node left or
  // failed) starts at once; late arrivals scale it up.
  if (n == 0 && static_cast<int>(nodes_.size()) < config_.max_nodes) {
    if (!last_call_ || last_call_->first != n) {
      last_call_.emplace(n, now + config_.last_call_timeout);
    }
    if (now < last_call_->second) co_return last_call_->second;
  }
  // A node that only a store restart's grace keeps here may be cut off and still running an
  // older round: the round waits until it is heard from, or gone (within a heartbeat timeout;
  // either is an event). That counts the last round's participants too: an agent that rejoined
  // after the restart (expelled while paused) no longer counts such a node as present, though
  // the grace still holds it.
  const auto unconfirmed = [&](const std::string& id) {
    return store().unconfirmed(keys::key(keys::kNodes, id));
  };
  const bool in_grace =
      std::any_of(nodes_.begin(), nodes_.end(),
                  [&](const auto& node) { return unconfirmed(node.first); }) ||
      (!rounds_.empty() && std::any_of(rounds_.rbegin()->second.participants.begin(),
                                       rounds_.rbegin()->second.participants.end(), unconfirmed));
  if (in_grace) co_return Clock::time_point::max();
  const std::string key = keys::key(keys::kRounds, n);
  const std::string proposal = propose(n);
  const std::optional<std::string> decided =
      co_await store().compare_set_holding(std::string(keys::kLeader), key, "", proposal);
  if (!held_leadership(decided.has_value())) co_return after_refusal(now);
  rounds_[n] = parse_record(*decided);
  co_return now;  // look again: the world may have moved meanwhile
}

// Every present node learns its part in round n (`rec`): participants, and spares (a full round).
asio::awaitable<bool> ElasticRendezvous::place_nodes(int n, const records::Round& rec) {
  const uint64_t membership = membership_;
  std::vector<std::string> unplaced;
  for (const auto& [id, _] : nodes_) {
    if (auto it = placed_.find(id); it == placed_.end() || it->second != n) unplaced.push_back(id);
  }
  const auto placing = Clock::now();
  std::vector<std::pair<std::string, std::string>> placements;
  for (const auto& id : unplaced)
    placements.emplace_back(keys::key(keys::kPlace, id), placement_record(rec, n, id));
  if (!co_await write_as_leader(std::move(placements))) co_return false;
  for (const auto& id : unplaced) placed_[id] = n;
  checked_ = std::make_pair(n, membership);
  if (unplaced.size() > 1) {
    spdlog::info(
        "round {}: {} nodes placed ({} in the round) in {} ms", n, unplaced.size(),
        rec.participants.size(),
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - placing).count());
  }
  co_return true;
}

asio::awaitable<std::optional<Round>> ElasticRendezvous::next_round() {
  clear_expelled();
  for (;;) {
    if (restarts_ > config_.max_restarts && !closed_) co_await close("failed");
    if (ended(ran_)) co_return std::nullopt;
    // Expelled (paused, cut off): the store gives this node its presence back; it is a newcomer.
    if (!present() && !co_await wait_until([this] { return present() || closed_.has_value(); },
                                           Clock::now() + config_.join_timeout)) {
      throw store::StoreTimeout(fmt::format("this node could not rejoin the job within {} s",
                                            config_.join_timeout.count() / 1000));
    }
    const int n = round_;
    const bool placed =
        co_await wait_until([&] { return closed_ || round_ != n || place_.round == n; },
                            Clock::now() + config_.join_timeout);
    if (!placed) {
      const auto seconds = config_.join_timeout.count() / 1000;
      if (!leading()) {
        throw store::StoreTimeout(
            fmt::format("no round formed within {} s (the job needs at least {} nodes)", seconds,
                        config_.min_nodes));
      }
      if (nodes_.size() < static_cast<size_t>(config_.min_nodes)) {
        throw store::StoreTimeout(fmt::format("only {} of at least {} nodes joined within {} s",
                                              nodes_.size(), config_.min_nodes, seconds));
      }
      // (Enough nodes: the round was not formed, or this node's own part in it never came.)
      throw store::StoreTimeout(fmt::format(
          "round {} did not form or reach this node within {} s though {} nodes joined (the job "
          "needs at least {})",
          n, seconds, nodes_.size(), config_.min_nodes));
    }
    if (closed_ || round_ != n) continue;
    const Placement p = place_;
    if (p.spare) {
      spdlog::info("round {} is full: waiting as a spare", n);
      if (on_spare_) on_spare_();
      co_await wait_until([&] { return closed_ || round_ > n; }, Clock::time_point::max());
      continue;
    }
    Round r;
    r.number = n;
    r.restart_count = p.restarts;
    r.node_rank = p.node_rank;
    r.num_nodes = p.num_nodes;
    r.base_rank = p.base_rank;
    r.world_size = p.world_size;
    if (wants_members()) {
      // Only for an agent with a part that needs them: it costs the record.
      const std::string key = keys::key(keys::kRounds, n);
      for (auto& e : co_await store().read_prefix(key)) {
        if (e.key == key) r.members = parse_record(e.value).participants;
      }
    }
    ran_ = true;
    co_return r;
  }
}

asio::awaitable<std::optional<WorkerStoreAddress>> ElasticRendezvous::worker_store(Round r) {
  // This node's workers of earlier rounds are stopped: it says so. Node 0 publishes the round's
  // worker store, and so lets every member start its workers, only once every member has said so:
  // a member cut off from the store when the round formed, whose old workers still run, holds the
  // round back until its presence lapses and the round ends.
  const auto over = [&] { return round_ > r.number || closed_.has_value() || expelled(); };
  co_await store().set(keys::key(keys::kReady, r.number, node_id_), "");
  if (r.node_rank == 0) {
    if (!follows_ready_) {
      follows_ready_ = true;
      std::vector<std::string> prefixes;
      prefixes.emplace_back(keys::kReady);
      co_await follow(std::move(prefixes));
    }
    if (r.members.empty()) {  // (next_round() read them for an agent that wants them)
      const std::string round_key = keys::key(keys::kRounds, r.number);
      for (auto& e : co_await store().read_prefix(round_key)) {
        if (e.key == round_key) r.members = parse_record(e.value).participants;
      }
    }
    // Of the members only: a node of another membership of this number (put back after a store
    // restart) says nothing of this round's workers.
    const Scope round = Scope::of(r);
    const auto ready = [&] {
      const std::set<std::string>& said = ready_[r.number];
      return std::count_if(said.begin(), said.end(),
                           [&](const std::string& id) { return round.counts(id); });
    };
    const bool all = co_await wait_until([&] { return ready() >= r.num_nodes || over(); },
                                         Clock::now() + config_.join_timeout);
    ready_.erase(ready_.begin(), ready_.lower_bound(r.number));
    if (over()) co_return std::nullopt;
    if (!all) {
      // A member that never says so (it believes it is in another round, or hangs): this round
      // cannot start; the job goes on to the next one rather than failing here.
      co_await abandon_round(r, "not every node said that its earlier workers stopped");
      co_return std::nullopt;
    }
    // Every round gets a fresh worker store on a live node: no stale MASTER_ADDR, no stale keys;
    // open to the round's nodes only.
    const std::vector<KeyEvent> records = co_await store().read_prefix(std::string(keys::kNodes));
    round_server_.reset();
    round_server_ = worker_store_server(r, members_addresses(r, records));
    const std::string value = fmt::format("{} {}:{}", r.number, addr_, round_server_->port());
    co_await store().set(std::string(keys::kMaster), value);
  }
  // Node 0 may never publish: it died, was paused or cut off, or went on to a later round. The
  // round then ends (the leader sees the node go, or a later round forms), and so does this wait.
  const bool known = co_await wait_until([&] { return master_.round == r.number || over(); },
                                         Clock::now() + config_.join_timeout);
  if (master_.round != r.number && over()) co_return std::nullopt;
  if (!known) {
    co_await abandon_round(r, "node 0 did not publish the round's worker store");
    co_return std::nullopt;
  }
  const std::string v = master_.text;
  const auto colon = v.rfind(':');
  WorkerStoreAddress at;
  at.addr = v.substr(0, colon);
  at.port = std::stoi(v.substr(colon + 1));
  co_return at;
}

asio::awaitable<std::string> ElasticRendezvous::interruption(Round r) {
  clear_stop_request();
  std::string why;
  co_await wait_until(
      [&] {
        if (stop_requested()) return true;
        if (expelled()) return !(why = kExpelledReason).empty();
        if (closed_) return !(why = "the job was closed: " + *closed_).empty();
        if (const auto flag = peer_flag(r)) return !(why = flag->reason).empty();
        if (round_ > r.number) {
          // The leader says why it ended a round; a failure anywhere spends a restart instead.
          why = interrupt_.round == r.number ? interrupt_.text
                : restarts_ > r.restart_count
                    ? "another node's workers failed"
                    : fmt::format("the job went on to round {} without this node", round_);
          return true;
        }
        return false;
      },
      Clock::time_point::max());
  co_return why;
}

asio::awaitable<void> ElasticRendezvous::advance_round(int number, bool failed, int restarts) {
  if (failed) {
    const std::string now = co_await store().compare_set(
        std::string(keys::kRestarts), std::to_string(restarts), std::to_string(restarts + 1));
    restarts_ = std::max(restarts_, std::stoi(now));
  }
  const std::string now = co_await store().compare_set(
      std::string(keys::kRound), std::to_string(number), std::to_string(number + 1));
  round_ = std::max(round_, std::stoi(now));
  notify();
}

asio::awaitable<void> ElasticRendezvous::abandon_round(Round r, std::string why) {
  spdlog::warn("round {}: {} within the join timeout; the job goes on to a new round", r.number,
               why);
  co_await advance_round(r.number, false, r.restart_count);
}

asio::awaitable<void> ElasticRendezvous::end_round(Round r, bool failed) {
  // A round ended for a node's flag (a hang, a slow node replaced) is a failed one: it spends the
  // restart that the flagged node's own failure report spends, whichever of them comes first (else
  // the next round could form, from this node's end, before the restart was counted).
  co_await advance_round(r.number, failed || peer_flag(r).has_value() || round_flagged(r.number),
                         r.restart_count);
}

asio::awaitable<bool> ElasticRendezvous::exit_barrier(Round r) {
  const std::string key = keys::key(keys::kDone, r.number, node_id_);
  co_await store().set(key, "1");
  // The leader says when every participant is done; a peer whose agent is gone before it said
  // done never will, and the leader ends the round at once rather than at the timeout.
  co_await wait_until(
      [&] { return finished_ >= r.number || round_ > r.number || closed_.has_value(); },
      Clock::now() + config_.barrier_timeout);
  co_return finished_ >= r.number;
}

asio::awaitable<void> ElasticRendezvous::close(std::string why) {
  closed_ = co_await store().compare_set(std::string(keys::kClosed), "", why);
  ended(ran_);
  notify();
}

asio::awaitable<void> ElasticRendezvous::leave(bool graceful) {
  if (graceful && server_) {
    try {  // the store lives in this agent: it stays until the others have read the outcome
      std::vector<std::string> presence;
      presence.emplace_back(keys::kNodes);
      co_await follow(std::move(presence));
      co_await wait_until(
          [this] {
            return std::all_of(nodes_.begin(), nodes_.end(),
                               [this](const auto& n) { return n.first == node_id_; });
          },
          Clock::now() +
              std::min<std::chrono::milliseconds>(config_.join_timeout, std::chrono::seconds(30)));
    } catch (const std::exception&) {
    }
  }
  abandon();
}

std::string ElasticRendezvous::describe() const {
  if (config_.backend == Backend::kEtcdV3) {
    return fmt::format(
        "elastic {}:{} nodes, etcd at {} endpoint(s) from {}:{}, over its v3 API (etcd 3.4 and "
        "later)",
        config_.min_nodes, config_.max_nodes, config_.etcd_endpoints.size(), config_.endpoint_host,
        config_.endpoint_port);
  }
  return fmt::format("elastic {}:{} nodes, store {}:{}{}", config_.min_nodes, config_.max_nodes,
                     config_.endpoint_host, config_.endpoint_port, server_ ? " (hosted here)" : "");
}

void ElasticRendezvous::abandon() {
  leave_store();
  if (round_server_) round_server_->stop();
  if (server_) server_->stop();
}

}  // namespace ddprun::rendezvous
