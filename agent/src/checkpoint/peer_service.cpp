#include "checkpoint/peer_service.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <map>
#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "checkpoint/memory_use.hpp"
#include "checkpoint/region_format.hpp"
#include "checkpoint/slot_copy.hpp"
#include "checkpoint/slot_file.hpp"
#include "checkpoint/spare_pages.hpp"

namespace ddprun::agent {
namespace asio = boost::asio;
namespace fs = std::filesystem;
using asio::ip::tcp;

namespace {

enum Op : uint64_t { kPut = 1, kGet = 2 };
constexpr size_t kWords = 7;  // op, local rank, rank, step, bytes, round, origin length
constexpr size_t kMaxOrigin = 256;
constexpr int kMaxLocalRanks = 4096;
// What is received at once: a multiple of 8 (the payload is summed in whole words), and small
// enough to sum from the cache (1 MiB moved a received copy 1.5-2x faster here than 8 MiB, and
// than receiving straight into the file's mapped pages).
constexpr size_t kSendChunk = 1 << 20;
constexpr size_t kMaxConnections = 64;
// Connections open at once from one address: a host that floods the port with idle connections
// takes its own share, never the job's (a node makes one per copy or fetch under way).
constexpr size_t kMaxPerAddress = 8;
// A connection quiet for this long is closed: a stalled peer, or a stranger that says nothing.
constexpr std::chrono::seconds kIdleLimit{10};
// How long a put whose bytes this node may hold already waits for this node's own copy of the
// step (every node stages the same steps, a moment apart), and how often it looks.
constexpr std::chrono::seconds kSameWait{2};
constexpr std::chrono::milliseconds kSameLook{10};

// An answer's status word.
enum Status : uint64_t { kOk = 0, kRefused = 1, kHeld = 2 };

struct Request {
  uint64_t op = 0;
  int local_rank = 0;
  int rank = 0;
  int64_t step = 0;
  uint64_t bytes = 0;
  int round = 0;  // a put's: the round whose agents sent it (PeerCopies::current)
  std::string origin;
};

std::string words(std::initializer_list<uint64_t> values) {
  std::string out;
  for (uint64_t v : values) out.append(reinterpret_cast<const char*>(&v), sizeof v);
  return out;
}

uint64_t word_at(const char* p, size_t i) {
  uint64_t v;
  std::memcpy(&v, p + 8 * i, sizeof v);
  return v;
}

// The request as it crosses the wire.
std::string encoded(const Request& r) {
  std::string out = words({r.op, static_cast<uint64_t>(r.local_rank), static_cast<uint64_t>(r.rank),
                           static_cast<uint64_t>(r.step), r.bytes, static_cast<uint64_t>(r.round),
                           r.origin.size()});
  out += r.origin;
  return out;
}

asio::awaitable<void> send_request(PeerLink& link, const Request& r) {
  const std::string out = encoded(r);
  co_await link.write(out.data(), out.size());
}

// What every MAC of a transfer covers before its header: the connection's session and the request
// (a MAC recorded on one connection, or for another request, holds for nothing else).
std::string bound(const PeerLink& link, const Request& r) { return link.session() + encoded(r); }

// nullopt: not a request of this protocol.
asio::awaitable<std::optional<Request>> read_request(PeerLink& link) {
  char w[kWords * 8];
  co_await link.read(w, sizeof w);
  Request r;
  r.op = word_at(w, 0);
  const uint64_t local_rank = word_at(w, 1), rank = word_at(w, 2), round = word_at(w, 5),
                 length = word_at(w, 6);
  if ((r.op != kPut && r.op != kGet) || local_rank >= kMaxLocalRanks || rank >= (1u << 30) ||
      round >= (1u << 30) || length == 0 || length > kMaxOrigin) {
    co_return std::nullopt;
  }
  r.local_rank = static_cast<int>(local_rank);
  r.rank = static_cast<int>(rank);
  r.step = static_cast<int64_t>(word_at(w, 3));
  r.bytes = word_at(w, 4);
  r.round = static_cast<int>(round);
  r.origin.resize(length);
  co_await link.read(r.origin.data(), length);
  co_return r;
}

asio::awaitable<void> send_status(PeerLink& link, const std::string& error,
                                  Status ok = Status::kOk) {
  std::string out = words({error.empty() ? ok : Status::kRefused, error.size()});
  out += error;
  co_await link.write(out.data(), out.size());
}

struct Answer {
  bool held = false;  // a put's: the peer holds these bytes already, nothing to send
  std::string error;  // empty: ok (or held)
};

asio::awaitable<Answer> read_answer(PeerLink& link) {
  char w[16];
  co_await link.read(w, sizeof w);
  const uint64_t status = word_at(w, 0), length = std::min<uint64_t>(word_at(w, 1), 4096);
  std::string message(length, '\0');
  if (length > 0) co_await link.read(message.data(), length);
  if (status == Status::kOk || status == Status::kHeld) co_return Answer{status == kHeld, ""};
  co_return Answer{false, message.empty() ? std::string("refused") : message};
}

// Whether this node's workers, whose regions are in `regions`, will give it a copy of its own of
// `step` to keep: a region holds it committed, or none has saved it yet (they save every step the
// same; their newest is before it). None where it has no regions.
bool step_coming(const fs::path& regions, int64_t step) {
  bool any = false, holds = false, all_before = true;
  for_each_region(regions, [&](const fs::path&, const RegionHeader& h) {
    any = true;
    holds = holds || h.slot_of(step) >= 0;
    const std::vector<int64_t> steps = h.committed_steps();
    if (!steps.empty() && steps.back() >= step) all_before = false;
  });
  return holds || (any && all_before);
}

// A copy of its own this node keeps in `kept_step` whose payload is the slot `rec` names (the same
// size, CRC and digest), or nullopt; `any` says whether that folder holds any copy.
std::optional<fs::path> kept_same(const fs::path& kept_step, const SlotRecord& rec,
                                  const PayloadDigest& digest, bool* any) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(kept_step, ec)) {
    if (e.path().extension() != ".ddpckpt") continue;
    *any = true;
    if (holds_payload(e.path(), rec, digest)) return e.path();
  }
  return std::nullopt;
}

