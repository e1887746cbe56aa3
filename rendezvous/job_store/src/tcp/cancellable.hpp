#pragma once
// A connection to the store being made (or re-made), ended at once by the job store's own stop:
// TcpJobStore::lost() emits every signal in its list. Private to the TCP job store.
#include <list>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace ddprun::rendezvous {

// Awaits `connecting` on a signal of its own in `pending`, which ends it at once with
// operation_aborted when emitted.
template <class T>
boost::asio::awaitable<T> cancellable(boost::asio::any_io_executor ex,
                                      std::list<boost::asio::cancellation_signal>& pending,
                                      boost::asio::awaitable<T> connecting) {
  namespace asio = boost::asio;
  pending.emplace_back();
  const auto signal = std::prev(pending.end());
  try {
    T connected =
        co_await asio::co_spawn(ex, std::move(connecting),
                                asio::bind_cancellation_slot(signal->slot(), asio::use_awaitable));
    pending.erase(signal);
    co_return connected;
  } catch (...) {
    pending.erase(signal);
    throw;
  }
}

}  // namespace ddprun::rendezvous
