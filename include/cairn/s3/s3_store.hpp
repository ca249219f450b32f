// SPDX-License-Identifier: Apache-2.0
// S3Store: checkpoints in an S3-compatible object store (AWS S3, Google Cloud Storage through
// its XML API, MinIO, Ceph RGW, Cloudflare R2, CoreWeave, any endpoint), on the Store seam, so
// save, load, the Checkpointer, the safetensors functions and the CLI work on s3:// and gs://
// URIs unchanged. Keys are object keys in one bucket; describe() names them s3://bucket/key.
//
// Object stores have no rename, so a checkpoint commits by its marker, written last
// (docs/format.md, "Checkpoints in object stores"):
//
//   <key>/_CHECKPOINT                  the commit: names the generation that holds the checkpoint
//   <key>/.cairn-gen-<id>/...          one save's objects (_CHECKPOINT, _METADATA, data-*.bin)
//
// A save writes every object of its generation, checks each is there with its size, then
// writes <key>/_CHECKPOINT: create-only (If-None-Match: *) for a new key, so two racing saves
// cannot both commit; If-Match on the marker it replaces for an overwrite, so the switch from
// the old generation to the new is one PUT, atomic for every reader. Readers trust the marker
// and never a listing (readable_checkpoint). A crash at any moment leaves the previous
// checkpoint whole: its marker still names its generation. Generations no marker names are
// the leftovers of dead saves, removed once older than S3Options::leftover_age (younger ones
// may be a save in progress in another process).
#pragma once

#include <algorithm>
#include <bit>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cairn/core/json.hpp"
#include "cairn/core/parallel.hpp"
#include "cairn/s3/arriving_body.hpp"
#include "cairn/s3/buffer_pool.hpp"
#include "cairn/s3/client.hpp"
#include "cairn/s3/commit_marker.hpp"
#include "cairn/store/location.hpp"
#include "cairn/store/store.hpp"

CAIRN_BEGIN_NAMESPACE

class S3Store : public Store, public std::enable_shared_from_this<S3Store> {
 public:
  // A store over one bucket, or over the keys under `root` in it (a store of its own for a
  // team or a test: its keys, its listings and its cleanup stay under that prefix). `scheme`
  // is "s3" or "gs" (Google Cloud Storage's XML API, with HMAC keys as the credentials).
  S3Store(const std::string& scheme, const std::string& bucket, S3Options options = {}, const std::string& root = {});
  // Declared here and defined below, out of the class: with CAIRN_SEPARATE_COMPILATION it is
  // the class's key function, so its virtual table, and with it every member below, is
  // compiled once, in src/s3.cpp, not in each file that makes an S3Store.
  ~S3Store() override;

  const std::string& bucket() const { return client_.bucket(); }
  const S3Options& options() const { return options_; }
  // Requests sent so far, retries included.
  std::uint64_t requests() const { return client_.requests(); }
  // Transfer buffers the store keeps for its next operation (S3Options::keep_buffers_for).
  std::size_t kept_buffers() const { return buffers_.kept(); }

  std::string describe(const std::string& key) const override { return client_.uri(key); }
  int parallel_reads() const override { return options_.concurrency; }
  bool readers_hold_files() const override { return false; }  // a reader is a key, a size and an ETag

  std::unique_ptr<StoreReader> open(const std::string& key) const override {
    // An object a load's read-ahead fetched (or is fetching): read from memory; where the
    // fetch failed, read as if there had been none.
    if (auto held = fetched(key)) {
      const Fetched& got = held->get();
      if (!got.error) return std::make_unique<HeldReader>(got.bytes, describe(key));
    }
    // A file of a checkpoint written inline in its marker: read from there.
    if (auto in = open_inline(key)) return in;
    // An object of a committed generation: its size is the marker's, and it never changes
    // (a generation's objects are written once), so no HEAD and no ETag to pin reads to.
    if (const auto size = known_size(key)) return std::make_unique<Reader>(const_cast<S3Store&>(*this), key, s3::ObjectInfo{*size, {}});
    const auto info = client().head(key);
    if (!info) throw Error(ErrorKind::not_found, "no such object", describe(key));
    return std::make_unique<Reader>(const_cast<S3Store&>(*this), key, *info);
  }

  // Store::read_whole: one GET, refused past `limit` (an Orbax checkpoint's small JSON files
  // were each a HEAD for the size, then a GET). An object whose size the marker gives, or
  // that a read-ahead holds, is opened as before: that costs no HEAD either.
  std::string read_whole(const std::string& key, std::uint64_t limit) const override {
    if (fetched(key) || looked_up(key).in || known_size(key)) return Store::read_whole(key, limit);
    return client().get(key, limit);
  }

  // Store::read_whole_each: the reads sent at once (`concurrency` at most), each as
  // read_whole: a load's marker, _METADATA and _USER_METADATA in one round trip where they
  // took three, one after another (docs/object-store.md, "Requests and cost").
  std::vector<WholeBlob> read_whole_each(const std::vector<std::pair<std::string, std::uint64_t>>& reads) const override {
    std::vector<WholeBlob> out(reads.size());
    detail::for_each_index(reads.size(), options_.concurrency, [&](std::size_t i) {
      try {
        out[i].bytes = read_whole(reads[i].first, reads[i].second);
      } catch (...) {
        out[i].error = std::current_exception();
      }
    });
    return out;
  }

  std::unique_ptr<StoreWriter> create(const std::string& key) override {
    // Inside a generation (a save's own, named with 64 random bits) nothing can be there yet:
    // no HEAD (4 requests of a save's 15). Elsewhere, blobs are written once: asked first, and
    // the PUT is create-only besides.
    // Under an export written in place (stage_foreign), which found nothing under its key
    // and writes each key once, the same holds: no HEAD either (half the requests of an
    // export of a directory per parameter).
    const std::string export_key = in_place_export_of(key);
    if (!has_internal_segment(key) && export_key.empty() && client_.head(key))
      throw Error(ErrorKind::already_exists, "an object already exists here", describe(key));
    if (!export_key.empty()) {
      std::lock_guard<std::mutex> lock(in_place_mutex_);
      if (auto it = in_place_.find(export_key); it != in_place_.end())
        it->second.last = key;  // the format's commit is its last (InPlaceStaging)
    }
    return std::make_unique<Writer>(*this, key, s3::WriteCondition{true, {}}, false);
  }

  // Store::write_whole_each: the PUTs sent at once (`concurrency` at most), inside a
  // save's generation, which nothing reads before its marker names it: a save's _METADATA,
  // _USER_METADATA and the generation's _CHECKPOINT in one round trip where they took three.
  // Elsewhere (under an export written in place, whose last object created is its commit)
  // one after another, as the default.
  void write_whole_each(const std::vector<std::pair<std::string, std::string_view>>& blobs) override {
    bool together = blobs.size() > 1;
    for (const auto& b : blobs) together = together && has_internal_segment(b.first);
    if (!together) return Store::write_whole_each(blobs);
    // Every write ends before the first error in order is thrown (for_each_index).
    detail::for_each_index(blobs.size(), options_.concurrency, [&](std::size_t i) {
      auto w = create(blobs[i].first);
      w->write_at(blobs[i].second.data(), blobs[i].second.size(), 0);
      w->finish(blobs[i].second.size());
    });
  }

  // Store::read_ahead: while a load parses the metadata of a checkpoint of many leaves, its
  // data objects are fetched whole into memory, each with one GET, `concurrency` at once, and
  // its reads then come from there (a load of 10,000 small leaves waited for its data object
  // only after parsing and planning: docs/object-store.md). Only objects whose size the
  // marker gives (no HEAD is added) and of at most read_part_size each (a larger one is read
  // in parallel ranges by its reader), up to `bytes` and read_part_size * concurrency in all.
  // The handle keeps them: destroyed (the load is done, or reads only some leaves), it waits
  // for its fetches and lets the bytes go. Requests: none added (each object is read once).
  std::unique_ptr<StoreReadAhead> read_ahead(const std::vector<std::string>& keys, std::uint64_t bytes) const override {
    const std::uint64_t part = options_.read_part_size;
    const std::uint64_t budget = std::min(bytes, part * static_cast<std::uint64_t>(options_.concurrency));
    auto ahead = std::make_unique<ReadAhead>(*this);
    std::uint64_t total = 0;
    for (const std::string& key : keys) {
      const auto size = known_size(key);
      if (!size || is_inline(key) || *size > part || total + *size > budget || ahead->fetches.size() >= static_cast<std::size_t>(options_.concurrency))
        continue;
      const std::uint64_t n = *size;
      std::lock_guard<std::mutex> lock(fetched_mutex_);
      if (fetched_.count(key)) continue;  // another load's read-ahead has it
      total += n;
      std::shared_future<Fetched> f = std::async(std::launch::async, [this, key, n] {
                                        try {
                                          auto b = buffers_.take(static_cast<std::size_t>(n));
                                          if (n) client().get_range(key, b->data(), n, 0, {});
                                          return Fetched{Bytes(std::move(b)), std::nullopt};
                                        } catch (const Error& e) {
                                          return Fetched{nullptr, e};
                                        } catch (const std::exception& e) {  // out of memory: the reader tries again
                                          return Fetched{nullptr, Error(ErrorKind::io, e.what(), describe(key))};
                                        }
                                      }).share();
      fetched_.emplace(key, f);
      ahead->fetches.emplace_back(key, std::move(f));
    }
    if (ahead->fetches.empty()) return nullptr;
    return ahead;
  }

  // Store::copy_blob: CopyObject (UploadPartCopy in parts above copy_part_size), where both
  // keys are in one bucket of one endpoint; any other source: false, and the caller copies.
  // The source's size comes from its marker (or a HEAD, which also pins the copy to its ETag).
  bool copy_blob(const Store& from_store, const std::string& from, const std::string& to) override {
    const auto* src = dynamic_cast<const S3Store*>(&from_store);
    if (!src || src->client_.bucket() != client_.bucket() || src->client_.config().endpoint != client_.config().endpoint ||
        src->client_.config().scheme != client_.config().scheme)
      return false;
    if (src->is_inline(from)) return false;  // a range of a marker: copied by the caller
    s3::ObjectInfo info;
    if (const auto size = src->known_size(from)) {
      info.size = *size;
    } else {
      const auto head = src->client().head(from);
      if (!head) throw Error(ErrorKind::not_found, "no such object", src->describe(from));
      info = *head;
    }
    if (!has_internal_segment(to) && client_.head(to))
      throw Error(ErrorKind::already_exists, "an object already exists here", describe(to));
    wait_for_looks(to);
    // Keys are relative to each store's root: the copy names the source by its whole key.
    client_.copy(src->client_.bucket_key(from), to, info.size, info.etag);
    return true;
  }

  bool exists(const std::string& key) const override {
    if (key.empty()) return true;  // the bucket
    if (const auto l = looked_up(key); l.in) return key == l.gen || l.in->files.count(l.name);
    if (known_size(key) || client().head(key)) return true;
    return !client().list(key + "/", false, 1).objects.empty();
  }
  bool is_blob(const std::string& key) const override {
    if (const auto l = looked_up(key); l.in) return key != l.gen && l.in->files.count(l.name);
    return !key.empty() && (known_size(key).has_value() || client().head(key).has_value());
  }