// The header of a file of the persisted layout holding `step`: its slot record, or why not.
std::optional<SlotRecord> slot_of_file(const std::string& header, int64_t step, uint64_t file_bytes,
                                       uint64_t* slot_size) {
  const std::optional<RegionHeader> h = parse_region_header(header);
  if (!h || h->slot_of(step) != 0 || h->slots[0].size % 8 != 0 || h->slot_size < h->slots[0].size ||
      file_bytes != kRegionHeader + h->slots[0].size) {
    return std::nullopt;
  }
  *slot_size = h->slot_size;
  return h->slots[0];
}

// Receives the nonce of the payload's MAC where there is one, `size` payload bytes into `out`, then
// their MAC: whether it is theirs (and `context`'s, then `header`'s, the file's header as it came).
asio::awaitable<bool> receive_payload(PeerLink& link, SlotFileWriter& out, uint64_t size,
                                      const std::string& context, const std::string& header,
                                      std::optional<CopyMac> mac) {
  if (mac) {
    char nonce[CopyMac::kNonceBytes];
    co_await link.read(nonce, sizeof nonce);
    mac->begin_checking(std::string_view(nonce, sizeof nonce));
    mac->add(context);
    mac->add(header);
  }
  const size_t chunk = static_cast<size_t>(std::min<uint64_t>(size, kSendChunk));
  AppendBehind behind(out, chunk);  // the next chunk arrives while this one is written
  for (uint64_t done = 0; done < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, size - done));
    char* const buffer = behind.buffer();
    co_await link.read(buffer, n);
    if (mac) mac->add(std::string_view(buffer, n));
    behind.append(n);
    done += n;
  }
  behind.finish();
  if (!mac) co_return true;
  char theirs[CopyMac::kTagBytes];
  co_await link.read(theirs, sizeof theirs);
  co_return mac->matches(std::string_view(theirs, sizeof theirs));
}

