#include "token_command.hpp"

#include <iostream>

#include <CLI/CLI.hpp>

#include "ddprun/job_store/tcp_job_store.hpp"
#include "ddprun/store/auth.hpp"
#include "ddprun/store/errors.hpp"

namespace ddprun::launcher {

int run_token(const std::vector<std::string>& args) {
  CLI::App app{"ddprun token: the token of one job under a ddprund secret", "ddprun token"};
  std::string secret_file, run_id;
  app.add_option("--auth-token-file,--auth_token_file", secret_file,
                 "the secret ddprund was started with")
      ->required();
  app.add_option("--rdzv_id,--rdzv-id,--run_id,--run-id", run_id, "the job's run id")->required();
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "ddprun token: " << e.what() << '\n';
    return 2;
  }
  if (run_id.find('/') != std::string::npos) {
    std::cerr << "ddprun token: a run id with a token has no '/'\n";
    return 2;
  }
  try {
    const store::Token secret = store::Token::from_file(secret_file);
    const std::string scope = rendezvous::TcpJobStore::server_key(run_id, "");
    std::cout << store::scope_token(secret, scope).bytes() << '\n';
  } catch (const store::StoreError& e) {
    std::cerr << "ddprun token: " << e.what() << '\n';
    return 2;
  }
  return 0;
}

}  // namespace ddprun::launcher