  std::vector<StoreEntry> list(const std::string& prefix) const override {
    // A checkpoint written inline: its files are in its marker, not objects.
    if (const auto l = looked_up(prefix); l.in) {
      std::vector<StoreEntry> out;
      if (prefix == l.gen)
        for (const auto& [name, f] : l.in->files) out.push_back({name, false});
      return out;
    }
    const std::string p = prefix.empty() ? std::string() : prefix + "/";
    const s3::Listing l = client().list(p, options_.delimiter_listing);
    std::vector<StoreEntry> out;
    std::set<std::string> prefixes;
    for (const auto& o : l.objects) {
      if (o.key.size() <= p.size()) continue;
      const std::string rest = o.key.substr(p.size());
      const auto slash = rest.find('/');
      if (slash == std::string::npos) out.push_back({rest, false});
      else prefixes.insert(rest.substr(0, slash));
    }
    for (const auto& cp : l.prefixes) {
      std::string n = cp.substr(p.size());
      if (!n.empty() && n.back() == '/') n.pop_back();
      if (!n.empty()) prefixes.insert(n);
    }
    for (const auto& n : prefixes) out.push_back({n, true});
    return out;
  }

  void remove(const std::string& key) override {
    std::vector<std::string> keys;
    // A save's generation is a prefix, never an object: no HEAD for it (one request fewer per
    // overwrite, whose old generation goes).
    if (generation_of(key) != key && client_.head(key)) keys.push_back(key);
    for (const auto& o : client_.list(key + "/", false).objects) keys.push_back(o.key);
    client_.remove(keys);
    forget_sizes(key);
  }

  // The looks at the key (what is there, the marker an overwrite replaces, the leftovers of
  // dead saves) are answered after stage() returns: a round trip or two (3.5-8 ms on loopback,
  // tens of milliseconds on AWS) that the save's own work before its first write (the walk,
  // the encoding; 5 ms for 10,000 small leaves) no longer waits for. The generation is this
  // save's alone (64 random bits), so nothing is risked by naming it at once: every request
  // that would write under it, and the publish, waits for the looks and throws their refusal
  // (wait_for_looks), so a refused save sends nothing. CheckpointStaging::checked.
  std::unique_ptr<CheckpointStaging> stage(const std::string& key_in, bool overwrite) override {
    const std::string key = detail::normalize_key(key_in);
    if (key.empty()) throw Error(ErrorKind::invalid_argument, "a checkpoint needs a key under the bucket", describe(key));
    if (has_internal_segment(key))
      throw Error(ErrorKind::invalid_argument, "checkpoint keys may not contain a segment starting with '.cairn-'", describe(key));
    auto staging = std::make_unique<Staging>(*this, key, new_generation_name());
    Staging* s = staging.get();
    staging->look([this, s, key, overwrite] { look_before_save(*s, key, overwrite); });
    return staging;
  }

  // Store::stage_foreign: written in place (a foreign format's readers know no generation
  // or marker), refused where anything is at or under the key; published, nothing is added
  // (the format's last file, written last, is its commit); abandoned, what it wrote is removed.
  std::unique_ptr<CheckpointStaging> stage_foreign(const std::string& key_in) override {
    const std::string key = detail::normalize_key(key_in);
    if (key.empty()) throw Error(ErrorKind::invalid_argument, "a checkpoint needs a key under the bucket", describe(key));
    if (has_internal_segment(key))
      throw Error(ErrorKind::invalid_argument, "checkpoint keys may not contain a segment starting with '.cairn-'", describe(key));
    auto listing = std::async(std::launch::async, [this, &key] { return client_.list(key + "/", false, 1); });  // with the HEAD
    if (client_.head(key) || !listing.get().objects.empty())
      throw Error(ErrorKind::already_exists, "something is already here; cairn will not write into it", describe(key));
    return std::make_unique<InPlaceStaging>(*this, key);
  }

  std::string readable_checkpoint(const std::string& key) const override {
    if (has_internal_segment(key))
      throw Error(ErrorKind::incomplete, "this is a save's generation, read through the checkpoint's key", describe(key));
    const std::string gen = read_generation(key);
    return gen.empty() ? key : detail::join_key(key, gen);
  }
  // Store::readable_checkpoint_to_load: the marker's GET brings a checkpoint written inline
  // whole (16 MiB at most), so that a load of a small checkpoint is one request.
  std::string readable_checkpoint_to_load(const std::string& key) const override {
    if (has_internal_segment(key))
      throw Error(ErrorKind::incomplete, "this is a save's generation, read through the checkpoint's key", describe(key));
    const std::string gen = read_generation(key, nullptr, nullptr, max_inline_read());
    return gen.empty() ? key : detail::join_key(key, gen);
  }

  bool is_internal_name(const std::string& name) const override { return name.rfind(generation_prefix, 0) == 0; }

  void clean_leftovers(const std::string& prefix) override {
    try {
      const std::string p = prefix.empty() ? std::string() : prefix + "/";
      const s3::Listing all = client_.list(p, false);
      std::map<std::string, s3::Listing> by_child;  // the objects of each checkpoint under the prefix
      for (const auto& o : all.objects) {
        const std::string rest = o.key.substr(p.size());
        const auto slash = rest.find('/');
        if (slash != std::string::npos) by_child[rest.substr(0, slash)].objects.push_back(o);
      }
      for (const auto& [child, listing] : by_child) {
        const std::string key = p + child;
        bool has_marker = false;
        std::int64_t marker_written = 0;  // the marker's LastModified (s)
        std::set<std::string> generations;
        for (const auto& o : listing.objects) {
          if (o.key == key + "/" + detail::commit_marker_name) {
            has_marker = true;
            marker_written = s3::parse_iso8601(o.last_modified);
          }
          const std::string first = o.key.substr(key.size() + 1, o.key.find('/', key.size() + 1) - key.size() - 1);
          if (is_internal_name(first)) generations.insert(first);
        }
        // A checkpoint with one generation beside its marker (every step of a Checkpointer's
        // root, retention having removed the rest) has nothing dead: its marker is not read
        // (a GET per step, one after another, was most of opening a root on a bucket). Unless
        // an object of that generation was written after the marker: a generation is whole
        // before its marker is written, so that one is another save's, beside the marker of
        // an inline checkpoint (whose generation has no objects of its own). Then the marker
        // is read, and the generation is dead where it is not the one named (and old enough).
        // Where the marker names some other generation otherwise, that checkpoint is damaged
        // and the lone generation stays for whoever repairs it.
        std::string current;
        if (has_marker && generations.size() == 1) {
          current = *generations.begin();
          const std::string gen_prefix = key + "/" + current + "/";
          for (const auto& o : listing.objects)
            if (o.key.compare(0, gen_prefix.size(), gen_prefix) == 0 && s3::parse_iso8601(o.last_modified) > marker_written) {
              current = read_generation(key);
              break;
            }
        } else if (has_marker && generations.size() > 1) {
          current = read_generation(key);
        }
        remove_dead_generations(key, listing, current);
      }
      abort_old_uploads(p);
    } catch (const Error&) {
      // Best effort: a failed cleanup leaves leftovers for the next one.
    }
  }

