#include "core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace memplan {

namespace {

// One parallel_for's tasks: workers and the caller take the next index until none is left, so
// uneven tasks balance themselves.
struct Job {
  std::size_t n = 0;
  const std::function<void(std::size_t)>* task = nullptr;
  std::vector<std::exception_ptr>* errors = nullptr;
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> done{0};  // tasks finished
  std::size_t helpers = 0;           // workers allowed to join this job

  void work() {
    for (std::size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      try {
        (*task)(i);
      } catch (...) {
        (*errors)[i] = std::current_exception();
      }
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

// Workers started once and kept (starting a thread costs about 40 µs on a small VM, more than
// a short reduced-model run; waking a waiting one costs a few). One job at a time: a
// parallel_for that finds the pool busy (another thread's, or one nested in a task) runs its
// tasks on its own thread. The pool is never destroyed: its threads wait until the process ends.
class Pool {
 public:
  static Pool& get() {
    static Pool* pool = new Pool();  // NOLINT: leaked on purpose (see above)
    return *pool;
  }

  // Runs the job with up to `helpers` workers; false (nothing run) when the pool is busy.
  bool run(Job& job) {
    {
      const std::lock_guard<std::mutex> lock(mu_);  // held only briefly: never while a task runs
      if (job_ != nullptr) return false;
      start_workers(job.helpers);
      job_ = &job;
      joined_ = 0;
      ++generation_;
    }
    wake_.notify_all();
    job.work();
    std::unique_lock<std::mutex> lock(mu_);
    // Every index taken: wait for the ones workers still run, and until no worker holds the job.
    finished_.wait(lock, [&] { return job.done.load(std::memory_order_acquire) == job.n && active_ == 0; });
    job_ = nullptr;
    return true;
  }

 private:
  void start_workers(std::size_t want) {  // under mu_
    while (workers_ < want) {
      try {
        std::thread(&Pool::loop, this).detach();
      } catch (const std::system_error&) {
        return;  // no more threads to be had: the ones there and the caller do the work
      }
      ++workers_;
    }
  }

  void loop() {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      Job* job = job_;
      if (job == nullptr || joined_ >= job->helpers) continue;
      ++joined_;
      ++active_;
      lock.unlock();
      job->work();
      lock.lock();
      --active_;
      finished_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_, finished_;
  Job* job_ = nullptr;
  std::uint64_t generation_ = 0;
  std::size_t workers_ = 0, joined_ = 0, active_ = 0;
};

}  // namespace

void parallel_for(std::size_t n, const std::function<void(std::size_t)>& task, unsigned max_threads) {
  if (n == 0) return;
  unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  if (max_threads != 0) hw = std::min(hw, max_threads);
  const std::size_t threads = std::min<std::size_t>(n, hw);
  std::vector<std::exception_ptr> errors(n);
  Job job;
  job.n = n;
  job.task = &task;
  job.errors = &errors;
  job.helpers = threads - 1;
  if (threads <= 1 || !Pool::get().run(job)) job.work();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace memplan
