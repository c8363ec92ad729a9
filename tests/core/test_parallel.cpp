#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/parallel.hpp"

using memplan::parallel_for;

TEST_CASE("parallel_for runs every index exactly once") {
  for (std::size_t n : {0u, 1u, 2u, 7u, 1000u}) {
    std::vector<std::atomic<int>> runs(n);
    parallel_for(n, [&](std::size_t i) { runs[i].fetch_add(1); });
    for (std::size_t i = 0; i < n; ++i) CHECK(runs[i].load() == 1);
  }
}

TEST_CASE("parallel_for with one thread runs everything on the caller, in order") {
  std::vector<std::size_t> order;
  std::set<std::thread::id> threads;
  parallel_for(
      5,
      [&](std::size_t i) {
        order.push_back(i);
        threads.insert(std::this_thread::get_id());
      },
      1);
  CHECK(order == std::vector<std::size_t>{0, 1, 2, 3, 4});
  REQUIRE(threads.size() == 1);
  CHECK(*threads.begin() == std::this_thread::get_id());
}

TEST_CASE("parallel_for uses no more threads than tasks or the cap") {
  std::mutex mu;
  std::set<std::thread::id> threads;
  // Each task waits for a moment so that idle threads would have to take tasks of their own.
  parallel_for(
      8,
      [&](std::size_t) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        std::lock_guard<std::mutex> lock(mu);
        threads.insert(std::this_thread::get_id());
      },
      2);
  CHECK(threads.size() <= 2);
  CHECK(threads.size() >= 1);
}

TEST_CASE("parallel_for rethrows the lowest failing index after every task ran") {
  std::atomic<int> ran{0};
  const auto task = [&](std::size_t i) {
    ran.fetch_add(1);
    if (i == 3 || i == 7) throw std::runtime_error("task " + std::to_string(i));
  };
  for (unsigned cap : {0u, 1u, 4u}) {
    ran = 0;
    try {
      parallel_for(10, task, cap);
      FAIL("no exception");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "task 3");
    }
    CHECK(ran.load() == 10);
  }
}

TEST_CASE("parallel_for nested in a task, or called from several threads at once, runs every index once") {
  // The pool serves one job at a time: a call that finds it busy runs on its own thread, so a
  // task's own parallel_for (the nothing-fits path's estimators) cannot wait on itself.
  constexpr std::size_t kOuter = 6, kInner = 50;
  std::vector<std::atomic<int>> runs(kOuter * kInner);
  parallel_for(kOuter, [&](std::size_t i) {
    parallel_for(kInner, [&](std::size_t j) { runs[i * kInner + j].fetch_add(1); });
  });
  for (const auto& r : runs) CHECK(r.load() == 1);

  std::vector<std::atomic<int>> a(500), b(500);
  std::thread other([&] {
    for (int k = 0; k < 20; ++k) parallel_for(25, [&](std::size_t i) { b[static_cast<std::size_t>(k) * 25 + i].fetch_add(1); });
  });
  for (int k = 0; k < 20; ++k) parallel_for(25, [&](std::size_t i) { a[static_cast<std::size_t>(k) * 25 + i].fetch_add(1); });
  other.join();
  for (std::size_t i = 0; i < 500; ++i) {
    CHECK(a[i].load() == 1);
    CHECK(b[i].load() == 1);
  }
}