  void remove_checkpoints(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) {
      const std::string key = detail::normalize_key(k);
      client_.remove({detail::join_key(key, detail::commit_marker_name)});  // no longer a checkpoint
      remove(key);
    }
  }

  void write_atomically(const std::string& key, const std::string& content) override {
    client_.put(key, content.data(), content.size());  // a PUT replaces an object whole, at once
  }

  std::unique_ptr<StoreWriter> create_atomically(const std::string& key_in, bool overwrite) override {
    const std::string key = detail::normalize_key(key_in);
    if (!client_.list(key + "/", false, 1).objects.empty())
      throw Error(ErrorKind::already_exists, "this key holds other objects; cairn will not replace it", describe(key));
    if (!overwrite && client_.head(key))
      throw Error(ErrorKind::already_exists, "an object already exists here (pass overwrite to replace it)", describe(key));
    return std::make_unique<Writer>(*this, key, s3::WriteCondition{!overwrite, {}}, !overwrite);
  }

 private:
  static constexpr const char* generation_prefix = s3::generation_prefix;

  static S3Options checked(S3Options o) {
    if (o.part_size < 1024 || o.part_size > (std::uint64_t{5} << 30))
      throw Error(ErrorKind::invalid_argument, "S3Options::part_size is 1 KiB to 5 GiB (AWS wants at least 5 MiB)");
    if (o.concurrency < 1 || o.concurrency > 256) throw Error(ErrorKind::invalid_argument, "S3Options::concurrency is 1 to 256");
    if (o.read_part_size < 1024) throw Error(ErrorKind::invalid_argument, "S3Options::read_part_size is at least 1 KiB");
    if (o.inline_limit > max_inline_bytes) throw Error(ErrorKind::invalid_argument, "S3Options::inline_limit is at most 16 MiB");
    return o;
  }

  s3::Client& client() const { return const_cast<s3::Client&>(client_); }

  bool has_internal_segment(const std::string& key) const {
    std::size_t at = 0;
    while (at <= key.size()) {
      const auto slash = key.find('/', at);
      if (is_internal_name(key.substr(at, slash == std::string::npos ? std::string::npos : slash - at))) return true;
      if (slash == std::string::npos) break;
      at = slash + 1;
    }
    return false;
  }

  static std::string new_generation_name() {
    // Sortable by time, unique across processes: the UTC time, then 64 random bits.
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    thread_local std::mt19937_64 rng{std::random_device{}() ^ static_cast<std::uint64_t>(now.count())};
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%013lld-%016llx", generation_prefix,
                  static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(now).count()),
                  static_cast<unsigned long long>(rng()));
    return buf;
  }
  static std::int64_t generation_time_ms(const std::string& gen) {
    return std::strtoll(gen.c_str() + std::strlen(generation_prefix), nullptr, 10);
  }

  // The generation the marker at `key` names; "" where there is no marker. A marker that is
  // not cairn's object-store marker is corrupt (never guessed at). The marker's ETag, of the
  // version read, into `etag` where given; whether it holds its checkpoint inline into
  // `inlined`. Its first `first` bytes are read (a ranged GET): the marker's line, and as much
  // of a checkpoint written inline after it as that leaves room for; the rest of such a
  // checkpoint is read from the marker when it is asked for. A line longer than that (a
  // generation of thousands of objects) is read again, up to max_marker_line.
  std::string read_generation(const std::string& key, std::string* etag = nullptr, bool* inlined = nullptr,
                              std::uint64_t first = first_marker_read) const {
    const std::string marker = detail::join_key(key, detail::commit_marker_name);
    std::string version;
    std::shared_ptr<const s3::Buffer> text;
    std::shared_ptr<const s3::ArrivingBody> arriving;  // null: all of `text` is in
    std::uint64_t total = 0, readable = 0;  // the marker's size; how many of text's bytes are in
    try {
      if (first > max_marker_line) {
        // A load's read of a marker that may hold its checkpoint inline (megabytes): on a
        // thread of its own, and looked at once its first line is in (s3/arriving_body.hpp).
        auto body = std::make_shared<s3::ArrivingBody>(first, describe(marker));
        start_transfer([this, marker, first, body] {
          try {
            body->finish(client().get_first_streamed(marker, first, *body));
          } catch (const Error& e) {
            body->fail(e);
          } catch (const std::exception& e) {
            body->fail(Error(ErrorKind::io, e.what(), describe(marker)));
          } catch (...) {
            body->fail(Error(ErrorKind::io, "the marker's GET failed", describe(marker)));
          }
        });
        readable = body->wait_for_line();
        text = body->bytes();
        total = client().first_bytes_total(body->response(), text->size(), marker);
        version = body->response().header("etag");
        if (readable < text->size()) arriving = std::move(body);
      } else {
        s3::Buffer got = client().get_first(marker, first, total, &version);
        const bool has_line = got.size() && std::memchr(got.data(), '\n', got.size()) != nullptr;
        if (!has_line && total > got.size() && got.size() < max_marker_line)
          got = client().get_first(marker, max_marker_line, total, &version);
        readable = got.size();
        text = std::make_shared<const s3::Buffer>(std::move(got));
      }
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::not_found) return {};
      throw;
    }
    if (etag) *etag = version;
    // The marker is the first line; a checkpoint written inline follows it (format.md).
    s3::CommitMarker m;
    try {
      m = s3::parse_commit_marker(std::string_view(reinterpret_cast<const char*>(text->data()), readable), total);
    } catch (const Error& e) {
      throw Error(e.kind(), e.message(), describe(marker));
    }
    const std::string gen_key = detail::join_key(key, m.generation);
    remember_sizes(gen_key, m.sizes);
    if (inlined) *inlined = m.inlined;
    if (m.inlined) remember_inline(gen_key, marker, std::move(m.files), std::move(text), std::move(arriving), version);
    return m.generation;
  }

  // A checkpoint written inline (Staging::publish): its files are byte ranges of the commit
  // marker, after its first line, and a reader reads them from there: from the bytes the
  // marker's GET brought, or with ranged GETs of the marker pinned to the ETag it had.
  struct InlineCheckpoint {
    std::string marker_key, etag;
    std::map<std::string, s3::InlineFile> files;  // (parse_commit_marker checked each is in the marker)
    std::shared_ptr<const s3::Buffer> head;  // the marker's first bytes, as read (null: let go)
    // Where head's bytes are still arriving: what a reader waits on (null: all in).
    std::shared_ptr<const s3::ArrivingBody> arriving;
  };
  void remember_inline(const std::string& gen_key, const std::string& marker, std::map<std::string, s3::InlineFile> files,
                       std::shared_ptr<const s3::Buffer> text, std::shared_ptr<const s3::ArrivingBody> arriving,
                       const std::string& etag) const {
    auto c = std::make_shared<InlineCheckpoint>();
    c->marker_key = marker;
    c->etag = etag;
    c->files = std::move(files);
    c->head = std::move(text);
    c->arriving = std::move(arriving);
    std::lock_guard<std::mutex> lock(known_mutex_);
    // The same version read again (a check that the checkpoint did not change): the longer
    // read of its bytes is kept.
    if (const auto it = inline_.find(gen_key); it != inline_.end() && it->second->etag == c->etag && it->second->head &&
                                               it->second->head->size() >= c->head->size())
      return;
    if (inline_.size() > 4096) {  // names of old checkpoints: let go (read again from their markers)
      inline_.clear();
      inline_bytes_ = 0;
    }
    auto& slot = inline_[gen_key];
    if (slot && slot->head) inline_bytes_ -= slot->head->bytes.allocated();
    slot = c;
    inline_bytes_ += c->head->bytes.allocated();
    // The bytes of at most 64 MiB of markers (and of the one just read) are kept; the others'
    // are let go, and read again, in ranges of their markers, where they are still asked for.
    const std::uint64_t keep = std::uint64_t{64} << 20;
    for (auto it = inline_.begin(); inline_bytes_ > keep && it != inline_.end(); ++it) {
      if (it->first == gen_key || !it->second->head) continue;
      inline_bytes_ -= it->second->head->bytes.allocated();
      auto copy = std::make_shared<InlineCheckpoint>(*it->second);
      copy->head = nullptr;
      copy->arriving = nullptr;
      it->second = copy;
    }
  }
  std::shared_ptr<const InlineCheckpoint> inline_checkpoint(const std::string& gen_key) const {
    std::lock_guard<std::mutex> lock(known_mutex_);
    const auto it = inline_.find(gen_key);
    return it == inline_.end() ? nullptr : it->second;
  }
  // What is known of the generation `key` lies in (its marker read first where nothing is:
  // learn_generation): the checkpoint written inline there, if it is one, and the name of
  // `key` in it ("" for the generation itself).
  struct LookedUp {
    std::string gen, name;
    std::shared_ptr<const InlineCheckpoint> in;  // null: not in a checkpoint written inline
  };
  LookedUp looked_up(const std::string& key) const {
    LookedUp l;
    l.gen = generation_of(key);
    if (l.gen.empty()) return l;
    learn_generation(l.gen);
    l.in = inline_checkpoint(l.gen);
    if (key.size() > l.gen.size() + 1) l.name = key.substr(l.gen.size() + 1);
    return l;
  }
  // A reader of `key` where it lies in a checkpoint written inline; null where it does not.
  std::unique_ptr<StoreReader> open_inline(const std::string& key) const {
    const LookedUp l = looked_up(key);
    if (!l.in) return nullptr;
    const auto f = l.in->files.find(l.name);
    if (f == l.in->files.end())
      throw Error(ErrorKind::not_found, "no such file in this checkpoint (written inline in its commit marker)", describe(key));
    const auto& c = l.in;
    const s3::InlineFile& file = f->second;
    if (c->head && file.offset + file.size <= c->head->size())
      return std::make_unique<HeldReader>(c->head, file.offset, file.size, describe(key), c->arriving);
    return std::make_unique<Reader>(const_cast<S3Store&>(*this), c->marker_key, s3::ObjectInfo{file.size, c->etag}, file.offset,
                                    describe(key));
  }
  bool is_inline(const std::string& key) const {
    const std::string gen = generation_of(key);
    return !gen.empty() && inline_checkpoint(gen) != nullptr;
  }
  // Where nothing is known of the generation `gen_key` (a rank that did not read the marker
  // itself: the primary read it and told the others its generation), its checkpoint's marker
  // is read once, for the sizes of its objects and for a checkpoint written inline: its first
  // 64 KiB, as a look at the metadata reads it (each rank then reads its own leaves' ranges).
  void learn_generation(const std::string& gen_key) const {
    {
      std::lock_guard<std::mutex> lock(known_mutex_);
      if (inline_.count(gen_key) || known_generations_.count(gen_key)) return;
      if (known_generations_.size() > 65536) known_generations_.clear();
      known_generations_.insert(gen_key);  // asked once, whatever the answer
    }
    try {
      read_generation(detail::key_parent(gen_key));
    } catch (const Error&) {
      // Nothing learnt: the object is read as any other (a HEAD, then its bytes).
    }
  }
  // Runs `f` (a marker's GET, read_generation; it must not throw) on a thread of its own; the
  // store waits for it before it goes. Detached, not kept as a future: a store that lives to
  // the process's end (the one of plain s3:// URIs) would otherwise keep every ended thread
  // unjoined (ThreadSanitizer's "thread leak"). The count drops, and the waiter is woken,
  // under the lock, after which the thread touches nothing of the store.
  template <class F>
  void start_transfer(F&& f) const {
    {
      std::lock_guard<std::mutex> lock(transfers_mutex_);
      ++transfers_;
    }
    try {
      std::thread([this, f = std::forward<F>(f)]() mutable {
        f();
        std::lock_guard<std::mutex> lock(transfers_mutex_);
        --transfers_;
        transfers_done_.notify_all();
      }).detach();
    } catch (...) {
      std::lock_guard<std::mutex> lock(transfers_mutex_);
      --transfers_;
      throw;
    }
  }
  // How much of a marker a load reads with it: the marker, and the most a checkpoint written
  // inline holds (S3Options::inline_limit is at most that).
  static constexpr std::uint64_t max_inline_bytes = std::uint64_t{16} << 20;
  // The marker's first line (what it was, whole, before checkpoints went inline): 1 MiB.
  static constexpr std::uint64_t max_marker_line = std::uint64_t{1} << 20;
  // What a look at the metadata reads of a marker at first: its line (a few hundred bytes for
  // a checkpoint of one process) and the small files of a checkpoint written inline after it
  // (`cairn ls` of a root of a thousand steps of 8 MiB each reads 64 MB, not 8 GB).
  static constexpr std::uint64_t first_marker_read = std::uint64_t{64} << 10;
  static std::uint64_t max_inline_read() { return max_marker_line + max_inline_bytes; }

  // The sizes of a committed generation's objects, from the marker that names it: a load then
  // opens each object without a HEAD (a load of a small checkpoint took 10 requests, 4 of them
  // HEADs of objects the marker lists). A size that is wrong (a damaged marker) makes the read
  // fail (the range is refused, or the file seems to end early), never read other bytes. Kept
  // for the last 65,536 objects.
  void remember_sizes(const std::string& generation_key, const std::map<std::string, std::uint64_t>& listed) const {
    std::vector<std::pair<std::string, std::uint64_t>> sizes;  // (none usable: every object is asked for its size)
    for (const auto& [name, size] : listed) sizes.emplace_back(detail::join_key(generation_key, name), size);
    std::lock_guard<std::mutex> lock(known_mutex_);
    if (known_sizes_.size() + sizes.size() > 65536) known_sizes_.clear();
    for (auto& [k, n] : sizes) known_sizes_[k] = n;
    if (known_generations_.size() > 65536) known_generations_.clear();
    known_generations_.insert(generation_key);
  }
  // Objects at or under `key` were removed: their sizes are no longer known.
  void forget_sizes(const std::string& key) const {
    std::lock_guard<std::mutex> lock(known_mutex_);
    for (auto it = known_sizes_.begin(); it != known_sizes_.end();)
      it = it->first == key || it->first.rfind(key + "/", 0) == 0 ? known_sizes_.erase(it) : std::next(it);
    for (auto it = inline_.begin(); it != inline_.end();) {
      if (it->first != key && it->first.rfind(key + "/", 0) != 0) {
        ++it;
        continue;
      }
      if (it->second->head) inline_bytes_ -= it->second->head->bytes.allocated();
      it = inline_.erase(it);
    }
  }
  std::optional<std::uint64_t> known_size(const std::string& key) const {
    std::lock_guard<std::mutex> lock(known_mutex_);
    const auto it = known_sizes_.find(key);
    if (it == known_sizes_.end()) return std::nullopt;
    return it->second;
  }

  // stage()'s looks, on a thread of their own: the overwrite rule, the marker replaced, the
  // dead generations removed; what they learn goes into the staging `s`.
  class Staging;
  void look_before_save(Staging& s, const std::string& key, bool overwrite) {
    // The HEAD of the key and the listing under it go out together: one round trip (the
    // listing's answer is not looked at where the HEAD finds an object).
    auto listing = std::async(std::launch::async, [this, &key] { return client_.list(key + "/", false); });
    if (client_.head(key)) throw Error(ErrorKind::already_exists, "an object (not a checkpoint) is at this key; cairn will not replace it", describe(key));
    // Everything under the key must be cairn's: a marker and generations. The listing also
    // says whether a marker is there (a HEAD of it asked that too, before 2026-11-27).
    const s3::Listing under = listing.get();
    bool listed_marker = false;
    for (const auto& o : under.objects) {
      const std::string rest = o.key.substr(key.size() + 1);
      listed_marker |= rest == detail::commit_marker_name;
      if (rest != detail::commit_marker_name && !is_internal_name(rest.substr(0, rest.find('/'))))
        throw Error(ErrorKind::already_exists, "this key holds objects but no cairn checkpoint (" + rest +
                    "); cairn will not write into it or replace it, even with overwrite", describe(key));
    }
    if (listed_marker && !overwrite)
      throw Error(ErrorKind::already_exists, "a checkpoint already exists here (pass overwrite to replace it)", describe(key));
    // The generation it names and its ETag come from one GET, so the overwrite's If-Match is
    // on the very version whose generation is kept. Gone since the listing: a new checkpoint
    // (a rival's marker written meanwhile then fails the create-only write).
    std::string etag;
    bool was_inline = false;
    const std::string current = listed_marker ? read_generation(key, &etag, &was_inline) : std::string();
    const bool committed = !current.empty();
    if (committed && etag.empty()) {  // a server whose GET sent no ETag: its HEAD's
      const auto info = client_.head(detail::join_key(key, detail::commit_marker_name));
      if (info) etag = info->etag;
    }
    remove_dead_generations(key, under, current);
    s.replaced_gen_ = current;
    s.replaced_etag_ = committed ? etag : std::string();
    s.replacing_ = committed;
    s.replaced_inline_ = was_inline;
  }

  // Removes the generations under `key` that `current` is not, once idle for leftover_age:
  // both the time in the generation's name (its save's start) and its newest object's
  // LastModified are that old. A save still writing is never taken for dead however long it
  // runs (a 10 TB save takes hours): its objects are recent; only the time between its last
  // object and its marker's arrival, seconds, must stay under leftover_age.
  void remove_dead_generations(const std::string& key, const s3::Listing& under, const std::string& current) {
    const std::int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::system_clock::now().time_since_epoch()).count();
    const std::int64_t age_ms = std::chrono::duration_cast<std::chrono::milliseconds>(options_.leftover_age).count();
    std::map<std::string, std::pair<std::int64_t, std::vector<std::string>>> gens;  // newest write (ms), keys
    for (const auto& o : under.objects) {
      const std::string rest = o.key.substr(key.size() + 1);
      const std::string gen = rest.substr(0, rest.find('/'));
      if (!is_internal_name(gen) || gen == current) continue;
      auto& [newest, keys] = gens.try_emplace(gen, generation_time_ms(gen), std::vector<std::string>{}).first->second;
      newest = std::max(newest, s3::parse_iso8601(o.last_modified) * 1000);
      keys.push_back(o.key);
    }
    std::vector<std::string> dead;
    for (auto& [gen, g] : gens)
      if (now_ms - g.first >= age_ms) dead.insert(dead.end(), g.second.begin(), g.second.end());
    if (!dead.empty()) client_.remove(dead);
  }

  // The looks at a save's key still running (stage(), CheckpointStaging::check_also), by
  // generation key: a write into the generation waits for them (wait_for_looks). Each look
  // runs on a thread of its own; the caller's (check_also) come first in what is thrown.
  class Looks {
   public:
    void start(std::function<void()> f, bool first) {
      std::shared_future<void> look = std::async(std::launch::async, std::move(f)).share();
      std::lock_guard<std::mutex> lock(mutex_);
      all_.insert(first ? all_.begin() : all_.end(), std::move(look));
    }
    // Waits for every look, then throws the first refusal in order.
    void wait() const {
      const auto all = snapshot();
      for (const auto& f : all) f.wait();
      for (const auto& f : all) f.get();
    }
    void wait_all() const noexcept {
      for (const auto& f : snapshot()) f.wait();
    }
    bool refused() const noexcept {
      try {
        wait();
        return false;
      } catch (...) {
        return true;
      }
    }

   private:
    std::vector<std::shared_future<void>> snapshot() const {
      std::lock_guard<std::mutex> lock(mutex_);
      return all_;
    }
    mutable std::mutex mutex_;
    std::vector<std::shared_future<void>> all_;
  };
  void wait_for_looks(const std::string& key) {
    const std::string gen = generation_of(key);
    if (gen.empty()) return;
    std::shared_ptr<Looks> looks;
    {
      std::lock_guard<std::mutex> lock(multipart_mutex_);
      const auto it = looks_.find(gen);
      if (it == looks_.end()) return;
      looks = it->second;
    }
    looks->wait();
  }

  // Multipart uploads a save's generation left open. CreateMultipartUpload is not idempotent:
  // an attempt the server applied whose answer was lost (libcurl itself sends a request again
  // when a kept-alive connection closes before answering) opens an upload no writer knows.
  // Inside a generation (no other save's keys) every upload still open once its writers are
  // done is such a one: at the publish, and where the save failed, they are aborted, so
  // nothing is left billed. One listing, only for generations that used multipart uploads.
  // The save a key is written by: its generation, or the export in place it lies under (whose
  // keys are its own too); "" for neither.
  std::string save_of(const std::string& key) const {
    std::string gen = generation_of(key);
    return gen.empty() ? in_place_export_of(key) : gen;
  }
  void note_multipart(const std::string& key) {
    const std::string gen = save_of(key);
    if (gen.empty()) return;
    std::lock_guard<std::mutex> lock(multipart_mutex_);
    if (multipart_in_.size() >= 256 && !multipart_in_.count(gen)) multipart_in_.clear();  // (as written_)
    multipart_in_.insert(gen);
  }
  // A save (or an export in place) ended: what was noted of it goes.
  void forget_save(const std::string& gen) {
    std::lock_guard<std::mutex> lock(multipart_mutex_);
    multipart_in_.erase(gen);
    written_.erase(gen);
  }
  // An object of a save's generation (or of an export in place) this process wrote, its
  // write answered (or found landed): the publish then need not list the generation to know
  // it is there (check_all_there). One listing fewer per save of one process.
  void note_written(const std::string& key, std::uint64_t size) {
    const std::string gen = save_of(key);
    if (gen.empty()) return;
    std::lock_guard<std::mutex> lock(multipart_mutex_);
    // A rank that is not the primary has no staging to forget what it noted: bounded (what is
    // dropped costs a listing at most).
    if (written_.size() >= 256 && !written_.count(gen)) written_.clear();
    written_[gen][key.substr(gen.size() + 1)] = size;
  }
  // A save that may be written inline in its marker (S3Options::inline_limit): the objects
  // this process writes into its generation with one PUT each are held, not sent, while they
  // come to at most inline_limit in all. Past that, the ones held are sent then (at once) and
  // nothing more is held; at the publish, where the generation holds objects not held here
  // (another rank's, a multipart one), the same.
  using HeldObjects = std::map<std::string, std::pair<std::shared_ptr<const s3::Buffer>, std::uint64_t>>;  // name -> bytes, size
  struct InlineSave {
    std::uint64_t bytes = 0;
    bool spilled = false;  // sent (or taken by the publish): nothing more is held
    HeldObjects held;
  };
  bool hold_inline(const std::string& key, std::shared_ptr<const s3::Buffer> bytes, std::uint64_t size) {
    const std::string gen = generation_of(key);
    if (gen.empty() || key.size() <= gen.size() + 1) return false;
    HeldObjects spill;
    {
      std::lock_guard<std::mutex> lock(multipart_mutex_);
      const auto it = inline_saves_.find(gen);
      if (it == inline_saves_.end() || it->second.spilled) return false;
      const std::string name = key.substr(gen.size() + 1);
      if (name.find('/') == std::string::npos && !it->second.held.count(name) && it->second.bytes + size <= options_.inline_limit) {
        it->second.held[name] = {std::move(bytes), size};
        it->second.bytes += size;
        return true;
      }
      it->second.spilled = true;
      spill.swap(it->second.held);
      it->second.bytes = 0;
    }
    send_held(gen, spill);
    return false;
  }
  // What a save held, for its publish; nothing more is held after it. nullopt where it held
  // nothing or sent what it held.
  std::optional<HeldObjects> take_held(const std::string& gen) {
    std::lock_guard<std::mutex> lock(multipart_mutex_);
    const auto it = inline_saves_.find(gen);
    if (it == inline_saves_.end() || it->second.spilled) return std::nullopt;
    it->second.spilled = true;
    HeldObjects out;
    out.swap(it->second.held);
    return out;
  }
  // The objects held, each written as create() writes it (create-only), at once.
  void send_held(const std::string& gen, const HeldObjects& held) {
    std::vector<const HeldObjects::value_type*> all;
    for (const auto& h : held) all.push_back(&h);
    detail::for_each_index(all.size(), options_.concurrency, [&](std::size_t i) {
      const auto& [name, bytes] = *all[i];
      Writer w(*this, detail::join_key(gen, name), s3::WriteCondition{true, {}}, false);
      w.write_at(bytes.first->data(), bytes.second, 0);
      w.finish(bytes.second);
    });
  }

  // `always`: also where this process used none (other processes wrote into it, or the save
  // failed: one listing, paid only there).
  void abort_orphan_uploads(const std::string& gen, bool always = false) noexcept {
    if (!always) {
      std::lock_guard<std::mutex> lock(multipart_mutex_);
      if (!multipart_in_.count(gen)) return;
    }
    try {
      for (const auto& u : client_.list_multipart_uploads(gen + "/")) client_.abort_multipart(u.key, u.upload_id);
    } catch (...) {
      // Left for cleanup by age (abort_old_uploads).
    }
  }
  // The generation a key lies in ("<checkpoint>/.cairn-gen-..."), or "" if none.
  std::string generation_of(const std::string& key) const {
    std::size_t at = 0;
    while (at < key.size()) {
      const auto slash = key.find('/', at);
      const std::size_t end = slash == std::string::npos ? key.size() : slash;
      if (is_internal_name(key.substr(at, end - at))) return key.substr(0, end);
      if (slash == std::string::npos) break;
      at = slash + 1;
    }
    return {};
  }

  void abort_old_uploads(const std::string& prefix) {
    const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::system_clock::now().time_since_epoch()).count();
    for (const auto& u : client_.list_multipart_uploads(prefix)) {
      const std::int64_t t = s3::parse_iso8601(u.initiated);
      if (t > 0 && now - t >= options_.leftover_age.count()) client_.abort_multipart(u.key, u.upload_id);
    }
  }

  // Runs up to `concurrency` jobs at once and rethrows the first failure.
  class TaskGroup {
   public:
    explicit TaskGroup(int limit) : limit_(static_cast<std::size_t>(limit)) {}
    ~TaskGroup() { drain(); }
    template <class F>
    void run(F&& f) {
      while (running_.size() >= limit_) wait_oldest();
      running_.push_back(std::async(std::launch::async, std::forward<F>(f)));
    }
    void wait() {
      while (!running_.empty()) wait_oldest();
    }
    void drain() noexcept {
      for (auto& f : running_) try { f.get(); } catch (...) {}
      running_.clear();
    }
   private:
    void wait_oldest() {
      auto f = std::move(running_.front());
      running_.erase(running_.begin());
      try {
        f.get();
      } catch (...) {
        drain();
        throw;
      }
    }
    std::size_t limit_;
    std::vector<std::future<void>> running_;
  };

  using Buffer = s3::Buffer;
  using Bytes = std::shared_ptr<const Buffer>;
  // What a background GET (a reader's block, a read-ahead's object) ends with: its bytes, or
  // the error it threw. Kept as a value, not as the future's exception: threads waiting on one
  // fetch would each rethrow the one exception object, whose count of references lives in the
  // uninstrumented C++ runtime, so that ThreadSanitizer saw its deletion race with another
  // thread's reading of its message.
  struct Fetched {
    Bytes bytes;
    std::optional<Error> error;
  };

  // read_ahead's handle: its fetches stay readable (open) until it goes.
  class ReadAhead : public StoreReadAhead {
   public:
    explicit ReadAhead(const S3Store& store) : store_(store) {}
    ~ReadAhead() override {
      for (auto& [key, f] : fetches) {
        f.wait();
        std::lock_guard<std::mutex> lock(store_.fetched_mutex_);
        store_.fetched_.erase(key);
      }
    }
    std::vector<std::pair<std::string, std::shared_future<Fetched>>> fetches;
   private:
    const S3Store& store_;
  };
  std::optional<std::shared_future<Fetched>> fetched(const std::string& key) const {
    std::lock_guard<std::mutex> lock(fetched_mutex_);
    const auto it = fetched_.find(key);
    if (it == fetched_.end()) return std::nullopt;
    return it->second;
  }

  // An object read whole by a read-ahead, or a file of a checkpoint written inline that came
  // with its marker: its reads are copies from memory.
  class HeldReader : public StoreReader {
   public:
    HeldReader(Bytes bytes, std::string name)
        : owner_(bytes), data_(bytes->data()), size_(bytes->size()), name_(std::move(name)) {}
    // `arriving`: the bytes are still coming (ArrivingBody); each read waits for its own.
    HeldReader(Bytes bytes, std::uint64_t offset, std::uint64_t size, std::string name,
               std::shared_ptr<const s3::ArrivingBody> arriving = nullptr)
        : owner_(bytes), data_(bytes->data() + offset), size_(size), name_(std::move(name)), arriving_(std::move(arriving)),
          base_(offset) {}
    std::uint64_t size() const override { return size_; }
    std::uint64_t cached_bytes(std::uint64_t, std::uint64_t n) const override { return n; }
    void read_at(void* dst, std::uint64_t n, std::uint64_t offset) const override {
      if (offset > size_ || n > size_ - offset)
        throw Error(ErrorKind::corrupt, "file ends at byte " + std::to_string(size_) +
                    ", before the data its metadata describes (truncated?)", name_);
      arrived(offset + n);
      if (n) std::memcpy(dst, data_ + offset, static_cast<std::size_t>(n));
    }
    // Straight from memory into each piece (the default reads the span into a buffer first).
    void read_scattered(const ReadPiece* pieces, std::size_t count, std::uint64_t offset) const override {
      std::uint64_t total = 0;
      for (std::size_t i = 0; i < count; ++i) total += pieces[i].n;
      if (offset > size_ || total > size_ - offset)
        throw Error(ErrorKind::corrupt, "file ends at byte " + std::to_string(size_) +
                    ", before the data its metadata describes (truncated?)", name_);
      arrived(offset + total);
      detail::copy_to_pieces(data_ + offset, pieces, count);
    }
   private:
    // Waits until the file's first `end` bytes are in; the transfer's failure names this file
    // (and, in its message, the marker it was read from).
    void arrived(std::uint64_t end) const {
      if (!arriving_) return;
      try {
        arriving_->wait_for(base_ + end);
      } catch (const Error& e) {
        throw Error(e.kind(), "reading it from its commit marker (" + e.file() + "): " + e.message(), name_);
      }
    }
    std::shared_ptr<const void> owner_;
    const unsigned char* data_;
    std::uint64_t size_;
    std::string name_;
    std::shared_ptr<const s3::ArrivingBody> arriving_;
    std::uint64_t base_ = 0;  // data_'s offset in the bytes arriving_ fills
  };

  // Reads of an object. A large read is split into ranges fetched in parallel straight into
  // the caller's memory. Small reads that follow one another (a load reads a
  // large leaf in 256 KiB pieces, checksumming each) switch to read-ahead: blocks of
  // read_part_size, up to `concurrency` of them fetched ahead of the reads, copied out as the
  // pieces are asked for; a small read that follows none is one ranged GET (a partial load
  // reads only what it needs). Every GET is pinned to the ETag seen at open().
  //
  // Several streams of reads share one object: a load reads its large leaves side by side, a
  // thread each (read_scheduler.hpp), and two threads may take every other piece of one
  // chunk. A read follows a stream when it starts where one of the last reads ended
  // (streams_), and the blocks are one cache for all: a block is let go, least recently
  // read first, only to make room (`concurrency` + 2 blocks), and a block fetched ahead is
  // kept until it is read or the reads have passed it. (One position for the whole reader saw
  // the reads of two threads as jumps: each block of 16 MiB was fetched two or three times, and
  // a load of 1 GiB in 64 leaves ran at half the limit's speed.)
  class Reader : public StoreReader {
   public:
    // `base`: the object's bytes start there in the object at `key` (a file of a checkpoint
    // written inline, in its marker; `name` is then how errors name it).
    Reader(S3Store& store, std::string key, s3::ObjectInfo info, std::uint64_t base = 0, std::string name = {})
        : store_(store), key_(std::move(key)), info_(std::move(info)), base_(base),
          name_(name.empty() ? store.describe(key_) : std::move(name)) {}
    ~Reader() override {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [index, block] : blocks_) block.fetch.wait();  // no fetch outlives the reader
    }
    std::uint64_t size() const override { return info_.size; }
    // The bytes of the range in blocks the read-ahead has already brought: a loader reads a
    // chunk that is mostly here with two threads, as it would from the page cache.
    std::uint64_t cached_bytes(std::uint64_t offset, std::uint64_t n) const override {
      const std::uint64_t part = store_.options_.read_part_size;
      std::uint64_t here = 0;
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& [index, block] : blocks_) {
        const std::uint64_t start = index * part, end = std::min(info_.size, start + part);
        const std::uint64_t a = std::max(start, offset), b = std::min(end, offset + n);
        if (a < b && ready(block.fetch)) here += b - a;
      }
      return here;
    }
    void read_at(void* dst, std::uint64_t n, std::uint64_t offset) const override {
      check_range(n, offset);
      if (n == 0) return;
      if (n >= store_.options_.read_part_size) {
        read_large(dst, n, offset);
        return;
      }
      auto* out = static_cast<unsigned char*>(dst);
      if (!read_from_blocks(n, offset, [&](const unsigned char* from, std::uint64_t at, std::uint64_t len) {
            std::memcpy(out + at, from, static_cast<std::size_t>(len));
          }))
        store_.client_.get_range(key_, dst, n, base_ + offset, info_.etag);
    }
    // Straight from the read-ahead's blocks into each piece, where the default copied the span
    // into a buffer of its own first (up to 1 MiB a run of leaves, small_run_bytes) and every
    // byte twice. (100,000 small leaves, 29 MB in one data object, in a loop: within noise of
    // the default on s3rver; docs/benchmarks.md.)
    void read_scattered(const ReadPiece* pieces, std::size_t count, std::uint64_t offset) const override {
      std::uint64_t n = 0;
      for (std::size_t i = 0; i < count; ++i) n += pieces[i].n;
      check_range(n, offset);
      if (n == 0) return;
      if (n < store_.options_.read_part_size) {
        // The pieces in order: the blocks' copies come in order of the span's bytes.
        std::size_t piece = 0;
        std::uint64_t into = 0;  // bytes of pieces[piece] already copied
        const bool from_blocks = read_from_blocks(n, offset, [&](const unsigned char* from, std::uint64_t, std::uint64_t len) {
          while (len > 0) {
            const std::uint64_t take = std::min(len, pieces[piece].n - into);
            if (pieces[piece].dst && take)
              std::memcpy(static_cast<unsigned char*>(pieces[piece].dst) + into, from, static_cast<std::size_t>(take));
            from += take;
            len -= take;
            into += take;
            if (into == pieces[piece].n) {
              ++piece;
              into = 0;
            }
          }
        });
        if (from_blocks) return;
      }
      // One ranged GET (a read that follows none) or ranges in parallel (a large one), into a
      // buffer, then the pieces.
      const auto span = std::make_unique_for_overwrite<unsigned char[]>(static_cast<std::size_t>(n));
      if (n >= store_.options_.read_part_size) read_large(span.get(), n, offset);
      else store_.client_.get_range(key_, span.get(), n, base_ + offset, info_.etag);
      detail::copy_to_pieces(span.get(), pieces, count);
    }

   private:
    void check_range(std::uint64_t n, std::uint64_t offset) const {
      if (offset > info_.size || n > info_.size - offset)
        throw Error(ErrorKind::corrupt, "file ends at byte " + std::to_string(info_.size) +
                    ", before the data its metadata describes (truncated?)", name_);
    }
    // A read of at least read_part_size: in ranges of at most that, and at least `concurrency`
    // of them down to 1 MiB each, so that one leaf of one part is read in parallel too.
    void read_large(void* dst, std::uint64_t n, std::uint64_t offset) const {
      const std::uint64_t part = store_.options_.read_part_size;
      const std::uint64_t c = static_cast<std::uint64_t>(store_.options_.concurrency);
      const std::uint64_t range = std::min(part, std::max(std::uint64_t{1} << 20, (n + c - 1) / c));
      TaskGroup group(store_.options_.concurrency);
      for (std::uint64_t at = 0; at < n; at += range) {
        const std::uint64_t len = std::min(range, n - at);
        group.run([this, dst, at, len, offset] {
          store_.client_.get_range(key_, static_cast<char*>(dst) + at, len, base_ + offset + at, info_.etag);
        });
      }
      group.wait();
    }
    // A small read (under read_part_size) of the `n` bytes at `offset`, through the read-ahead
    // where it goes on with a stream of reads: `copy(from, at, len)` takes the `len` bytes at
    // `from`, the read's bytes from `at` on, in order. False, having copied nothing, where the
    // read follows no stream: the caller fetches it with one ranged GET.
    template <class Copy>
    bool read_from_blocks(std::uint64_t n, std::uint64_t offset, Copy&& copy) const {
      const std::uint64_t part = store_.options_.read_part_size;
      bool sequential;
      std::uint64_t read;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        read = ++reads_;
        // The stream this read goes on with, and one it closes the gap to (two threads taking
        // every other piece, one ahead of the other: their reads join into one stream).
        Stream joined{offset, offset + n};
        bool follows = false;
        for (auto it = streams_.begin(); it != streams_.end();) {
          if (it->end == offset || it->start == offset + n) {
            follows = follows || it->end == offset;
            joined.start = std::min(joined.start, it->start);
            joined.end = std::max(joined.end, it->end);
            it = streams_.erase(it);
          } else {
            ++it;
          }
        }
        sequential = follows || blocks_.count(offset / part);
        streams_.insert(streams_.begin(), joined);  // the most recent first
        if (streams_.size() > max_streams) streams_.pop_back();
      }
      if (!sequential) return false;
      for (std::uint64_t at = offset; at < offset + n;) {
        const std::uint64_t index = at / part, in = at % part;
        const std::uint64_t take = std::min(n - (at - offset), part - in);
        const Block fetched = block(index, read, take).get();
        if (fetched.error) throw Error(*fetched.error);  // what the fetch threw, a copy of this thread's own
        copy(fetched.bytes->data() + in, at - offset, take);
        at += take;
      }
      return true;
    }

    using Block = Fetched;
    struct Slot {
      std::shared_future<Block> fetch;
      std::uint64_t length = 0;
      std::uint64_t taken = 0;      // bytes reads have copied out of it (each byte once, in a whole load)
      std::uint64_t last_read = 0;  // the read that last took bytes from it; 0: none yet
    };
    // A stream: reads one after another, which have read [start, end). A read that starts at
    // no stream's end begins one, and one that ends where a stream starts joins it; at most
    // max_streams are followed, the least recent forgotten.
    struct Stream {
      std::uint64_t start, end;
    };
    static constexpr std::size_t max_streams = 32;
    // Whether a stream has read all of block `b` already (a block behind a stream that started
    // before it: the reads of another stream need it no more, and it is not fetched ahead).
    bool read_by_a_stream(std::uint64_t b) const {
      const std::uint64_t part = store_.options_.read_part_size;
      const std::uint64_t from = b * part, to = std::min(info_.size, from + part);
      return std::any_of(streams_.begin(), streams_.end(), [&](const Stream& st) { return st.start <= from && to <= st.end; });
    }

    // Block `index`, fetched or being fetched, for read number `read`, which takes `take` bytes
    // of it, with the blocks after it started while there is room.
    std::shared_future<Block> block(std::uint64_t index, std::uint64_t read, std::uint64_t take) const {
      const std::uint64_t part = store_.options_.read_part_size;
      const std::uint64_t blocks = (info_.size + part - 1) / part;
      const std::uint64_t window = static_cast<std::uint64_t>(store_.options_.concurrency);
      std::lock_guard<std::mutex> lock(mutex_);
      // A failed fetch is dropped so that the next read tries again.
      for (auto it = blocks_.begin(); it != blocks_.end();)
        if (it->first != index && ready(it->second.fetch) && has_error(it->second.fetch)) it = blocks_.erase(it);
        else ++it;
      if (!blocks_.count(index)) {
        make_room(index, true);
        fetch(index);
      }
      Slot& wanted = blocks_.at(index);
      wanted.taken += take;
      wanted.last_read = read;
      const std::shared_future<Block> f = wanted.fetch;
      for (std::uint64_t b = index + 1; b < std::min(blocks, index + window); ++b)
        if (!blocks_.count(b) && !read_by_a_stream(b)) {
          if (!make_room(index, false)) break;
          fetch(b);
        }
      return f;
    }
    void fetch(std::uint64_t b) const {
      const std::uint64_t part = store_.options_.read_part_size;
      const std::uint64_t start = b * part, len = std::min(part, info_.size - start);
      Slot& slot = blocks_[b];
      slot.length = len;
      slot.fetch = std::async(std::launch::async, [this, start, len] {
                     try {
                       auto bytes = store_.buffers_.take(static_cast<std::size_t>(len));
                       store_.client_.get_range(key_, bytes->data(), len, base_ + start, info_.etag);
                       return Block{Bytes(std::move(bytes)), std::nullopt};
                     } catch (const Error& e) {
                       return Block{nullptr, e};
                     }
                   }).share();
    }
    // Room for one more block beside block `index` (`concurrency` + 2 are kept). What goes: a
    // fetched block that is done with, whose every byte was read or that lies behind every
    // stream (a partial load passed it by), least recently read first. A block fetched ahead and
    // not yet read, or one a stream is still reading, goes only to make room for a block a read
    // needs now (`needed`): then the one furthest ahead of those not yet read (a guess), or else
    // the one read least recently (a stream that lags behind, which will read it again).
    // False where nothing can go (every block still being fetched, or none done with and the
    // block not needed now). (A reader in the middle of a block that goes keeps its bytes: its
    // future holds them.)
    bool make_room(std::uint64_t index, bool needed) const {
      const std::size_t room = static_cast<std::size_t>(store_.options_.concurrency) + 2;
      const std::uint64_t part = store_.options_.read_part_size;
      std::uint64_t passed = info_.size;  // the blocks before passed / part are behind every stream
      for (const Stream& st : streams_) passed = std::min(passed, st.end);
      passed /= part;
      // Of the blocks not done with, which goes first: the unread one furthest ahead, then the
      // one read least recently.
      const auto order = [](const auto& it) {
        return it->second.last_read == 0 ? std::pair<int, std::uint64_t>{0, ~it->first} : std::pair<int, std::uint64_t>{1, it->second.last_read};
      };
      while (blocks_.size() >= room) {
        auto done = blocks_.end(), other = blocks_.end();
        for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
          const Slot& b = it->second;
          if (it->first == index || !ready(b.fetch)) continue;
          if (b.taken >= b.length || it->first < passed) {
            if (done == blocks_.end() || b.last_read < done->second.last_read) done = it;
          } else if (other == blocks_.end() || order(it) < order(other)) {
            other = it;
          }
        }
        if (done != blocks_.end()) blocks_.erase(done);
        else if (needed && other != blocks_.end()) blocks_.erase(other);
        else return false;
      }
      return true;
    }
    static bool ready(const std::shared_future<Block>& f) {
      return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    }
    static bool has_error(const std::shared_future<Block>& f) {
      try {
        return f.get().error.has_value();
      } catch (...) {
        return true;  // (not an Error: out of memory)
      }
    }

    S3Store& store_;
    std::string key_;
    s3::ObjectInfo info_;
    std::uint64_t base_;
    std::string name_;
    mutable std::mutex mutex_;
    mutable std::map<std::uint64_t, Slot> blocks_;
    mutable std::vector<Stream> streams_{Stream{0, 0}};  // the most recent first (a read from 0 needs no other before it)
    mutable std::uint64_t reads_ = 0;
  };

  // Bytes come in any order of ranges; they are gathered into parts of part_size, and a full
  // part is uploaded (multipart, in the background, `concurrency` at once) once a byte past it
  // has been written, so that the last part, which finish() may cut, is never sent early.
  // Small blobs go in one PUT at finish().
  class Writer : public StoreWriter {
   public:
    Writer(S3Store& store, std::string key, s3::WriteCondition cond, bool check_absent_at_finish)
        : store_(store), key_(std::move(key)), cond_(std::move(cond)), check_absent_(check_absent_at_finish),
          part_(store.options_.part_size), uploads_(store.options_.concurrency) {}
    ~Writer() override {
      uploads_.drain();
      if (!upload_id_.empty() && !finished_) store_.client_.abort_multipart(key_, upload_id_);
    }
    void write_at(const void* src, std::uint64_t n, std::uint64_t offset) override {
      const auto* p = static_cast<const unsigned char*>(src);
      while (n > 0) {
        const std::uint64_t index = offset / part_, in = offset % part_;
        const std::uint64_t take = std::min(n, part_ - in);
        Part& part = parts_[index];
        if (part.sent) throw Error(ErrorKind::io, "a range was written twice into an object being uploaded", store_.describe(key_));
        part.reserve(in + take, part_, store_.buffers_);
        part.define(in);
        std::memcpy(part.bytes->data() + in, p, static_cast<std::size_t>(take));
        part.defined = std::max(part.defined, in + take);
        part.filled += take;
        part.end = std::max(part.end, in + take);
        end_ = std::max(end_, offset + take);
        p += take;
        offset += take;
        n -= take;
      }
      send_full_parts();
    }
    bool copies_writes() const override { return true; }  // into its parts
    void finish(std::uint64_t size) override {
      const std::uint64_t last = size == 0 ? 0 : (size - 1) / part_;
      for (const auto& [index, part] : parts_)
        if (part.sent && index >= last && size < (index + 1) * part_)
          throw Error(ErrorKind::io, "cannot shorten an object below a part already uploaded", store_.describe(key_));
      if (upload_id_.empty() && size <= store_.options_.multipart_threshold) {
        // One PUT: of the part itself where the object fits in one (every metadata file),
        // else of the parts gathered (a threshold set above the part size).
        const unsigned char* body;
        std::vector<unsigned char> whole;
        if (size <= part_) {
          Part& part = parts_[0];
          part.reserve(size, part_, store_.buffers_);
          part.define(size);
          body = part.bytes->data();
          // A save that may go inline in its marker keeps it until its publish.
          if (store_.hold_inline(key_, part.bytes, size)) {
            part.bytes = {};
            finished_ = true;
            store_.note_written(key_, size);
            return;
          }
        } else {
          whole.resize(static_cast<std::size_t>(size));
          for (auto& [index, part] : parts_) {
            const std::uint64_t start = index * part_;
            if (start >= size) continue;
            const std::uint64_t n = std::min(part_, size - start);
            part.reserve(n, part_, store_.buffers_);
            part.define(n);
            std::memcpy(whole.data() + start, part.bytes->data(), static_cast<std::size_t>(n));
          }
          body = whole.data();
        }
        store_.wait_for_looks(key_);
        check_absent();
        if (!store_.client_.put(key_, body, size, cond_) && !landed(size, s3::expected_etag(body, size)))
          race();
        finished_ = true;
        store_.note_written(key_, size);
        return;
      }
      for (std::uint64_t index = 0; index <= last; ++index) {
        Part& part = parts_[index];
        if (part.sent) continue;
        send(index, std::min(part_, size - index * part_));
      }
      uploads_.wait();
      std::vector<std::string> etags;
      for (std::uint64_t index = 0; index <= last; ++index) etags.push_back(etags_.at(index));
      check_absent();
      bool completed = false;
      try {
        completed = store_.client_.complete_multipart(key_, upload_id_, etags, cond_);
      } catch (const Error& e) {
        // NoSuchUpload: completed by an attempt whose answer was lost (AWS answers a repeated
        // completion 200; MinIO and others, 404), or aborted by someone else.
        if (e.kind() != ErrorKind::not_found || !landed(size, s3::expected_etag(etags))) throw;
        completed = true;
      }
      if (!completed && !landed(size, s3::expected_etag(etags))) race();
      finished_ = true;
      store_.note_written(key_, size);
    }

   private:
    // A part's buffer is not zeroed: the bytes below `defined` are written or zeroed, and
    // define() zeroes the gap up to where the next write starts (or up to the part's end
    // before it is sent), so a range never written reads as zeros, as a file's hole does,
    // while a part written from its start (every save) is never memset. A part of at least
    // half the part size, or one that grows past part_block_from, is a block of the store's
    // pool; a smaller one (the first part of a small object: metadata of a few kilobytes) is a
    // buffer of its own that grows as it is written, so that three small objects written side
    // by side do not take three blocks.
    static constexpr std::uint64_t part_block_from = std::uint64_t{1} << 20;
    struct Part {
      std::shared_ptr<s3::Buffer> bytes;
      std::uint64_t filled = 0, end = 0, defined = 0;
      bool sent = false;
      // Room for `need` bytes in a buffer of at most `full` (a part), the bytes defined kept.
      void reserve(std::uint64_t need, std::uint64_t full, s3::BufferPool& pool) {
        if (bytes && bytes->capacity() >= need) return;
        const std::uint64_t small = std::max<std::uint64_t>(std::uint64_t{64} << 10, std::bit_ceil(need));
        // Past 1 MiB (a data object of small leaves, written a leaf at a time), a block: one
        // the store kept from its last operation has its pages already, where each doubling
        // would be new memory faulted in and a copy.
        std::shared_ptr<s3::Buffer> grown = need >= full / 2 || small >= std::min(full / 2, part_block_from)
                                                ? pool.take(static_cast<std::size_t>(full))
                                                : std::make_shared<s3::Buffer>(static_cast<std::size_t>(small));
        if (bytes && defined) std::memcpy(grown->data(), bytes->data(), static_cast<std::size_t>(defined));
        bytes = std::move(grown);
      }
      void define(std::uint64_t upto) {
        if (upto > defined) std::memset(bytes->data() + defined, 0, static_cast<std::size_t>(upto - defined));
        defined = std::max(defined, upto);
      }
    };
    // Whether a write whose condition failed (or whose upload was gone) had in fact landed:
    // an attempt the server applied but whose answer was lost is sent again, and finds the
    // object the first one wrote. Inside a save's generation (64 random bits in its name: no
    // other writer's) and under an export written in place (which found nothing at its key
    // and writes each key once), an object of the size written is this writer's own.
    // Elsewhere (a safetensors file created on a bucket) only one whose ETag is the MD5 of
    // these bytes (`etag`, as S3 makes it) is: the same bytes, whoever wrote them. Otherwise
    // the create-only write met another writer's object: the race is reported.
    bool landed(std::uint64_t size, const std::string& etag) {
      const bool own_keys = store_.has_internal_segment(key_) || store_.under_in_place_export(key_);
      if (!own_keys && etag.empty()) return false;
      const auto info = store_.client_.head(key_);
      if (!info || info->size != size) return false;
      auto lower = [](std::string t) {
        for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return t;
      };
      return own_keys || lower(info->etag) == lower(etag);
    }
    [[noreturn]] void race() {
      throw Error(ErrorKind::already_exists, "another writer created this object first (a race); it was not replaced",
                  store_.describe(key_));
    }
    void check_absent() {
      if (check_absent_ && store_.client_.head(key_))
        throw Error(ErrorKind::already_exists, "another writer created this object first (a race); it was not replaced",
                    store_.describe(key_));
    }
    void send_full_parts() {
      for (auto& [index, part] : parts_)
        if (!part.sent && part.filled >= part_ && end_ > (index + 1) * part_) send(index, part_);
    }
    void send(std::uint64_t index, std::uint64_t n) {
      if (index >= 10000)
        throw Error(ErrorKind::invalid_argument, "an object of more than 10,000 parts: raise S3Options::part_size",
                    store_.describe(key_));
      if (upload_id_.empty()) {
        store_.wait_for_looks(key_);  // (the first request of the upload)
        store_.note_multipart(key_);
        upload_id_ = store_.client_.create_multipart(key_);
      }
      Part& part = parts_[index];
      part.sent = true;
      part.reserve(n, part_, store_.buffers_);
      part.define(n);  // never written, or not to its end: zeros, as a file's hole
      std::shared_ptr<const s3::Buffer> bytes = std::move(part.bytes);
      part.bytes = {};
      uploads_.run([this, index, n, bytes] {
        const std::string etag = store_.client_.upload_part(key_, upload_id_, static_cast<int>(index + 1), bytes->data(), n);
        std::lock_guard<std::mutex> lock(mutex_);
        etags_[index] = etag;
      });
    }

    S3Store& store_;
    std::string key_;
    s3::WriteCondition cond_;
    bool check_absent_;
    std::uint64_t part_;
    std::map<std::uint64_t, Part> parts_;
    std::uint64_t end_ = 0;
    std::string upload_id_;
    std::mutex mutex_;
    std::map<std::uint64_t, std::string> etags_;
    bool finished_ = false;
    TaskGroup uploads_;  // last: destroyed (and drained) first
  };

  // Every object `expected` names is under `prefix` with that size (one listing), before a
  // save or an export is published; else an io error that begins with `refusal`.
  // Where this process wrote every one of them itself (note_written), it knows without asking:
  // the listing is for the objects other processes (ranks) wrote.
  // Returns whether it listed (some objects are other processes').
  bool check_all_there(const std::string& prefix, const std::map<std::string, std::uint64_t>& expected,
                       const char* refusal) {
    {
      std::lock_guard<std::mutex> lock(multipart_mutex_);
      const auto mine = written_.find(prefix);
      bool all_mine = mine != written_.end();
      for (auto e = expected.begin(); all_mine && e != expected.end(); ++e) {
        const auto w = mine->second.find(e->first);
        all_mine = w != mine->second.end() && w->second == e->second;
      }
      if (all_mine) return false;
    }
    std::map<std::string, std::uint64_t> found;
    for (const auto& o : client().list(prefix + "/", false).objects) found[o.key.substr(prefix.size() + 1)] = o.size;
    for (const auto& [name, size] : expected) {
      auto it = found.find(name);
      if (it == found.end())
        throw Error(ErrorKind::io, std::string(refusal) + ": " + name + " is missing from the save", describe(prefix));
      if (it->second != size)
        throw Error(ErrorKind::io, std::string(refusal) + ": " + name + " is " + std::to_string(it->second) + " bytes, not " +
                    std::to_string(size), describe(prefix));
    }
    return true;
  }

  bool under_in_place_export(const std::string& key) const { return !in_place_export_of(key).empty(); }
  // The key of the export written in place that `key` lies under, or "".
  std::string in_place_export_of(const std::string& key) const {
    std::lock_guard<std::mutex> lock(in_place_mutex_);
    for (const auto& [k, e] : in_place_)
      if (key.size() > k.size() && key[k.size()] == '/' && key.compare(0, k.size(), k) == 0) return k;
    return {};
  }

  class InPlaceStaging : public CheckpointStaging {
   public:
    InPlaceStaging(S3Store& store, std::string key) : store_(store), key_(std::move(key)) {
      std::lock_guard<std::mutex> lock(store_.in_place_mutex_);
      ++store_.in_place_[key_].stagings;
    }
    ~InPlaceStaging() override {
      std::string last;  // the object created last: the format's commit (Orbax's commit_success.txt)
      {
        std::lock_guard<std::mutex> lock(store_.in_place_mutex_);
        const auto it = store_.in_place_.find(key_);
        last = it->second.last;
        if (--it->second.stagings == 0) store_.in_place_.erase(it);
      }
      if (!published_) {
        // Its commit first, alone: a failed export may have written it (its answer lost, or a
        // check after it failed), and a reader must never find it beside half the data while
        // the rest goes. Where that delete fails, the rest stays (as whole as it was).
        try {
          if (!last.empty()) store_.client_.remove({last});
          store_.remove(key_);
        } catch (...) {
        }
      }
      store_.abort_orphan_uploads(key_, !published_ || others_);
      store_.forget_save(key_);
    }
    const std::string& key() const override { return key_; }
    void publish(const std::map<std::string, std::uint64_t>& expected) override {
      others_ = store_.check_all_there(key_, expected, "not complete");
      published_ = true;
    }
   private:
    S3Store& store_;
    std::string key_;
    bool published_ = false;
    bool others_ = false;  // other processes wrote some of it (their orphan uploads are looked for)
  };

  class Staging : public CheckpointStaging {
   public:
    Staging(S3Store& store, std::string key, std::string gen)
        : store_(store), key_(std::move(key)), gen_(std::move(gen)), staged_(detail::join_key(key_, gen_)),
          looks_(std::make_shared<Looks>()) {
      std::lock_guard<std::mutex> lock(store_.multipart_mutex_);
      if (store_.options_.inline_limit > 0) store_.inline_saves_[staged_];
      store_.looks_[staged_] = looks_;
    }
    ~Staging() override {
      looks_->wait_all();  // they use this staging and the store
      {
        std::lock_guard<std::mutex> lock(store_.multipart_mutex_);
        store_.inline_saves_.erase(staged_);
        store_.looks_.erase(staged_);
      }
      // Refused by a look: nothing was sent into the generation (every write waited for the
      // looks, and threw), and with several ranks the others learned the key only after them.
      if (looks_->refused()) {
        store_.forget_save(staged_);
        return;
      }
      // Not published, and the marker surely does not name this generation: removed. Where a
      // marker PUT failed in a way that leaves its outcome unknown, the generation stays: if
      // the marker landed it is the checkpoint's; if not, a leftover that cleanup removes.
      if (published_ || outcome_unknown_) {
        store_.forget_save(staged_);
        return;
      }
      try {
        store_.remove(staged_);
        store_.abort_orphan_uploads(staged_, true);  // (its writers, destroyed, aborted their own)
      } catch (...) {
      }
      store_.forget_save(staged_);
    }
    const std::string& key() const override { return staged_; }
    void checked() override { looks_->wait(); }
    void check_also(std::function<void()> look) override { looks_->start(std::move(look), true); }
    // stage()'s own looks (look_before_save), started once the staging is registered.
    void look(std::function<void()> f) { looks_->start(std::move(f), false); }
    void publish(const std::map<std::string, std::uint64_t>& expected) override {
      const std::string marker_key = detail::join_key(key_, detail::commit_marker_name);
      // The overwrite rule once more, before the switch: where the store may ignore the
      // condition, this HEAD is what catches a race. It goes out as the publish begins, and
      // the marker is built and hashed while it and the last of stage()'s looks are answered
      // (one after the other until 2026-12-04; on loopback 2-3 ms each for an inline
      // checkpoint of 3 MB): a race is caught where the rival's marker came before this point,
      // about a round trip before the PUT. Where the store is known to enforce the condition
      // (AWS; S3Options::conditional_writes_enforced), the PUT's own condition refuses a moved
      // marker (412, below), and this round trip is not made. (Nothing below sends into the
      // generation before the looks are answered: send_held's writes wait for them.)
      std::future<std::optional<s3::ObjectInfo>> look;
      if (!store_.client_.conditions_enforced())
        look = std::async(std::launch::async, [this, &marker_key] { return store_.client_.head(marker_key); });
      // Written inline: every object of the checkpoint held here (one process wrote it all, in
      // one PUT each, inline_limit bytes at most), the marker carries them after its line.
      std::optional<HeldObjects> held = store_.take_held(staged_);
      bool whole = held && held->size() == expected.size();
      for (auto e = expected.begin(); whole && e != expected.end(); ++e) {
        const auto h = held->find(e->first);
        whole = h != held->end() && h->second.second == e->second;
      }
      if (held && !whole) store_.send_held(staged_, *held);
      Json files = Json::object({});
      for (const auto& [name, size] : expected) files[name] = static_cast<std::int64_t>(size);
      std::string marker;
      std::shared_ptr<s3::Buffer> body;  // inline: the marker's line and the files after it
      if (whole) {
        // The format's own files (_CHECKPOINT, _METADATA, _USER_METADATA) first, the smallest
        // first, so that a reader of the metadata alone finds them in what it reads first (a
        // Checkpointer opening its root reads _CHECKPOINT and _USER_METADATA, not _METADATA).
        std::vector<std::string> order;
        for (const auto& [name, size] : expected)
          if (name.rfind('_', 0) == 0) order.push_back(name);
        std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
          return expected.at(a) < expected.at(b);
        });
        for (const auto& [name, size] : expected)
          if (name.rfind('_', 0) != 0) order.push_back(name);
        Json at = Json::object({});
        std::uint64_t end = 0;
        for (const auto& name : order) {
          at[name] = static_cast<std::int64_t>(end);
          end += expected.at(name);
        }
        marker = Json::object({{"format", "cairn"}, {"store", "object"}, {"generation", gen_}, {"files", files},
                               {"inline", at}}).dump() + "\n";
        // Built in one of the store's transfer buffers where it fits one (touched before: no
        // page faults for megabytes of fresh memory).
        const std::size_t base = marker.size(), total = base + static_cast<std::size_t>(end);
        body = store_.buffers_.take_block(total);
        std::memcpy(body->data(), marker.data(), base);
        for (const auto& name : order) {
          const auto& h = held->at(name);
          if (h.second) std::memcpy(body->data() + base + at.at(name).as_int(), h.first->data(), static_cast<std::size_t>(h.second));
        }
        held.reset();  // the buffers go: the marker has the bytes
      } else {
        // Where other ranks wrote into the generation, an upload one of them left open (its
        // CreateMultipartUpload's answer lost) is found here too: they are all done by now.
        const bool others = store_.check_all_there(staged_, expected, "not published");
        store_.abort_orphan_uploads(staged_, others);
        marker = Json::object({{"format", "cairn"}, {"store", "object"}, {"generation", gen_}, {"files", files}}).dump() + "\n";
      }
      const unsigned char* put_data = body ? body->data() : reinterpret_cast<const unsigned char*>(marker.data());
      const std::size_t put_size = body ? body->size() : marker.size();
      std::string sha256 = s3::sha256_hex(put_data, put_size);
      looks_->wait();  // their refusal, and what an overwrite replaces (replacing_, replaced_etag_)
      bool moved = false;
      if (look.valid()) {
        const auto now = look.get();
        moved = replacing_ ? (!now || now->etag != replaced_etag_) : now.has_value();
      }
      s3::WriteCondition cond;
      if (replacing_) cond.if_match = replaced_etag_;
      else cond.create_only = true;
      auto race = [&] {
        return Error(ErrorKind::already_exists,
                     std::string(replacing_ ? "the checkpoint this save replaces was replaced or removed since the save "
                                              "began (a race); this save was not published"
                                            : "another save committed this checkpoint first (a race); this save was "
                                              "not published"),
                     store_.describe(key_));
      };
      if (moved) throw race();
      bool put = false;
      try {
        put = store_.client_.put(marker_key, put_data, put_size, cond, std::move(sha256)).has_value();
      } catch (const Error& e) {
        // The marker this overwrite replaces is gone (removed since the save began): AWS
        // answers a write with If-Match on a missing key 404. Nothing was written.
        if (replacing_ && !cond.if_match.empty() && e.kind() == ErrorKind::not_found &&
            e.message().find("NoSuchBucket") == std::string::npos)
          throw race();
        // Failed after its attempts: one of them may still have been applied (its answer lost).
        const std::optional<bool> mine = marker_names_this_save();
        if (!mine) {
          outcome_unknown_ = true;
          throw Error(e.kind(), e.message() + "; whether the commit marker was written is unknown (it could not be read "
                      "back): load the checkpoint to find out", e.file(), e.key_path());
        }
        if (!*mine) throw;
        put = true;
      }
      if (!put) {  // the condition failed: a rival's marker, or one of this save's own attempts
        const std::optional<bool> mine = marker_names_this_save();
        if (!mine) {
          outcome_unknown_ = true;
          throw Error(ErrorKind::io, "the commit marker's write met a marker already there, which could not be read back: "
                      "whether it is this save's (an attempt whose answer was lost) or another save's is unknown: load "
                      "the checkpoint to find out", store_.describe(marker_key));
        }
        if (!*mine) throw race();
      }
      published_ = true;
      // The generation the marker named until now is no one's: removed (a reader still in the
      // middle of it fails and loads again, the load's retry). Only that one: another
      // generation may be a save in progress elsewhere; dead ones go by age.
      if (replaced_inline_) store_.forget_sizes(detail::join_key(key_, replaced_gen_));  // it was all in the marker
      if (!replaced_gen_.empty() && !replaced_inline_) {
        try {
          store_.remove(detail::join_key(key_, replaced_gen_));
        } catch (const Error&) {
          // Left for the next save's or Checkpointer's cleanup: nothing reads it.
        }
      }
    }
   private:
    // Whether the marker there names this save's generation. A PUT the server applied but
    // whose answer was lost (a reset, a timeout, a 500 after the write) is sent again, and the
    // condition then fails on the marker the first attempt wrote: the save did commit. Taken
    // for a rival's, the save failed and removed its generation, which the committed marker
    // named. The generation's name has 64 random bits: no other save writes it.
    // Unknown (nullopt) where the marker cannot be read.
    std::optional<bool> marker_names_this_save() const {
      try {
        return store_.read_generation(key_) == gen_;
      } catch (const Error&) {
        return std::nullopt;
      }
    }

    S3Store& store_;
    std::string key_, gen_, staged_;
    std::shared_ptr<Looks> looks_;

   public:
    // What stage()'s looks learned (look_before_save): the generation and ETag of the marker
    // an overwrite replaces, and whether it held its checkpoint inline. Read once they ended.
    std::string replaced_gen_, replaced_etag_;
    bool replacing_ = false;
    bool replaced_inline_ = false;

   private:
    bool published_ = false;
    bool outcome_unknown_ = false;
  };

  S3Options options_;
  s3::Client client_;
  mutable s3::BufferPool buffers_;  // after client_: built from options_ (declared before both)
  mutable std::mutex known_mutex_;
  mutable std::unordered_map<std::string, std::uint64_t> known_sizes_;  // remember_sizes
  mutable std::set<std::string> known_generations_;  // whose marker was read (learn_generation)
  mutable std::map<std::string, std::shared_ptr<const InlineCheckpoint>> inline_;  // by generation key
  mutable std::uint64_t inline_bytes_ = 0;  // of the heads inline_ holds (as allocated: a huge page is resident whole)
  mutable std::mutex in_place_mutex_;
  // Exports being written in place (stage_foreign), by key: how many stagings, and the object
  // created last (the format's commit).
  struct InPlaceExport {
    int stagings = 0;
    std::string last;
  };
  std::map<std::string, InPlaceExport> in_place_;
  mutable std::mutex fetched_mutex_;
  mutable std::map<std::string, std::shared_future<Fetched>> fetched_;  // by read_ahead handles alive
  std::mutex multipart_mutex_;
  std::set<std::string> multipart_in_;  // generations with multipart uploads (abort_orphan_uploads)
  std::map<std::string, std::map<std::string, std::uint64_t>> written_;  // note_written: by generation, name -> size
  std::map<std::string, InlineSave> inline_saves_;  // by generation key: saves that may go inline (hold_inline)
  std::map<std::string, std::shared_ptr<Looks>> looks_;  // by generation key: stage()'s looks (wait_for_looks)
  // Markers being read on threads of their own (read_generation): waited for before the
  // store goes, as they use its client.
  mutable std::mutex transfers_mutex_;
  mutable std::condition_variable transfers_done_;
  mutable int transfers_ = 0;  // running
};

