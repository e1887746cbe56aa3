// ddprund: the standalone rendezvous store daemon. Foreground; logs to stderr; prints the bound
// port alone on the first line of stdout (useful with --port 0); exits 0 on SIGTERM or SIGINT.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>

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

int main(int argc, char** argv) {
  using ddprun::store::ServerOptions;
  ServerOptions options;
  std::string log_level = "info";
  uint64_t partial_timeout_ms = options.partial_request_timeout.count();

  CLI::App app{"ddprund: TCPStore-compatible rendezvous store daemon"};
  app.add_option("--host", options.host, "Address to listen on (default: every address)");
  app.add_option("--port", options.port, "Port to listen on; 0 picks a free one")->required();
  app.add_option("--max-connections", options.max_connections, "Open connections at most")
      ->capture_default_str();
  app.add_option("--max-key-bytes", options.limits.max_key_bytes, "Longest key accepted")
      ->capture_default_str();
  app.add_option("--max-value-bytes", options.limits.max_value_bytes, "Largest value accepted")
      ->capture_default_str();
  app.add_option("--max-keys-per-request", options.limits.max_keys_per_request,
                 "Most keys in one CHECK/WAIT/MULTI_GET/MULTI_SET")
      ->capture_default_str();
  app.add_option("--max-pending-output-bytes", options.max_pending_output_bytes,
                 "Replies queued for a client that does not read them, at most")
      ->capture_default_str();
  app.add_option("--max-buffered-bytes", options.max_buffered_bytes,
                 "Partial requests and queued replies of every connection together, at most; "
                 "beyond it the connection that holds the most is closed")
      ->capture_default_str();
  app.add_option("--partial-request-timeout-ms", partial_timeout_ms,
                 "Close a connection whose request is not complete this long after its first "
                 "bytes, or that does not read its replies for this long")
      ->capture_default_str();
  app.add_option("--listen-backlog", options.listen_backlog,
                 "Connections queued before accept (the kernel caps it at net.core.somaxconn; a "
                 "log line says so when that is lower)")
      ->capture_default_str();
  std::optional<uint16_t> metrics_port;
  app.add_option("--metrics-port", metrics_port,
                 "Serve Prometheus metrics at http://ADDR:PORT/metrics (0 picks a free port)");
  std::string metrics_addr = ddprun::store::kDefaultMetricsAddress;
  app.add_option("--metrics-addr,--metrics_addr", metrics_addr,
                 "The address metrics are served on (:: or 0.0.0.0: every address)")
      ->capture_default_str();
  std::string token_file;
  app.add_option("--auth-token-file,--auth_token_file", token_file,
                 "Serve only connections that prove they hold this file's secret (every key) or a "
                 "job's token derived from it (`ddprun token`: that job's keys)");
  ddprun::store::TlsFiles tls;
  app.add_option("--tls-cert,--tls_cert", tls.cert_file,
                 "Serve TLS only, with this certificate chain (PEM); needs --tls-key");
  app.add_option("--tls-key,--tls_key", tls.key_file, "The key of --tls-cert (PEM)");
  app.add_option("--tls-client-ca,--tls_client_ca", tls.ca_file,
                 "Ask every client for a certificate signed by this CA (PEM), and refuse those "
                 "without one");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  app.set_version_flag(
      "--version", [] { return ddprun::store::version_text("ddprund"); },
      "Show ddprund's version, commit and store dialects, and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "ddprund: " << e.what() << '\n';
    return 2;
  }
  options.partial_request_timeout = std::chrono::milliseconds(partial_timeout_ms);
  options.expected_clients = options.listen_backlog;
  try {
    if (!token_file.empty()) options.secret = ddprun::store::Token::from_file(token_file);
  } catch (const ddprun::store::StoreError& e) {
    std::cerr << "ddprund: --auth-token-file: " << e.what() << '\n';
    return 2;
  }
  tls.enabled = !tls.cert_file.empty() || !tls.key_file.empty() || !tls.ca_file.empty();
  try {
    options.tls = ddprun::store::server_tls_context(tls);
  } catch (const std::invalid_argument& e) {
    std::cerr << "ddprund: --tls-cert, --tls-key, --tls-client-ca: " << e.what() << '\n';
    return 2;
  }

  spdlog::set_default_logger(spdlog::stderr_color_mt("ddprund"));
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [ddprund] [%l] %v");
  ddprun::store::prepare_server_process();

  boost::asio::io_context io(1);
  try {
    ddprun::store::StoreServer server(io, options);
    std::cout << server.port() << std::endl;
    spdlog::info("listening on {}:{}{}{}", options.host.empty() ? "*" : options.host, server.port(),
                 options.tls ? ", TLS only" : "",
                 options.secret ? ", connections must authenticate" : "");
    std::unique_ptr<ddprun::store::MetricsServer> metrics;
    if (metrics_port) {
      metrics = std::make_unique<ddprun::store::MetricsServer>(
          io, metrics_addr, *metrics_port,
          [&server] { return ddprun::store::store_metrics(server); });
      spdlog::info("metrics at http://{}:{}/metrics", metrics_addr, metrics->port());
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