// Sends the nonce of the payload's MAC where there is one, the payload of `size` bytes at `at` of
// `fd`, then their MAC (and `context`'s, then `header`'s, the file's header as it was sent).
asio::awaitable<void> send_payload(PeerLink& link, const std::string& context,
                                   const std::string& header, int fd, uint64_t at, uint64_t size,
                                   std::optional<CopyMac> mac) {
  if (mac) {
    const std::string nonce = mac->begin_sending();
    co_await link.write(nonce.data(), nonce.size());
    mac->add(context);
    mac->add(header);
  }
  co_await link.send_file(fd, at, size, mac ? &*mac : nullptr);
  if (!mac) co_return;
  const std::string sum = mac->finish();
  co_await link.write(sum.data(), sum.size());
}

constexpr std::string_view kEarlierRound =
    "a restore here began a later round's timeline: a copy sent in an earlier round is not kept "
    "(its step may be of the timeline the job abandoned)";

constexpr std::string_view kAlteredCopy =
    "the copy fails its MAC (altered on its way, or not sent by a member of this job)";

}  // namespace

PeerService::PeerService(PeerAuth auth, const std::string& bind_host, fs::path copies_dir,
                         std::optional<uint64_t> limit, fs::path regions, uint64_t run_tag)
    : auth_(std::move(auth)),
      run_tag_(run_tag),
      limit_(limit),
      copies_(std::make_unique<PeerCopies>(std::move(copies_dir), limit)),
      sources_(std::make_unique<SlotSources>(regions, regions / "kept", copies_.get(), run_tag)),
      regions_(regions),
      kept_(regions / "kept"),
      acceptor_(io_, tcp::endpoint(asio::ip::make_address(bind_host), 0)) {
  port_ = acceptor_.local_endpoint().port();
  asio::co_spawn(io_, serve(), asio::detached);
  thread_ = std::thread([this] {
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {  // a connection's own failure must not end the service
        spdlog::warn("checkpoint copies: {}", e.what());
      }
    }
  });
  stage_thread_ = std::thread([this] { stage_io_.run(); });
}

PeerService::~PeerService() {
  io_.stop();
  stage_io_.stop();
  thread_.join();
  stage_thread_.join();
}

std::optional<CopyMac> PeerService::copy_mac() const {
  if (!auth_.mac) return std::nullopt;
  if (!auth_.token)
    throw std::runtime_error("this node holds neither the job's token nor its secret");
  return CopyMac(*auth_.token, auth_.scope);
}

void PeerService::use_secret(store::Token secret) {
  std::promise<void> done;
  asio::post(io_, [&] {
    auth_.token = std::move(secret);
    done.set_value();
  });
  done.get_future().wait();
}

asio::awaitable<void> PeerService::serve() {
  auto open = std::make_shared<size_t>(0);
  auto per_address = std::make_shared<std::map<asio::ip::address, size_t>>();
  for (;;) {
    auto [ec, socket] = co_await acceptor_.async_accept(asio::as_tuple(asio::use_awaitable));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
      continue;  // (out of descriptors, a connection reset before it was taken: go on)
    }
    const auto remote = socket.remote_endpoint(ec);
    if (ec) continue;
    size_t& from = (*per_address)[remote.address()];
    // Closed at once: a flood takes nothing.
    if (*open >= kMaxConnections || from >= kMaxPerAddress) {
      if (from == 0) per_address->erase(remote.address());
      continue;
    }
    ++*open;
    ++from;
    asio::co_spawn(io_, answer(std::move(socket)),
                   [open, per_address, address = remote.address()](std::exception_ptr) {
                     --*open;
                     if (--(*per_address)[address] == 0) per_address->erase(address);
                   });
  }
}

