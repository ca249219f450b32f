// SPDX-License-Identifier: Apache-2.0
// The S3 store's transfer buffers (upload parts, read-ahead blocks, objects fetched whole),
// kept between operations and freed once the store has been idle a while.
//
// Why a pool: a large save or load moves its bytes through buffers of the part size (16 MiB);
// allocated fresh, every page of each is faulted in on first touch: 65,500 page faults for a
// load of 512 MiB, about a third of its client CPU on the benchmark machine (docs/benchmarks.md,
// "Object stores"), where the limit reads into memory touched once. Buffers the store keeps
// are touched once for all its operations. A pool never trimmed would hold that memory for
// the life of the store (a Checkpointer's lives as long as the training run), so a thread
// frees the kept buffers once none has been taken or given back for `idle` (AWS's CRT client
// trims its buffer pool the same way). At most `keep` buffers are kept; more in use at once
// (several large objects read side by side) are freed as they come back.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cairn/core/bulk_bytes.hpp"
#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE
namespace s3 {

// Bytes a transfer fills whole (a GET, or a part written from its start): not zeroed first, as
// a std::vector would (a memset of every byte on pages not touched yet); in huge pages from
// 2 MiB up (core/bulk_bytes.hpp: a process's first load of an object of megabytes faulted in
// every 4 KiB page of its buffer, most of that load's time on a VM).
struct Buffer {
  cairn::detail::BulkBytes bytes;
  std::size_t n = 0;  // bytes in use
  explicit Buffer(std::size_t size) : bytes(size), n(size) {}
  Buffer(cairn::detail::BulkBytes b, std::size_t size) : bytes(std::move(b)), n(size) {}
  unsigned char* data() { return bytes.data(); }
  const unsigned char* data() const { return bytes.data(); }
  std::size_t size() const { return n; }
  std::size_t capacity() const { return bytes.size(); }  // bytes allocated
};

class BufferPool {
 public:
  // Buffers of `block` bytes, at most `keep` of them kept, freed after `idle` without use
  // (an idle of zero keeps none: every buffer is freed when its user lets it go).
  BufferPool(std::size_t block, std::size_t keep, std::chrono::milliseconds idle)
      : state_(std::make_shared<State>()) {
    state_->block = block;
    state_->keep = idle.count() > 0 ? keep : 0;
    state_->idle = idle;
  }
  ~BufferPool() {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->closing = true;
      state_->kept.clear();
    }
    state_->wake.notify_all();
    if (trimmer_.joinable()) trimmer_.join();
  }
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // `n` bytes, contents undefined. Between half a block and a block: a kept block where there
  // is one, else a new block, which comes back here when its last user lets it go. Other
  // sizes are allocated for the caller alone (a small object would pin a whole block; a
  // larger one is rare: parts raised past 10,000).
  std::shared_ptr<Buffer> take(std::size_t n) {
    if (n < state_->block / 2) return std::make_shared<Buffer>(n);
    return take_block(n);
  }
  // The same for a buffer used briefly (a request's body, given back when it is sent), which
  // takes a block whatever its size up to one: it pins none for long.
  std::shared_ptr<Buffer> take_block(std::size_t n) {
    State& s = *state_;
    if (s.keep == 0 || n > s.block) return std::make_shared<Buffer>(n);
    cairn::detail::BulkBytes bytes;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.last_use = std::chrono::steady_clock::now();
      if (!s.kept.empty()) {
        bytes = std::move(s.kept.back());
        s.kept.pop_back();
      }
      if (!trimmer_.joinable()) trimmer_ = std::thread([state = state_] { trim(*state); });
    }
    if (!bytes) bytes = cairn::detail::BulkBytes(s.block);
    auto* buffer = new Buffer(std::move(bytes), n);
    return std::shared_ptr<Buffer>(buffer, [state = state_](Buffer* b) {
      std::unique_ptr<Buffer> owned(b);
      std::lock_guard<std::mutex> lock(state->mutex);
      state->last_use = std::chrono::steady_clock::now();
      if (!state->closing && state->kept.size() < state->keep) {
        state->kept.push_back(std::move(owned->bytes));
        state->wake.notify_all();
      }
    });
  }

  // Blocks kept now (for tests and the benchmark).
  std::size_t kept() const {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->kept.size();
  }

 private:
  struct State {
    mutable std::mutex mutex;
    std::condition_variable wake;
    std::vector<cairn::detail::BulkBytes> kept;
    std::size_t block = 0, keep = 0;
    std::chrono::milliseconds idle{0};
    std::chrono::steady_clock::time_point last_use{};
    bool closing = false;
  };

  // The trimmer: asleep while nothing is kept; once something is, wakes when the pool has
  // been idle for `idle` and frees what it keeps (outside the lock).
  static void trim(State& s) {
    std::unique_lock<std::mutex> lock(s.mutex);
    while (!s.closing) {
      if (s.kept.empty()) {
        s.wake.wait(lock);
        continue;
      }
      const auto due = s.last_use + s.idle;
      if (std::chrono::steady_clock::now() < due) {
        s.wake.wait_until(lock, due);
        continue;
      }
      std::vector<cairn::detail::BulkBytes> freed;
      freed.swap(s.kept);
      lock.unlock();
      freed.clear();
      lock.lock();
    }
  }

  std::shared_ptr<State> state_;  // shared with the buffers out and the trimmer
  std::thread trimmer_;
};

}  // namespace s3
CAIRN_END_NAMESPACE
