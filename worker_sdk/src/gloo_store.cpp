#include "gloo_store.hpp"

namespace ddp {

GlooStore::GlooStore(ddprun::store::StoreClient& client, std::string prefix,
                     std::chrono::milliseconds timeout)
    : client_(client), prefix_(std::move(prefix)), timeout_(timeout) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  client_.set(prefix_ + key, std::string_view(data.data(), data.size()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  wait({key});
  const std::string v = client_.get(prefix_ + key);
  return {v.begin(), v.end()};
}

void GlooStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  client_.wait(scoped(keys), timeout);
}

std::vector<std::string> GlooStore::scoped(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(prefix_ + k);
  return out;
}

}  // namespace ddp