asio::awaitable<void> PeerService::answer(tcp::socket socket) {
  std::unique_ptr<PeerLink> link = co_await PeerLink::accept(std::move(socket), auth_, kIdleLimit);
  if (!link) co_return;  // no proof of the job's token: nothing read, nothing given
  const std::optional<Request> r = co_await read_request(*link);
  if (!r) co_return;
  if (r->op == kGet) {
    const int world = static_cast<int>(std::min<uint64_t>(r->bytes, 1u << 30));
    const std::optional<SlotSources::Found> found = sources_->find(r->rank, world, r->step);
    if (!found) {
      co_await send_status(*link, fmt::format("no slot of global rank {} of {} at step {} here",
                                              r->rank, world, r->step));
      co_return;
    }
    std::optional<Fd> in;
    std::string error;
    try {
      in.emplace(open_or_fail(found->file, O_RDONLY));
    } catch (const std::exception& e) {
      error = e.what();
    }
    co_await send_status(*link, error);
    if (!in) co_return;
    const std::string size = words({kRegionHeader + found->record.size});
    const std::string header = file_header_for(*found);
    co_await link->write(size.data(), size.size());
    co_await link->write(header.data(), header.size());
    co_await send_payload(*link, bound(*link, *r), header, in->fd, found->payload_at,
                          found->record.size, copy_mac());
    co_return;
  }
  // A put: the file's header, then (once there is room) its payload. Of the timeline of the round
  // that sent it: one a restore here abandoned, before it came or while it comes, is not kept.
  std::string header(kRegionHeader, '\0');
  co_await link->read(header.data(), header.size());
  uint64_t slot_size = 0;
  const std::optional<SlotRecord> rec = slot_of_file(header, r->step, r->bytes, &slot_size);
  if (!rec) {
    co_await send_status(*link, "not a checkpoint of the step it names");
    co_return;
  }
  if (std::optional<CopyMac> mac = copy_mac()) {  // its nonce, then the MAC
    char theirs[CopyMac::kNonceBytes + CopyMac::kTagBytes];
    co_await link->read(theirs, sizeof theirs);
    mac->begin_checking(std::string_view(theirs, CopyMac::kNonceBytes));
    mac->add(bound(*link, *r));
    mac->add(header);
    if (!mac->matches(std::string_view(theirs + CopyMac::kNonceBytes, CopyMac::kTagBytes))) {
      co_await send_status(*link, std::string(kAlteredCopy));
      co_return;
    }
  }
  if (!copies_->current(r->round)) {
    co_await send_status(*link, std::string(kEarlierRound));
    co_return;
  }
  if (rec->rank != r->rank || rec->run_tag != run_tag_) {
    co_await send_status(*link, "not a checkpoint of the rank it names, or of this job");
    co_return;
  }
  if (const std::optional<PayloadDigest> digest = digest_in(header);
      digest && co_await hold_same(r->origin, r->local_rank, *rec, *digest, r->round)) {
    co_await send_status(*link, "", Status::kHeld);
    co_return;
  }
  std::unique_ptr<SlotFileWriter> out;
  std::string refused;
  try {
    out = copies_->begin(r->origin, r->local_rank, r->step, header, r->bytes);
  } catch (const std::exception& e) {
    refused = e.what();
  }
  if (!out) {
    co_await send_status(*link, refused);
    co_return;
  }
  struct Reservation {  // given back unless the copy is kept
    PeerCopies& copies;
    const Request& r;
    bool kept = false;
    ~Reservation() {
      if (!kept) copies.abandoned(r.origin, r.local_rank);
    }
  } reservation{*copies_, *r};
  co_await send_status(*link, "");
  if (!co_await receive_payload(*link, *out, rec->size, bound(*link, *r), header, copy_mac())) {
    co_await send_status(*link, std::string(kAlteredCopy));
    co_return;
  }
  if (!copies_->current(r->round)) {  // (before the file takes the place of a copy held)
    co_await send_status(*link, std::string(kEarlierRound));
    co_return;
  }
  if (!out->commit(rec->checksum)) {
    co_await send_status(*link,
                         "the copy fails its checksum (the worker reused the slot during "
                         "the copy)");
    co_return;
  }
  reservation.kept = true;  // (committed() gives its room back either way)
  if (!copies_->committed(r->origin, r->local_rank, r->rank, static_cast<int>(rec->world_size),
                          r->step, r->bytes, r->round)) {
    co_await send_status(*link, std::string(kEarlierRound));
    co_return;
  }
  co_await send_status(*link, "");
}