// The Location of an s3:// or gs:// URI, in a store of its own with these options (where the
// defaults and the environment are not enough: a custom endpoint, a part size):
//   cairn::save(cairn::s3_location("s3://bucket/run7/100", {.endpoint = "http://127.0.0.1:9000"}), state);
// Plain URI strings ("s3://bucket/run7/100") work wherever a path does once cairn/s3.hpp is
// included; they share one store per bucket, configured from the environment.
CAIRN_API Location s3_location(const std::string& uri, const S3Options& options = {});

#if CAIRN_DEFINES_S3
// The definitions: in every including file when header-only; with CAIRN_SEPARATE_COMPILATION,
// only in src/s3.cpp (CAIRN_BUILDING_S3).
CAIRN_API S3Store::S3Store(const std::string& scheme, const std::string& bucket, S3Options options, const std::string& root)
    : options_(checked(std::move(options))),
      client_(bucket, detail::normalize_key(root == "/" ? std::string() : root), options_,
              s3::resolve_config(scheme, bucket, options_)),
      buffers_(static_cast<std::size_t>(options_.part_size), static_cast<std::size_t>(options_.concurrency) + 2,
               options_.keep_buffers_for) {}

CAIRN_API S3Store::~S3Store() {
  std::unique_lock<std::mutex> lock(transfers_mutex_);
  transfers_done_.wait(lock, [this] { return transfers_ == 0; });
}

CAIRN_API Location s3_location(const std::string& uri, const S3Options& options) {
  const std::string scheme = detail::uri_scheme(uri);
  if (scheme != "s3" && scheme != "gs") throw Error(ErrorKind::invalid_argument, "an S3 URI starts with s3:// or gs://", uri);
  const s3::BucketUri u = s3::parse_bucket_uri(scheme, uri.substr(scheme.size() + 3));
  return Location(std::make_shared<S3Store>(scheme, u.bucket, options), u.key);
}
#endif  // CAIRN_DEFINES_S3

CAIRN_END_NAMESPACE
