#include "core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

namespace memplan {

void parallel_for(std::size_t n, const std::function<void(std::size_t)>& task, unsigned max_threads) {
  if (n == 0) return;
  unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  if (max_threads != 0) hw = std::min(hw, max_threads);
  const std::size_t threads = std::min<std::size_t>(n, hw);
  std::vector<std::exception_ptr> errors(n);
  std::atomic<std::size_t> next{0};
  // Workers take the next index until none is left: uneven tasks balance themselves.
  const auto work = [&]() {
    for (std::size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      try {
        task(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  try {
    for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  } catch (const std::system_error&) {
    // No more threads to be had: the ones started and this one do the rest.
  }
  work();
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace memplan
