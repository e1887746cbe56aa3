// ddprund: the standalone rendezvous store daemon. Foreground; logs to stderr; prints the bound
// port alone on the first line of stdout (useful with --port 0); exits 0 on SIGTERM or SIGINT.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "ddprun/store/errors.hpp"
#include "ddprun/store/metrics_server.hpp"
#include "ddprun/store/process_setup.hpp"
#include "ddprun/store/store_server.hpp"
#include "ddprun/store/version.hpp"
#include "store_metrics.hpp"

namespace {

using ddprun::store::ServerOptions;

// The command line, as given.
struct DaemonFlags {
  ServerOptions options;
  std::string log_level = "info";
  uint64_t partial_timeout_ms = ServerOptions{}.partial_request_timeout.count();
  std::optional<uint16_t> metrics_port;
  std::string metrics_addr = ddprun::store::kDefaultMetricsAddress;
  std::string token_file;
  ddprun::store::TlsFiles tls;
};

void add_options(CLI::App& app, DaemonFlags& f) {
  app.add_option("--host", f.options.host, "Address to listen on (default: every address)");
  app.add_option("--port", f.options.port, "Port to listen on; 0 picks a free one")->required();
  app.add_option("--max-connections", f.options.max_connections, "Open connections at most")
      ->capture_default_str();
  app.add_option("--max-key-bytes", f.options.limits.max_key_bytes, "Longest key accepted")
      ->capture_default_str();
  app.add_option("--max-value-bytes", f.options.limits.max_value_bytes, "Largest value accepted")
      ->capture_default_str();
  app.add_option("--max-keys-per-request", f.options.limits.max_keys_per_request,
                 "Most keys in one CHECK/WAIT/MULTI_GET/MULTI_SET")
      ->capture_default_str();
  app.add_option("--max-pending-output-bytes", f.options.max_pending_output_bytes,
                 "Replies queued for a client that does not read them, at most")
      ->capture_default_str();
  app.add_option("--max-buffered-bytes", f.options.max_buffered_bytes,
                 "Partial requests and queued replies of every connection together, at most; "
                 "beyond it the connection that holds the most is closed")
      ->capture_default_str();
  app.add_option("--partial-request-timeout-ms", f.partial_timeout_ms,
                 "Close a connection whose request is not complete this long after its first "
                 "bytes, or that does not read its replies for this long")
      ->capture_default_str();
  app.add_option("--listen-backlog", f.options.listen_backlog,
                 "Connections queued before accept (the kernel caps it at net.core.somaxconn; a "
                 "log line says so when that is lower)")
      ->capture_default_str();
  app.add_option("--metrics-port", f.metrics_port,
                 "Serve Prometheus metrics at http://ADDR:PORT/metrics (0 picks a free port)");
  app.add_option("--metrics-addr,--metrics_addr", f.metrics_addr,
                 "The address metrics are served on (:: or 0.0.0.0: every address)")
      ->capture_default_str();
  app.add_option("--auth-token-file,--auth_token_file", f.token_file,
                 "Serve only connections that prove they hold this file's secret (every key) or a "
                 "job's token derived from it (`ddprun token`: that job's keys)");
  app.add_option("--tls-cert,--tls_cert", f.tls.cert_file,
                 "Serve TLS only, with this certificate chain (PEM); needs --tls-key");
  app.add_option("--tls-key,--tls_key", f.tls.key_file, "The key of --tls-cert (PEM)");
  app.add_option("--tls-client-ca,--tls_client_ca", f.tls.ca_file,
                 "Ask every client for a certificate signed by this CA (PEM), and refuse those "
                 "without one");
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  app.set_version_flag(
      "--version", [] { return ddprun::store::version_text("ddprund"); },
      "Show ddprund's version, commit and store dialects, and exit");
}

// The server's options from the flags (its secret read, its TLS context made); an exit status
// where they are unusable.
std::optional<int> complete_options(DaemonFlags& f) {
  f.options.partial_request_timeout = std::chrono::milliseconds(f.partial_timeout_ms);
  f.options.expected_clients = f.options.listen_backlog;
  try {
    if (!f.token_file.empty()) f.options.secret = ddprun::store::Token::from_file(f.token_file);
  } catch (const ddprun::store::StoreError& e) {
    std::cerr << "ddprund: --auth-token-file: " << e.what() << '\n';
    return 2;
  }
  f.tls.enabled = !f.tls.cert_file.empty() || !f.tls.key_file.empty() || !f.tls.ca_file.empty();
  try {
    f.options.tls = ddprun::store::server_tls_context(f.tls);
  } catch (const std::invalid_argument& e) {
    std::cerr << "ddprund: --tls-cert, --tls-key, --tls-client-ca: " << e.what() << '\n';
    return 2;
  }
  return std::nullopt;
}

// Serves until SIGINT or SIGTERM: the exit status.
int serve(const DaemonFlags& f) {
  const ServerOptions& options = f.options;
  boost::asio::io_context io(1);
  try {
    ddprun::store::StoreServer server(io, options);
    std::cout << server.port() << std::endl;
    spdlog::info("listening on {}:{}{}{}", options.host.empty() ? "*" : options.host, server.port(),
                 options.tls ? ", TLS only" : "",
                 options.secret ? ", connections must authenticate" : "");
    std::unique_ptr<ddprun::store::MetricsServer> metrics;
    if (f.metrics_port) {
      metrics = std::make_unique<ddprun::store::MetricsServer>(
          io, f.metrics_addr, *f.metrics_port,
          [&server] { return ddprun::store::store_metrics(server); });
      spdlog::info("metrics at http://{}:{}/metrics", f.metrics_addr, metrics->port());
    }
    boost::asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](boost::system::error_code ec, int signo) {
      if (ec) return;
      spdlog::info("received signal {}, shutting down with {} connections open", signo,
                   server.connection_count());
      server.stop();
      io.stop();
    });
    io.run();
  } catch (const ddprun::store::StoreError& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  DaemonFlags flags;
  CLI::App app{"ddprund: TCPStore-compatible rendezvous store daemon"};
  add_options(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "ddprund: " << e.what() << '\n';
    return 2;
  }
  // (Before the options are completed: what reading them says goes to stderr, never before the
  // port on stdout.)
  spdlog::set_default_logger(spdlog::stderr_color_mt("ddprund"));
  spdlog::set_level(spdlog::level::from_str(flags.log_level));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [ddprund] [%l] %v");
  if (const std::optional<int> unusable = complete_options(flags)) return *unusable;
  ddprun::store::prepare_server_process();
  return serve(flags);
}
