#include "checkpoint/slot_sources.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <string>

#include <fmt/format.h>

#include "checkpoint/file_io.hpp"
#include "checkpoint/slot_copy.hpp"
#include "checkpoint/slot_file.hpp"

namespace ddprun::agent {
namespace fs = std::filesystem;
namespace {

constexpr size_t kReadChunk = 1 << 20;

// A slot this node may give: committed, of this run, with its rank recorded.
bool usable(const SlotRecord& r, uint64_t run_tag) {
  return r.state == SlotRecord::kCommitted && r.rank >= 0 && r.run_tag == run_tag &&
         r.size % 8 == 0;
}

// Every source, in the order they are preferred: regions, kept copies, held copies.
template <class Visit>
void each_source(const fs::path& regions, const fs::path& kept, const PeerCopies* copies,
                 uint64_t run_tag, Visit visit) {
  for_each_region(regions, [&](const fs::path& region, const RegionHeader& h) {
    for (int i = 0; i < 2; ++i) {
      if (!usable(h.slots[i], run_tag) || h.slots[i].size > h.slot_size) continue;
      visit(SlotSources::Found{region, kRegionHeader + static_cast<uint64_t>(i) * h.slot_size,
                               h.slots[i], h.save_micros[i]});
    }
  });
  std::error_code ec;
  const auto file = [&](const fs::path& path) {
    const std::optional<RegionHeader> h = read_region_header(path);
    if (h && usable(h->slots[0], run_tag)) {
      visit(SlotSources::Found{path, kRegionHeader, h->slots[0], h->save_micros[0]});
    }
  };
  for (const auto& step : fs::directory_iterator(kept, ec)) {
    for (const auto& e : fs::directory_iterator(step.path(), ec)) {
      if (e.path().extension() == ".ddpckpt") file(e.path());
    }
  }
  if (copies != nullptr) {
    for (const PeerCopies::Copy& c : copies->all()) {
      if (!c.record) {
        file(c.file);
        continue;
      }
      // A linked copy: the kept file's payload under the copy's own record.
      const std::optional<RegionHeader> h = read_region_header(c.file);
      if (h && usable(*c.record, run_tag) && h->slots[0].size == c.record->size &&
          h->slots[0].checksum == c.record->checksum) {
        visit(SlotSources::Found{c.file, kRegionHeader, *c.record, h->save_micros[0]});
      }
    }
  }
}

}  // namespace

std::string file_header_for(const SlotSources::Found& found) {
  return region_header_for(found.record, file_slot_size(found.record.size), found.save_micros);
}

SlotSources::SlotSources(fs::path regions, fs::path kept, PeerCopies* copies, uint64_t run_tag)
    : regions_(std::move(regions)), kept_(std::move(kept)), copies_(copies), run_tag_(run_tag) {}

std::vector<HeldSlot> SlotSources::held() const {
  std::map<std::tuple<int, int, int64_t, uint64_t>, HeldSlot> by_identity;
  each_source(regions_, kept_, copies_, run_tag_, [&](const Found& f) {
    const SlotRecord& r = f.record;
    HeldSlot slot{static_cast<int>(r.rank),
                  static_cast<int>(r.world_size),
                  r.step,
                  r.size,
                  r.metadata_size > 0,
                  r.state_identity()};
    by_identity.emplace(std::make_tuple(slot.rank, slot.world, slot.step, slot.state), slot);
  });
  std::vector<HeldSlot> out;
  for (const auto& [_, slot] : by_identity) out.push_back(slot);
  return out;
}

std::optional<SlotSources::Found> SlotSources::find(int rank, int world, int64_t step) const {
  std::optional<Found> found;
  each_source(regions_, kept_, copies_, run_tag_, [&](const Found& f) {
    if (!found && f.record.rank == rank && f.record.world_size == static_cast<uint64_t>(world) &&
        f.record.step == step) {
      found = f;
    }
  });
  return found;
}

bool SlotSources::copy_to(int rank, int world, int64_t step, const fs::path& folder) const {
  const std::optional<Found> found = find(rank, world, step);
  if (!found) return false;
  const fs::path dir = folder / fmt::format("step_{}", step);
  fs::create_directories(dir);
  const fs::path file = dir / fmt::format("rank_{}.ddpckpt", rank);
  const SlotRecord& rec = found->record;
  const Fd in(open_or_fail(found->file, O_RDONLY));
  {
    SlotFileWriter out(file, dir / fmt::format(".rank_{}.tmp", rank), file_header_for(*found),
                       kRegionHeader + rec.size, fmt::format("global rank {}'s checkpoint", rank));
    std::string buffer(std::min<uint64_t>(std::max<uint64_t>(rec.size, 8), kReadChunk), '\0');
    for (uint64_t done = 0; done < rec.size;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), rec.size - done));
      read_all(in.fd, buffer.data(), n, found->payload_at + done, found->file);
      out.append(buffer.data(), n);
      done += n;
    }
    if (!out.commit(rec.checksum)) {
      errno = EIO;
      fail_io(fmt::format("{}'s slot of step {} fails its checksum", found->file.string(), step));
    }
  }
  if (rec.metadata_size > 0) {
    const Fd copied(open_or_fail(file, O_RDONLY));
    write_dcp_metadata(copied.fd, file, rec, dir);
  }
  return true;
}

void SlotSources::drop_after(std::optional<int64_t> step, int round) const {
  const auto after = [&](int64_t s) { return !step || s > *step; };
  for_each_region(regions_, [&](const fs::path& region, const RegionHeader& h) {
    const int fd = ::open(region.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return;
    for (int i = 0; i < 2; ++i) {
      if (h.slots[i].state != SlotRecord::kCommitted || !after(h.slots[i].step)) continue;
      const uint64_t empty = SlotRecord::kEmpty;
      if (::pwrite(fd, &empty, sizeof empty, slot_record_at(i)) != sizeof empty) break;
    }
    ::close(fd);
  });
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(kept_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0) continue;
    try {
      if (after(std::stoll(name.substr(5)))) fs::remove_all(e.path(), ec);
    } catch (const std::exception&) {
    }
  }
  if (copies_ != nullptr) copies_->drop_after(step, round);
  timeline_ = std::max(timeline_.load(), round);
}

}  // namespace ddprun::agent
