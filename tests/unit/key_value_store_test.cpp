// The store's data without I/O: a prefix read and a prefix watch's first answer list exactly the
// keys under the prefix, in key order, however the keys came and went (the ordered index beside
// the hash map must follow every way a key is made and removed).
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "ddprun/store/key_value_store.hpp"

using namespace ddprun::store;

namespace {

struct RecordingPeer final : StorePeer {
  void deliver(std::string_view bytes) override { got.append(bytes); }
  std::string got;
};

using Entries = std::vector<std::pair<std::string, std::string>>;

// What a prefix watch on `prefix` is first sent where the store holds `entries` under it.
std::string first_answer(const std::string& prefix, const Entries& entries) {
  std::string frames;
  for (const auto& [key, value] : entries) {
    wire::put_watch_frame(frames, wire::WatchEvent::kExisting, key, {}, value);
  }
  wire::put_watch_frame(frames, wire::WatchEvent::kRegistered, prefix, {}, {});
  return frames;
}

}  // namespace

TEST_CASE("key value store: a prefix lists exactly its keys in order however they came and went",
          "[store]") {
  KeyValueStore kv;
  RecordingPeer owner;
  kv.set("job/nodes/c", "3");
  kv.set("job/nodes/a", "1", &owner);  // goes with its owner
  kv.compare_set("job/nodes/b", "", "2");
  kv.add("job/nodes/count", 4);
  kv.append("job/nodes/d", "x");
  kv.append("job/nodes/d", "y");
  kv.set("job/nodes", "the prefix without its slash");
  kv.set("job/nodes0", "beside the prefix");
  kv.set("job/nodes/e", "erased");
  kv.queue_push("job/nodes/q", "a queue is not a key");
  CHECK(kv.erase("job/nodes/e"));
  kv.set("job/nodes/c", "3 again");  // an update: listed once
  CHECK(kv.with_prefix("job/nodes/") == Entries{{"job/nodes/a", "1"},
                                                {"job/nodes/b", "2"},
                                                {"job/nodes/c", "3 again"},
                                                {"job/nodes/count", "4"},
                                                {"job/nodes/d", "xy"}});
  kv.drop_peer(owner);
  const Entries left{{"job/nodes/b", "2"},
                     {"job/nodes/c", "3 again"},
                     {"job/nodes/count", "4"},
                     {"job/nodes/d", "xy"}};
  CHECK(kv.with_prefix("job/nodes/") == left);

  RecordingPeer watcher;
  kv.watch(watcher, wire::WatchMode::kPrefix, "job/nodes/", false);
  CHECK(watcher.got == first_answer("job/nodes/", left));

  CHECK(kv.with_prefix("").size() == 6);
  CHECK(kv.with_prefix("nothing/").empty());
  kv.clear();
  CHECK(kv.with_prefix("").empty());
  kv.set("job/nodes/z", "after the clear");
  CHECK(kv.with_prefix("job/") == Entries{{"job/nodes/z", "after the clear"}});
}