asio::awaitable<bool> PeerService::hold_same(const std::string& origin, int local_rank,
                                             const SlotRecord& rec, const PayloadDigest& digest,
                                             int round) {
  const fs::path kept_step = kept_ / fmt::format("step_{}", rec.step);
  // (A wait for this step of this origin that came to nothing is not waited again for its other
  // ranks.)
  const bool waited = waited_in_vain_ == std::make_pair(origin, rec.step);
  asio::steady_timer timer(io_);
  for (const auto until = std::chrono::steady_clock::now() + kSameWait;;) {
    bool any = false;
    if (const std::optional<fs::path> same = kept_same(kept_step, rec, digest, &any)) {
      co_return copies_->linked(origin, local_rank, rec, digest, *same, round);
    }
    // (Its own copies of the step complete, and none the same: the bytes must come.)
    const bool coming = staging_ == rec.step || (!any && step_coming(regions_, rec.step));
    if (!coming || waited) co_return false;
    if (std::chrono::steady_clock::now() >= until) {
      waited_in_vain_ = std::make_pair(origin, rec.step);
      co_return false;
    }
    timer.expires_after(kSameLook);
    co_await timer.async_wait(asio::use_awaitable);
  }
}

asio::awaitable<TransferReport> PeerService::stage(fs::path regions, std::vector<RankSlot> ranks,
                                                   int64_t step, fs::path keep) {
  // (Not a coroutine itself: the epoch is the one when the stage was asked for, not when the
  // caller's executor begins it.)
  return stage_from(std::move(regions), std::move(ranks), step, std::move(keep),
                    stage_epochs_.current());
}

asio::awaitable<TransferReport> PeerService::stage_from(fs::path regions,
                                                        std::vector<RankSlot> ranks, int64_t step,
                                                        fs::path keep, uint64_t began) {
  auto run = [this, regions, ranks, step, keep, limit = limit_,
              began]() -> asio::awaitable<TransferReport> {
    staging_ = step;
    const auto started = std::chrono::steady_clock::now();
    TransferReport report;
    report.step = step;
    const fs::path kept_step = keep / fmt::format("step_{}", step);
    try {
      fs::create_directories(kept_step);
      // The ranks side by side (each its own memory copy; the first on this thread): a node of 8
      // GPUs stages 8 slots in the time of about one where memory bandwidth allows.
      std::vector<RankStage> stages(ranks.size());
      const auto stage_one = [&](size_t i) {
        return stage_rank(regions, ranks[i], step, kept_step, limit, stage_epochs_, began,
                          copies_->spare_room());
      };
      {
        std::vector<std::jthread> others;  // joined when they go, even if one cannot start
        for (size_t i = 1; i < ranks.size(); ++i) {
          others.emplace_back([&, i] { stages[i] = stage_one(i); });
        }
        if (!ranks.empty()) stages[0] = stage_one(0);
      }
      for (const RankStage& s : stages) {
        report.bytes += s.bytes;
        report.overtaken = report.overtaken || s.overtaken;
        if (report.detail.empty()) report.detail = s.error;
      }
      // What this stage wrote is what the next one needs: the pages of copies dropped meanwhile
      // are held for it up to that (copies held for the peer that it drops too). A stage that
      // failed wrote nothing that says so.
      if (report.detail.empty()) {
        uint64_t room = 0;
        for (const RankStage& s : stages) room += allocated_for(kRegionHeader + s.bytes);
        copies_->spare_pages(spares_of(keep), room);
      }
    } catch (const std::exception& e) {
      report.detail = e.what();
    }
    report.ok = report.detail.empty();
    if (!report.ok) {
      std::error_code ec;
      fs::remove_all(kept_step, ec);
    }
    report.took = std::chrono::steady_clock::now() - started;
    staging_ = kNotStaging;
    co_return report;
  };
  co_return co_await asio::co_spawn(stage_io_, run(), asio::use_awaitable);
}

