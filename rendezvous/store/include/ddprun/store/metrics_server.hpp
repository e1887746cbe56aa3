#pragma once
// Prometheus' text exposition at GET /metrics, served on the caller's io_context (Boost.Beast) by
// ddprund (--metrics-port) and the agent (--metrics_port). Every socket operation is asynchronous
// and bounded (a request must arrive within 10 s, 16 KiB at most), so a slow or hostile scraper
// never holds up the store or the agent it lives beside. One request per connection.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

namespace ddprun::store {

// Where metrics are served unless an address is given: this host only.
inline constexpr const char* kDefaultMetricsAddress = "127.0.0.1";

class MetricsServer {
 public:
  // Listens on `address`:`port` (a numeric address; "::" every address; port 0: the OS picks,
  // port() tells) and answers GET /metrics with render()'s text, called on the io_context at each
  // scrape. Throws StoreError when the address is not one or cannot be bound.
  MetricsServer(boost::asio::io_context& io, const std::string& address, uint16_t port,
                std::function<std::string()> render);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  uint16_t port() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// Prometheus text for one sample: "# HELP", "# TYPE" (once per name, when `help` is not empty) and
// the line `name{labels} value`.
std::string prometheus_sample(const std::string& name, const std::string& type,
                              const std::string& help, double value,
                              const std::string& labels = "");

}  // namespace ddprun::store
