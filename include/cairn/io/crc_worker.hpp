// SPDX-License-Identifier: Apache-2.0
// A helper thread that computes the CRC32C of a stream of buffers while the calling thread
// reads or writes them, so checksumming large leaves costs no extra time on a machine with a
// spare core. Buffers are processed in submission order; finish() waits and returns the CRC,
// and blocks() the CRC32Cs of the stream's blocks (io/block_crc32c.hpp).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "cairn/io/block_crc32c.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

class CrcWorker {
 public:
  CrcWorker() = default;
  CrcWorker(const CrcWorker&) = delete;
  CrcWorker& operator=(const CrcWorker&) = delete;
  ~CrcWorker() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.clear();  // the caller is unwinding: drop work, but never leave a buffer in use
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  // Starts a new stream of blocks of `block_bytes` (the previous one must be finished).
  void begin(std::uint64_t block_bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    crc_ = BlockCrc32c(block_bytes);
  }
  // The buffer must stay alive and unchanged until finish() returns.
  void submit(const void* data, std::size_t n) {
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.emplace_back(data, n);
    }
    wake_.notify_all();
  }
  std::uint32_t finish() {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return queue_.empty() && !busy_; });
    return crc_.whole();
  }
  // After finish(): the CRC32C of each block of the stream.
  std::vector<std::uint32_t> blocks() const { return crc_.blocks(); }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      auto [data, n] = queue_.front();
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      crc_.extend(data, n);  // only this thread touches it while busy_
      lock.lock();
      busy_ = false;
      if (queue_.empty()) done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::deque<std::pair<const void*, std::size_t>> queue_;
  BlockCrc32c crc_{1};
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace detail
CAIRN_END_NAMESPACE