asio::awaitable<TransferReport> PeerService::put(PeerAddress to, std::string origin,
                                                 std::vector<RankSlot> ranks, int64_t step,
                                                 fs::path keep, int round) {
  // (Not a coroutine itself: the epoch is the one when the put was asked for, not when the
  // caller's executor begins it.)
  return put_from(std::move(to), std::move(origin), std::move(ranks), step, std::move(keep), round,
                  puts_epoch_.load());
}

asio::awaitable<TransferReport> PeerService::put_from(PeerAddress to, std::string origin,
                                                      std::vector<RankSlot> ranks, int64_t step,
                                                      fs::path keep, int round, uint64_t epoch) {
  auto run = [this, to, origin, ranks, step, keep, round,
              epoch]() -> asio::awaitable<TransferReport> {
    ++puts_under_way_;
    const struct Done {
      std::atomic<int>& count;
      ~Done() { --count; }
    } done{puts_under_way_};
    const auto started = std::chrono::steady_clock::now();
    TransferReport report;
    report.step = step;
    try {
      for (const RankSlot& slot : ranks) {
        if (puts_epoch_ != epoch) {
          report.detail = "the round ended during the copy";
          break;
        }
        const fs::path file =
            keep / fmt::format("step_{}", step) / fmt::format("rank_{}.ddpckpt", slot.local_rank);
        const Fd in(open_or_fail(file, O_RDONLY));
        std::string header(kRegionHeader, '\0');
        read_all(in.fd, header.data(), header.size(), 0, file);
        const std::optional<RegionHeader> h = parse_region_header(header);
        if (!h || h->slots[0].state != SlotRecord::kCommitted || h->slots[0].step != step) {
          report.detail = fmt::format("{} is not a kept copy of step {}", file.string(), step);
          break;
        }
        const SlotRecord& rec = h->slots[0];
        std::unique_ptr<PeerLink> link =
            co_await PeerLink::connect(io_.get_executor(), to.host, to.port, auth_, kIdleLimit);
        Request request{kPut,  slot.local_rank, slot.rank, step, kRegionHeader + rec.size,
                        round, origin};
        co_await send_request(*link, request);
        co_await link->write(header.data(), header.size());
        if (std::optional<CopyMac> mac = copy_mac()) {  // the header's own: it may be all it needs
          std::string sum = mac->begin_sending();
          mac->add(bound(*link, request));
          mac->add(header);
          sum += mac->finish();
          co_await link->write(sum.data(), sum.size());
        }
        const Answer answer = co_await read_answer(*link);
        if (!answer.error.empty()) {
          report.detail = fmt::format("{} refused local rank {}'s copy: {}", link->peer(),
                                      slot.local_rank, answer.error);
          break;
        }
        if (answer.held) {
          report.held += rec.size;
          continue;
        }
        co_await send_payload(*link, bound(*link, request), header, in.fd, kRegionHeader, rec.size,
                              copy_mac());
        if (std::string why = (co_await read_answer(*link)).error; !why.empty()) {
          report.detail = fmt::format("{} did not keep local rank {}'s copy: {}", link->peer(),
                                      slot.local_rank, why);
          break;
        }
        report.bytes += rec.size;
      }
    } catch (const std::exception& e) {
      report.detail = e.what();
    }
    report.ok = report.detail.empty();
    report.took = std::chrono::steady_clock::now() - started;
    co_return report;
  };
  co_return co_await asio::co_spawn(io_, run(), asio::use_awaitable);
}

