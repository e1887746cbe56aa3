#pragma once
// Gloo's rendezvous store interface over ddprun's store client, under a key prefix.
#include <memory>
#include <string>

#include <gloo/rendezvous/store.h>

#include "ddprun/store/store_client.hpp"

namespace ddp {

class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(ddprun::store::StoreClient& client, std::string prefix,
            std::chrono::milliseconds timeout);
  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits for the key up to the timeout.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::vector<std::string> scoped(const std::vector<std::string>& keys) const;

  ddprun::store::StoreClient& client_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace ddp
