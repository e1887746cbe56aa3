#pragma once
// Asks an etcd cluster's members whether they have a live leader (see etcd_leader_vote.hpp): what
// a node whose lease renewals go unanswered does before it takes its lease for lost.
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>

#include "etcd_client.hpp"
#include "etcd_leader_vote.hpp"

namespace ddprun::rendezvous::etcd {

class LeadershipProbe {
 public:
  // `tls`: null for plain HTTP.
  LeadershipProbe(boost::asio::any_io_executor ex, std::vector<Endpoint> endpoints,
                  std::shared_ptr<boost::asio::ssl::context> tls);

  // Learns the cluster's members (how many, and which endpoint is which) from its member list,
  // through `client`. Until then, or where it failed, the endpoints are taken for the whole
  // cluster.
  boost::asio::awaitable<void> learn_members(Client& client, Clock::time_point deadline);

  // Asks every endpoint for its status at once, each on a connection of its own, and waits for the
  // answers until they settle the verdict, or until `deadline`: majority_without_live_leader of
  // what came by then.
  boost::asio::awaitable<bool> no_live_leader(Clock::time_point deadline);

 private:
  boost::asio::any_io_executor ex_;
  std::vector<Endpoint> endpoints_;
  std::shared_ptr<boost::asio::ssl::context> tls_;
  std::vector<std::string> member_ids_;  // per endpoint; empty: not known
  size_t cluster_size_;
};

}  // namespace ddprun::rendezvous::etcd