asio::awaitable<TransferReport> PeerService::get(PeerAddress from,
                                                 std::vector<std::pair<int, int>> wanted,
                                                 int64_t step, fs::path folder) {
  auto run = [this, from, wanted, step, folder]() -> asio::awaitable<TransferReport> {
    const auto started = std::chrono::steady_clock::now();
    TransferReport report;
    report.step = step;
    try {
      const fs::path dir = folder / fmt::format("step_{}", step);
      fs::create_directories(dir);
      for (const auto& [rank, world] : wanted) {
        std::unique_ptr<PeerLink> link =
            co_await PeerLink::connect(io_.get_executor(), from.host, from.port, auth_, kIdleLimit);
        Request request{kGet, 0, rank, step, static_cast<uint64_t>(world), 0, "-"};
        co_await send_request(*link, request);
        if (std::string why = (co_await read_answer(*link)).error; !why.empty()) {
          report.detail = fmt::format("{}: {}", link->peer(), why);
          report.refused = true;
          co_return report;
        }
        char size[8];
        co_await link->read(size, sizeof size);
        const uint64_t file_bytes = word_at(size, 0);
        std::string header(kRegionHeader, '\0');
        if (file_bytes < kRegionHeader) throw std::runtime_error("a copy shorter than its header");
        co_await link->read(header.data(), header.size());
        uint64_t slot_size = 0;
        const std::optional<SlotRecord> rec = slot_of_file(header, step, file_bytes, &slot_size);
        if (!rec || rec->rank != rank || rec->world_size != static_cast<uint64_t>(world) ||
            rec->run_tag != run_tag_) {
          report.detail = fmt::format("{} sent something that is not global rank {}'s step {}",
                                      link->peer(), rank, step);
          report.refused = true;
          co_return report;
        }
        const fs::path file = dir / fmt::format("rank_{}.ddpckpt", rank);
        const fs::path tmp = dir / fmt::format(".rank_{}.tmp", rank);
        // Over pages held beforehand where the node has them (a spare's restore room, a dropped
        // copy's): allocating new ones costs about as much as the transfer itself.
        const bool spare = take_spare(spares_of(kept_), tmp, allocated_for(file_bytes));
        // (A spare short of the file has the rest of its pages taken as they are written.)
        const uint64_t held = spare ? file_memory(tmp) : 0;
        {
          SlotFileWriter out(
              file, tmp, header, file_bytes, fmt::format("global rank {}'s checkpoint", rank),
              PayloadSumKind::kCrc32, spare ? FileRoom::kRestoreOverSpare : FileRoom::kAsWritten);
          if (!co_await receive_payload(*link, out, rec->size, bound(*link, request), header,
                                        copy_mac())) {
            report.detail = fmt::format("global rank {}'s step {} from {}: {}", rank, step,
                                        link->peer(), kAlteredCopy);
            co_return report;
          }
          if (!out.commit(rec->checksum)) {
            report.detail = fmt::format("global rank {}'s step {} from {} fails its checksum", rank,
                                        step, link->peer());
            report.refused = true;  // its MAC held (where there is one): its copy is not sound
            co_return report;
          }
        }
        if (rec->metadata_size > 0) {
          const Fd copied(open_or_fail(file, O_RDONLY));
          write_dcp_metadata(copied.fd, file, *rec, dir);
        }
        report.bytes += rec->size;
        report.over_held_pages += std::min(rec->size, held - std::min(held, kRegionHeader));
        ++report.arrived;
      }
      report.ok = true;
    } catch (const std::exception& e) {
      report.detail = e.what();
    }
    report.took = std::chrono::steady_clock::now() - started;
    co_return report;
  };
  co_return co_await asio::co_spawn(io_, run(), asio::use_awaitable);
}

}  // namespace ddprun::agent
