// SPDX-License-Identifier: Apache-2.0
// Every tuning constant of cairn in one place, each with the reason (measured where it says so)
// for its value: buffer and piece sizes of the writers and readers, when the loader uses a
// second thread, how far the read-ahead goes. None of them changes the on-disk format or what a
// load returns; only how fast and with how much memory. Limits that guard against hostile
// files (format/files.hpp, safetensors/header.hpp) are not tuning and stay beside their checks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// ---- Writing and reading small leaves (checkpoint/leaf_writer.hpp, checkpoint/read_scheduler.hpp) ----

// Small leaves are gathered into one buffer and written (and read) together: 10,000 leaves of
// a few KiB would otherwise be 10,000 system calls. Large ones go straight between the file
// and the caller's memory, with no copy.
inline constexpr std::uint64_t small_leaf_bytes = std::uint64_t{1} << 20;
inline constexpr std::uint64_t staging_bytes = std::uint64_t{8} << 20;

// A load reads runs of small leaves of at most this span with one scattered request: small
// enough that each leaf is still in cache when its checksum is verified.
inline constexpr std::uint64_t small_run_bytes = std::uint64_t{1} << 20;

// Small leaves each in a file of its own (StoreReader::opens_file_to_read) are read on one
// thread per core once a load holds at least this many: below it the threads cost more than
// the opens they share. Not measured against other counts.
inline constexpr std::size_t parallel_small_files_min = 64;
// Those files are offered to the store's read_ahead (an Orbax view reads them whole together)
// up to this many, and this many stored bytes, at a time: what the load holds at once.
inline constexpr std::size_t held_files_max = 4096;
inline constexpr std::uint64_t held_files_bytes = std::uint64_t{64} << 20;

// ---- The cast kernels (kernels/cast.hpp) ----

// Host memory: the same conversion over blocks of a fixed number of elements, each a
// separate call of a Thrust for_each (parallel under OpenMP). A fixed trip count over
// non-aliasing pointers is what lets compilers vectorize the loop at -O2; the range check
// of a narrowing cast is an OR over the block, done before the block is converted.
inline constexpr std::size_t cast_block_elements = 4096;

// ---- The N-d box copy on the host (kernels/box_copy.hpp) ----

// The host box copy hands Thrust segments of this many bytes (one for_each each): large enough
// that the per-call cost vanishes, small enough to stay in L2 between source and destination.
// Not measured against other sizes: the kernel runs at 0.7-1.15x memcpy with it (benchmarks.md,
// "Sharding").
inline constexpr std::uint64_t host_copy_segment_bytes = 256 << 10;

// ---- Reading data files (checkpoint/box_reader.hpp, checkpoint/read_scheduler.hpp) ----

// A chunk that goes through the box copy or a cast (not straight into its target) is read in
// pieces of at most this many bytes, the next piece on a helper thread while one is checked
// and scattered: it bounds the staging memory of a resharding or casting load (two pieces, and
// a device staging buffer of one piece). Not measured against other sizes.
inline constexpr std::uint64_t read_piece_bytes = std::uint64_t{16} << 20;
// Two small leaves whose bytes are at most this far apart in a file join one scattered read
// (the gap is read and dropped): one page, the alignment padding between small leaves being at
// most 64 bytes, so every run of one save's leaves joins; a partial load's unrelated leaves
// further apart are read on their own. Not measured against other sizes.
inline constexpr std::uint64_t coalesce_gap_bytes = 4096;

// A large leaf is read straight into its target in pieces of this size, each checksummed
// right after it arrives: small enough to be still in the core's L2 cache. With 4 MiB pieces
// the checksum read them back from memory and a warm 1 GiB load ran at 0.7x a plain read;
// with 256 KiB, 0.86-0.90x (docs/benchmarks.md).
inline constexpr std::uint64_t crc_piece_bytes = std::uint64_t{256} << 10;

// A zarr shard (Orbax's sharding_indexed chunk) of at most this many bytes is read whole, its
// index and its one chunk together (orbax/checkpoint.hpp): one read of a small array instead of
// two, where reading the rest of a larger shard would cost more than the second read.
inline constexpr std::uint64_t small_shard_bytes = std::uint64_t{64} << 10;
// A zstd chunk stored in more bytes than this is read as it decodes, this many bytes at a
// time (orbax/checkpoint.hpp's BlobReader::stream), not whole before it: the memory a load
// takes beside its target stays this window, whatever the chunk's size. Not measured against
// other sizes.
inline constexpr std::uint64_t zstd_input_window_bytes = std::uint64_t{8} << 20;

// A chunk read straight into device memory is read in pieces of this size into two pinned
// buffers, one piece crossing to the device while the next is read (box_reader.hpp,
// read_direct_to_device): large enough that each copy runs at the link's speed, small enough
// that the last piece's copy, which nothing overlaps, is short. Not measured against other sizes.
inline constexpr std::uint64_t device_read_piece_bytes = std::uint64_t{8} << 20;

// A chunk of at least this many bytes read straight into host memory is read by two threads,
// each reading and checksumming half of it (box_reader.hpp).
inline constexpr std::uint64_t parallel_read_bytes = std::uint64_t{4} << 20;

// ---- The read-ahead of a load (checkpoint/read_ahead.hpp) ----

// A metadata text shorter than this parses in well under a millisecond (a few large leaves):
// nothing to overlap (with the read-ahead here, with opening its OCDBT database in an Orbax
// import: orbax/checkpoint.hpp).
inline constexpr std::size_t read_ahead_min_metadata_bytes = 64 << 10;

// An Orbax import of at least this many arrays in an OCDBT database makes their records on two
// threads, half each (orbax/checkpoint.hpp, PytreeReader::add_on_two_threads): about 0.8 us of
// one core an array, against ~0.1 ms to start the thread and join the halves.
inline constexpr std::size_t parallel_records_min = 2048;

// At most this much is fetched, whatever the checkpoint's size: a load that reads only some
// leaves should not fill the page cache with the others.
inline constexpr std::uint64_t read_ahead_max_bytes = 256ull << 20;

// ---- Writing sharded, device and cast leaves (checkpoint/leaf_writer.hpp) ----

// Pieces in which device shards cross to the host (and casts run) while being written.
inline constexpr std::uint64_t write_piece_bytes = std::uint64_t{8} << 20;

// ---- Converting (inspect/convert_impl.hpp) ----

// A conversion reads its source's leaves about this many bytes at a time (a larger leaf alone),
// each batch when the writer reaches the first of its leaves, and lets each leaf go once it is
// written: it holds about a batch (or the largest leaf), not the whole selection. Large enough
// that what each read costs beside its bytes (the source's metadata read again, a bucket's
// round trips) is spread over many of them. ConvertOptions::batch_bytes overrides it.
inline constexpr std::uint64_t convert_batch_bytes = std::uint64_t{256} << 20;

// ---- Orbax export (orbax/export.hpp) ----

// A directory per parameter on a bucket writes the files of arrays whose chunk is at most this
// large side by side (Store::parallel_reads at once); larger chunks, each uploaded in parallel
// parts already, one after another. The memory of the writes in flight stays at about
// this times the store's concurrency (16 MiB at the default 16).
inline constexpr std::uint64_t export_side_by_side_bytes = std::uint64_t{1} << 20;

// ---- CRC32C (io/crc32c.hpp, io/block_crc32c.hpp) ----

// A chunk larger than this stores the CRC32C of each block of this many bytes (docs/format.md,
// "Block checksums"), so that a load reading part of it reads at most one block more at each
// end of each run it needs, and verifies all of it. Readers take the size from each chunk's
// record: changing it changes new checkpoints, not what any checkpoint means. Chosen by
// measurement among 64 KiB, 256 KiB and 1 MiB (docs/benchmarks.md, "Verified partial reads").
inline constexpr std::uint64_t crc_block_bytes = std::uint64_t{256} << 10;

// A chunk without block checksums (written before them) that a load needs only part of is
// read whole, and so verified, when it is at most this large; a larger one is read in part
// and its bytes are counted unverified (unless LoadOptions::require_verified). One MiB: the
// whole read then costs at most what a resharded load's blocks cost per run.
inline constexpr std::uint64_t verify_whole_chunk_bytes = std::uint64_t{1} << 20;

// The hardware CRC32C runs three independent streams over blocks of this many bytes each and
// combines them with a shift table (the instruction has latency 3 and throughput 1): large
// enough that the combine costs little, small enough that inputs of a few blocks use it. The
// checksum runs at the speed of the copy with it (benchmarks.md, "the checksum at the speed of
// the copy").
inline constexpr std::size_t crc32c_stream_block = 8192;

}  // namespace detail
CAIRN_END_NAMESPACE
