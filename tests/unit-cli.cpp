// SPDX-License-Identifier: Apache-2.0
// The `cairn` command-line tool, run in-process through cli::run: ls, verify, show, diff and
// convert on checkpoints, a Checkpointer root and safetensors files, their exit statuses, and
// one-line errors for bad input.
#include "cairn_cli.hpp"

#include "sharding_util.hpp"
#include "test_util.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>

namespace {

struct State {
  Eigen::MatrixXf w;  // column-major
  std::vector<double> big;
  std::vector<std::int32_t> counts;
  std::vector<bool> flags;
  std::string name = "run-7";
  cairn::ShardedArray<float> sharded;
};
CAIRN_TREE(State, w, big, counts, flags, name, sharded)

State make_state() {
  State s;
  s.w = Eigen::MatrixXf(3, 4);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) s.w(i, j) = static_cast<float>(10 * i + j) + 0.5f;
  for (int i = 0; i < 10000; ++i) s.big.push_back(i * 0.25);
  s.counts = {1, -2, 300000};
  s.flags = {true, false};
  std::vector<float> g(6 * 4);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i);
  s.sharded = cairn::ShardedArray<float>::from_host(
      g, {6, 4}, cairn::NamedSharding(cairn::Mesh::host({{"x", 2}, {"y", 2}}), cairn::PartitionSpec{"x", "y"}));
  return s;
}

struct Run {
  int status;
  std::string out, err;
};
Run cli(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int status = cairn::cli::run(args, out, err);
  return {status, out.str(), err.str()};
}

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

}  // namespace

TEST_CASE("ls: the tree of a checkpoint, a Checkpointer root and a safetensors file, as text and JSON") {
  test::TempDir dir;
  const std::string c = dir / "c";
  cairn::SaveOptions o;
  o.user_metadata = cairn::Json::object({{"epoch", 3}});
  cairn::save(c, make_state(), o);
  Run r = cli({"ls", c});
  CHECK(r.status == 0);
  CHECK(has(r.out, "cairn checkpoint, format 2"));  // few leaves: no leaf table (docs/format.md)
  CHECK(has(r.out, "w        float32[3, 4] F-order  48 B"));
  CHECK(has(r.out, "sharded  float32[6, 4]"));
  CHECK(has(r.out, "sharded over"));
  CHECK(has(r.out, "4 chunks"));
  CHECK(has(r.out, "user metadata: {\"epoch\":3}"));
  r = cli({"ls", c, "--json"});
  REQUIRE(r.status == 0);
  const cairn::Json j = cairn::Json::parse(r.out);
  CHECK(j.at("kind").as_string() == "checkpoint");
  const auto& leaves = j.at("items").as_array().at(0).at("leaves").as_array();
  REQUIRE(leaves.size() == 6);
  CHECK(leaves[0].at("key").as_string() == "w");
  CHECK(leaves[0].at("order").as_string() == "F");
  CHECK(leaves[5].at("chunks").as_int() == 4);
  // A sharding as a structure: mesh axes and sizes, devices, processes, the spec per dimension.
  const cairn::Json& sh = leaves[5].at("sharding");
  CHECK(sh.at("mesh").as_array().at(0).at("name").as_string() == "x");
  CHECK(sh.at("mesh").as_array().at(1).at("size").as_int() == 2);
  CHECK(sh.at("devices").as_int() == 4);
  CHECK(sh.at("processes").as_int() == 1);
  CHECK(sh.at("spec").as_array().at(0).as_array().at(0).as_string() == "x");
  CHECK(sh.at("spec").as_array().at(1).as_array().at(0).as_string() == "y");
  CHECK(sh.at("text").as_string().find("mesh") == 0);
  CHECK(j.at("user_metadata").at("epoch").as_int() == 3);
  // A URI names the same checkpoint; an unregistered scheme is one line, exit 2.
  const std::string absolute = std::filesystem::absolute(c).string();
  r = cli({"ls", "file://" + absolute});
  CHECK(r.status == 0);
  CHECK(has(r.out, "w        float32[3, 4] F-order  48 B"));
  r = cli({"ls", "nosuch://bucket/c"});
  CHECK(r.status == 2);
  CHECK(has(r.err, "no store is registered for the URI scheme 'nosuch'"));

  const std::string root = dir / "root";
  {
    cairn::Checkpointer ck(root);
    for (std::int64_t step : {10, 20}) {
      cairn::StepSaveOptions a;
      a.metrics = cairn::Json::object({{"loss", 1.0 / static_cast<double>(step)}});
      ck.save(step, std::vector<float>{1, 2}, a);
    }
  }
  r = cli({"ls", root});
  CHECK(r.status == 0);
  CHECK(has(r.out, "Checkpointer root, 2 steps, latest 20"));
  CHECK(has(r.out, "20 (latest)"));
  CHECK(has(r.out, "\"loss\":0.05"));
  r = cli({"ls", root, "--json"});
  {
    const cairn::Json j = cairn::Json::parse(r.out);
    CHECK(j.at("steps").as_array().at(1).at("latest").as_bool());
    CHECK(j.at("steps").as_array().at(1).at("step").as_int() == 20);  // steps are numbers for scripts
    CHECK(j.at("latest").as_int() == 20);
    CHECK(j.at("latest_committed").as_int() == 20);
  }
  // verify checks every step; a damaged one fails the whole root and is named, and ls lists it
  // as damaged without changing anything.
  r = cli({"verify", root});
  CHECK(r.status == 0);
  CHECK(has(r.out, "OK " + root + "/10: "));
  CHECK(has(r.out, "OK " + root + "/20: "));
  std::string meta = test::read_file(root + "/10/_METADATA");
  meta[5] ^= 1;
  test::write_file(root + "/10/_METADATA", meta);
  r = cli({"verify", root});
  CHECK(r.status == 1);
  CHECK(has(r.out, "BAD cairn: corrupt: " + root + "/10/_METADATA"));
  r = cli({"ls", root});
  // (The names are padded to the widest, "20 (latest)".)
  CHECK_MESSAGE(has(r.out, "\n  10" + std::string(9, ' ') + "  damaged: "), r.out);
  CHECK(test::read_file(root + "/10/_METADATA") == meta);
  // A damaged `latest` marker is named, with the latest committed step; verify fails on it.
  test::write_file(root + "/latest", "0\n");
  r = cli({"ls", root});
  CHECK(r.status == 0);
  CHECK(has(r.out, "Checkpointer root, 2 steps\n"));
  CHECK(has(r.out, "warning: the latest marker (" + root + "/latest) is damaged: it says '0', which is no committed step; "
                   "the latest committed step is 20"));
  CHECK(!has(r.out, "(latest)"));
  r = cli({"ls", root, "--json"});
  CHECK(cairn::Json::parse(r.out).at("latest_committed").as_int() == 20);
  CHECK(cairn::Json::parse(r.out).at("latest").as_int() == 0);  // what the damaged marker says
  CHECK(has(cairn::Json::parse(r.out).at("latest_problem").as_string(), "damaged"));
  std::filesystem::remove(root + "/latest");
  r = cli({"ls", root});
  CHECK(has(r.out, "note: there is no latest marker (" + root + "/latest): steps saved by cairn::save, or a Checkpointer "
                   "stopped before writing it; the latest committed step is 20"));
  CHECK(!has(r.out, "warning"));
  // A step directory without a commit marker is listed as incomplete, in text and JSON.
  std::filesystem::create_directories(root + "/30");
  r = cli({"ls", root});
  CHECK(has(r.out, "Checkpointer root, 2 steps"));
  CHECK(has(r.out, "  30  incomplete: no commit marker (a save in progress, or one that died)\n"));
  r = cli({"ls", root, "--json"});
  CHECK(cairn::Json::parse(r.out).at("incomplete").as_array().at(0).as_int() == 30);
  CHECK_FALSE(cairn::Json::parse(r.out).at("plain_directory").as_bool());

  // A directory of checkpoints named as no Checkpointer names its steps ("best", "final"): no
  // `latest` marker is missing there, and none is read as the latest; show, diff and convert
  // ask for one by name (--step NAME, or its path).
  const std::string plain = dir / "plain";
  cairn::save(plain + "/best", std::map<std::string, std::vector<float>>{{"w", {1, 2}}});
  cairn::save(plain + "/final", std::map<std::string, std::vector<float>>{{"w", {3, 4}}});
  r = cli({"ls", plain});
  CHECK(r.status == 0);
  CHECK(has(r.out, plain + ": directory of 2 checkpoints\n"));
  CHECK(has(r.out, "  best  "));
  {
    // Names in step order (digits as numbers), on one line each, padded into a column.
    const std::string names = dir / "names";
    for (const char* n : {"v10", "v2", "best", "a\nb", "v2_final"})
      cairn::save(names + "/" + n, std::map<std::string, std::vector<float>>{{"w", {1, 2}}});
    const Run listed = cli({"ls", names});
    CHECK(listed.status == 0);
    const std::string at = "  20";  // the commit time, after the padded name
    CHECK_MESSAGE(has(listed.out, names + ": directory of 5 checkpoints\n"
                                  "  a\\u000ab" + at),  // 8 columns, as wide as v2_final
                  listed.out);
    const auto line_of = [&](const std::string& name) { return listed.out.find("\n  " + name + " "); };
    CHECK(line_of("a\\u000ab") < line_of("best"));
    CHECK(line_of("best") < line_of("v2"));
    CHECK(line_of("v2") < line_of("v2_final"));
    CHECK(line_of("v2_final") < line_of("v10"));
    CHECK(has(listed.out, "\n  v10" + std::string(5, ' ') + at));
    CHECK(!has(listed.out, "cairn  "));  // no column of systems where every one is cairn's
  }
  const std::string single = dir / "single";
  cairn::save(single + "/best", std::map<std::string, std::vector<float>>{{"w", {1, 2}}});
  CHECK(has(cli({"ls", single}).out, single + ": directory of 1 checkpoint\n"));
  cairn::save(single + "/7", std::map<std::string, std::vector<float>>{{"w", {1, 2}}});
  std::filesystem::remove_all(single + "/best");
  CHECK(has(cli({"ls", single}).out, single + ": Checkpointer root, 1 step\n"));
  CHECK(!has(r.out, "warning"));
  CHECK(!has(r.out, "latest"));
  r = cli({"ls", plain, "--json"});
  {
    const cairn::Json j = cairn::Json::parse(r.out);
    CHECK(j.at("plain_directory").as_bool());
    CHECK(j.at("latest_committed").is_null());
    CHECK(j.find("latest_problem") == nullptr);
    CHECK(j.at("steps").as_array().size() == 2);
  }
  for (const char* cmd : {"show", "diff", "convert"}) {
    const std::string cmd_s = cmd;
    r = cmd_s == "show" ? cli({cmd, plain, "w"}) : cmd_s == "diff" ? cli({cmd, plain, plain + "/best"}) : cli({cmd, plain, dir / "out"});
    CHECK(r.status == 2);
    CHECK_MESSAGE(has(r.err, "a directory of checkpoints (best, final), not one checkpoint: name one, such as " + plain + "/final"),
                  r.err);
  }
  r = cli({"show", plain, "w", "--step", "final"});
  CHECK(r.status == 0);
  CHECK_MESSAGE(has(r.out, "[3, 4]"), r.out);
  r = cli({"show", plain, "w", "--step", "worst"});
  CHECK(r.status == 2);
  CHECK(has(r.err, "no checkpoint worst (the checkpoints: best, final)"));
  r = cli({"verify", plain});
  CHECK(r.status == 0);

  const std::string st = dir / "m.safetensors";
  cairn::save_safetensors(st, std::vector<std::vector<float>>{{1, 2}, {3}});
  r = cli({"ls", st});
  CHECK(r.status == 0);
  CHECK(has(r.out, "safetensors, 1 file"));
  CHECK(has(r.out, "1  float32[1]"));

  // A tensor of a dtype cairn does not have: listed as not read (text and JSON); convert
  // refuses until it is excluded by name.
  const std::string mx = dir / "mx.safetensors";
  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w_scales":{"dtype":"F8_E8M0","shape":[2],"data_offsets":[4,6]}})";
  std::string file(8, '\0');
  file[0] = static_cast<char>(header.size());
  test::write_file(mx, file + header + std::string(6, '\1'));
  r = cli({"ls", mx});
  CHECK(r.status == 0);
  CHECK(has(r.out, "(tree, 1 leaf, 1 that cairn cannot read)"));
  CHECK(has(r.out, "  w_scales  not read: dtype F8_E8M0[2], which cairn does not read\n"));
  r = cli({"ls", mx, "--json"});
  CHECK(cairn::Json::parse(r.out).at("items").as_array().at(0).at("unread").as_array().at(0).at("key").as_string() == "w_scales");
  r = cli({"verify", mx});  // what cannot be read is not verified, and says so
  CHECK(r.status == 0);
  CHECK(has(r.out, "  not verified: w_scales: dtype F8_E8M0[2], which cairn does not read\n"));
  r = cli({"convert", mx, dir / "mx-out.safetensors"});
  CHECK(r.status == 2);
  CHECK(has(r.err, "--exclude 'w_scales'"));
  r = cli({"convert", mx, dir / "mx-out.safetensors", "--exclude", "w_scales"});
  CHECK(r.status == 0);
}

TEST_CASE("verify: exit 0 only when every chunk is intact, and a report naming file, bytes and key") {
  test::TempDir dir;
  const std::string c = dir / "c";
  cairn::save(c, make_state());
  Run r = cli({"verify", c});
  CHECK(r.status == 0);
  CHECK(has(r.out, "OK " + c + ": 9 chunks"));
  // A flipped byte inside the big leaf.
  const auto meta = cairn::metadata(c);
  const cairn::LeafRecord* big = nullptr;
  for (const auto& l : meta.leaves())
    if (l.key() == "big") big = &l;
  REQUIRE(big);
  std::string data = test::read_file(c + "/data-0-0.bin");
  data[static_cast<std::size_t>(big->chunks[0].offset + 100)] ^= 1;
  test::write_file(c + "/data-0-0.bin", data);
  r = cli({"verify", c});
  CHECK(r.status == 1);
  CHECK(has(r.out, "BAD " + c + "/data-0-0.bin bytes " + std::to_string(big->chunks[0].offset)));
  CHECK(has(r.out, "(key 'big'): checksum mismatch"));
  CHECK(has(r.out, "FAILED " + c + ": 1 of 9 chunks bad"));
  // Truncated: the chunks past the end are named too.
  data.resize(static_cast<std::size_t>(big->chunks[0].offset + 8));
  test::write_file(c + "/data-0-0.bin", data);
  r = cli({"verify", c});
  CHECK(r.status == 1);
  CHECK(has(r.out, "(key 'sharded')"));
  // Damaged metadata is an error of its own (exit 2, one line).
  std::string m = test::read_file(c + "/_METADATA");
  m[10] ^= 1;
  test::write_file(c + "/_METADATA", m);
  r = cli({"verify", c});
  CHECK(r.status == 2);
  CHECK(has(r.err, "_METADATA"));
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  // safetensors: no checksums, but the header and every byte.
  const std::string st = dir / "m.safetensors";
  cairn::save_safetensors(st, std::vector<float>(1000, 1.5f));
  r = cli({"verify", st});
  CHECK(r.status == 0);
  CHECK(has(r.out, "no checksums"));
  std::string bytes = test::read_file(st);
  bytes.resize(bytes.size() - 4);
  test::write_file(st, bytes);
  r = cli({"verify", st});
  CHECK(r.status == 2);
  CHECK(has(r.err, "m.safetensors"));
}

TEST_CASE("show: values, slices, numpy-like abbreviation, reading only what it prints") {
  test::TempDir dir;
  const std::string c = dir / "c";
  const State s = make_state();
  cairn::save(c, s);
  Run r = cli({"show", c, "w"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "w: float32[3, 4]\n[[0.5, 1.5, 2.5, 3.5],\n [10.5, 11.5, 12.5, 13.5],\n [20.5, 21.5, 22.5, 23.5]]"));
  r = cli({"show", c, "w[0:2, 1:3]"});
  CHECK(has(r.out, "showing [0:2, 1:3]\n[[1.5, 2.5],\n [11.5, 12.5]]"));
  // A subtree is not shown: the error names the leaves it holds.
  std::map<std::string, std::map<std::string, std::vector<float>>> layered;
  for (int i = 0; i < 10; ++i) layered["layers"]["l" + std::to_string(i)] = {static_cast<float>(i)};
  cairn::save(dir / "layered", layered);
  r = cli({"show", dir / "layered", "layers"});
  CHECK(r.status == 2);
  CHECK_MESSAGE(has(r.err, "'layers' is a subtree, not a leaf: its leaves are layers/l0, layers/l1, layers/l2, layers/l3, "
                           "layers/l4, layers/l5, layers/l6, layers/l7, ... (10 in all)"), r.err);
  r = cli({"show", dir / "layered", "layer"});
  CHECK_MESSAGE(has(r.err, "no leaf 'layer'; the top of the tree holds layers; did you mean 'layers/l0'?") == false, r.err);
  CHECK_MESSAGE(has(r.err, "no leaf 'layer'; the top of the tree holds layers (cairn ls lists them)"), r.err);
  r = cli({"show", dir / "layered", "layers/L3"});  // a typo: what is there, and the leaf meant
  CHECK_MESSAGE(has(r.err, "no leaf 'layers/L3'; 'layers' holds l0, l1, l2, l3, l4, l5, l6, l7, l8, l9; did you mean 'layers/l3'?"), r.err);
  r = cli({"show", c, "w[-1]"});
  CHECK(has(r.out, "[20.5, 21.5, 22.5, 23.5]"));
  r = cli({"show", c, "w[1, 2]"});
  CHECK(has(r.out, "\n12.5\n"));
  // "..." stands for the whole dimensions the rank leaves, as in numpy.
  r = cli({"show", c, "w[..., 1]"});
  CHECK(has(r.out, "showing [0:3, 1:2]\n[1.5, 11.5, 21.5]\n"));
  r = cli({"show", c, "w[2, ...]"});
  CHECK(has(r.out, "showing [2:3, 0:4]\n[20.5, 21.5, 22.5, 23.5]\n"));
  r = cli({"show", c, "w[1, ..., 3]"});
  CHECK(has(r.out, "\n13.5\n"));
  // numpy's chained indexing: w[1][2] is w[1, 2]; after a slice a bracket would index the same
  // dimension again, so it is refused, naming the one-bracket form.
  r = cli({"show", c, "w[1][2]"});
  CHECK_MESSAGE(has(r.out, "\n12.5\n"), r.err);
  r = cli({"show", c, "w[-1][1:3]"});
  CHECK_MESSAGE(has(r.out, "[21.5, 22.5]\n"), r.err);
  r = cli({"show", c, "w[0:2][1]"});
  CHECK(r.status == 2);
  CHECK_MESSAGE(has(r.err, "a bracket after a slice indexes that dimension again; write one bracket, as in 'w[0:2, 1]'"), r.err);
  r = cli({"show", c, "w[...]"});
  CHECK(has(r.out, "showing [0:3, 0:4]\n[[0.5, 1.5, 2.5, 3.5],"));
  r = cli({"show", c, "sharded[2:4, :]"});  // across shard boundaries
  CHECK(has(r.out, "[[8, 9, 10, 11],\n [12, 13, 14, 15]]"));
  r = cli({"show", c, "counts"});
  CHECK(has(r.out, "[1, -2, 300000]"));
  r = cli({"show", c, "flags"});
  CHECK(has(r.out, "[True, False]"));
  r = cli({"show", c, "name"});
  CHECK(has(r.out, "run-7"));
  // A string takes no index: it was passed over, and the whole string printed as if sliced.
  r = cli({"show", c, "name[0:2]"});
  CHECK(r.status == 2);
  CHECK(r.out.empty());
  CHECK_MESSAGE(has(r.err, "key 'name': 'name' is a string: it takes no index (cairn show name prints it whole)"), r.err);
  r = cli({"show", c, "big"});
  CHECK(has(r.out, "[0, 0.25, 0.5, ..., 2499.25, 2499.5, 2499.75]"));
  // The abbreviated leaf reads the blocks of its six values: its 80,000 bytes are one block,
  // read once and verified (a large leaf: the show test below).
  cairn::LoadReport report;
  const auto v = cairn::read_arrays(c, {"big"}, {.as = cairn::DType::float64, .boxes = {cairn::Box{{0}, {3}}, cairn::Box{{9997}, {3}}}},
                                    &report);
  CHECK(report.bytes_read == 80000);
  CHECK(report.unverified_bytes == 0);
  CHECK(v.at("big").bytes.size() == 48);
  // Errors: one line, exit 2.
  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
           {"show", c, "nothing"}, {"show", c, "w[5]"}, {"show", c, "w[0:1:2]"}, {"show", c, "w[a]"},
           {"show", c, "w[0, 0, 0]"}, {"show", c, "w[0"}, {"show", c, "w[..., ...]"}, {"show", c, "w[0, ..., 0, 0]"}}) {
    CAPTURE(bad[2]);
    r = cli(bad);
    CHECK(r.status == 2);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
}

TEST_CASE("diff: same, different values within and beyond tolerance, different structure") {
  test::TempDir dir;
  State s = make_state();
  cairn::save(dir / "a", s);
  cairn::save(dir / "b", s);
  Run r = cli({"diff", dir / "a", dir / "b"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "same: 6 leaves"));
  s.big[7] += 1e-3;
  cairn::save(dir / "c", s);
  r = cli({"diff", dir / "a", dir / "c"});
  CHECK(r.status == 1);
  CHECK(has(r.out, "values differ: big: max abs 0.001"));
  CHECK(has(r.out, "1 of 10000 elements beyond tolerance"));
  CHECK(cli({"diff", dir / "a", dir / "c", "--atol", "0.01"}).status == 0);
  std::map<std::string, std::vector<float>> other{{"q", {1}}};
  cairn::save(dir / "d", other);
  r = cli({"diff", dir / "a", dir / "d"});
  CHECK(r.status == 1);
  CHECK(has(r.out, "only in A: w"));
  CHECK(has(r.out, "only in B: q"));
  CHECK(cli({"diff", dir / "a", dir / "c", "--rtol", "x"}).status == 2);
  // The differing elements are listed with their index and both values, as h5diff does.
  s.big[9000] = -5;
  cairn::save(dir / "e", s);
  r = cli({"diff", dir / "a", dir / "e", "--max-report", "1"});
  CHECK(has(r.out, "2 of 10000 elements beyond tolerance"));
  CHECK(has(r.out, "  [7] 1.75 1.751 0.001"));
  CHECK(!has(r.out, "[9000]"));
  CHECK(has(r.out, "--max-report N lists more"));
  r = cli({"diff", dir / "a", dir / "e", "--atol=0.01"});  // --name=value
  CHECK(has(r.out, "1 of 10000 elements beyond tolerance"));
  CHECK(has(r.out, "  [9000] 2250 -5 2255"));
  CHECK(cli({"diff", dir / "a", dir / "e", "--max-report", "-1"}).status == 2);
  CHECK(cli({"ls", dir / "a", "--json=yes"}).status == 2);
}

TEST_CASE("show and diff find a map's empty string key, which prints as an empty last segment") {
  // {"u": {"": ..., "v": ...}} stores the leaves "u/" and "u/v"; diff read "u/" as "u", the
  // subtree, and failed on two identical checkpoints.
  test::TempDir dir;
  std::map<std::string, std::map<std::string, std::vector<std::int32_t>>> t{{"u", {{"", {7, 8}}, {"v", {9}}}}};
  cairn::save(dir / "a", t);
  cairn::save(dir / "b", t);
  Run r = cli({"diff", dir / "a", dir / "b"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "same: 2 leaves"));
  t["u"][""][1] = 6;
  cairn::save(dir / "c", t);
  r = cli({"diff", dir / "a", dir / "c"});
  CHECK(r.status == 1);
  CHECK(has(r.out, "values differ: u/: max abs 2"));
  r = cli({"show", dir / "a", "u/"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "u/: int32[2]"));
  CHECK(has(r.out, "[7, 8]"));
  r = cli({"show", dir / "a", "u/v"});
  CHECK(has(r.out, "[9]"));
  r = cli({"show", dir / "a", "u"});
  CHECK(r.status == 2);
  CHECK(has(r.err, "'u' is a subtree, not a leaf: its leaves are u/, u/v"));
}

// An RNG key or a step counter past 2^53 that differs in its last bits is no double: compared
// as float64, such leaves read as the same (exit 0). Integers on both sides compare exactly,
// signed with unsigned too; infinities of opposite signs are "max rel inf", not "-nan".
TEST_CASE("diff compares 64-bit integers exactly, and prints no NaN's sign") {
  test::TempDir dir;
  std::mt19937_64& g = test::rng();
  using U = std::map<std::string, std::vector<std::uint64_t>>;
  using I = std::map<std::string, std::vector<std::int64_t>>;
  U a{{"rng", {}}};
  for (int i = 0; i < 50; ++i) a["rng"].push_back(g() | (std::uint64_t{1} << 63));
  U b = a;
  const std::size_t at = g() % 50;
  b["rng"][at] ^= 1;  // the last bit only
  cairn::save(dir / "a", a);
  cairn::save(dir / "b", b);
  Run r = cli({"diff", dir / "a", dir / "b"});
  CHECK(r.status == 1);
  CHECK(has(r.out, "values differ: rng: max abs 1, "));
  CHECK(has(r.out, "1 of 50 elements beyond tolerance"));
  CHECK(has(r.out, "  [" + std::to_string(at) + "] " + std::to_string(a["rng"][at]) + " " + std::to_string(b["rng"][at]) + " 1\n"));
  CHECK(cli({"diff", dir / "a", dir / "a"}).status == 0);
  // Signed: -2^63 against 2^63 - 1, and a counter past 2^53.
  I c{{"n", {std::numeric_limits<std::int64_t>::min(), (std::int64_t{1} << 60) + 3, 7}}};
  I d{{"n", {std::numeric_limits<std::int64_t>::max(), (std::int64_t{1} << 60) + 2, 7}}};
  cairn::save(dir / "c", c);
  cairn::save(dir / "d", d);
  r = cli({"diff", dir / "c", dir / "d"});
  CHECK(r.status == 1);
  CHECK(has(r.out, "2 of 3 elements beyond tolerance"));
  CHECK(has(r.out, "  [0] -9223372036854775808 9223372036854775807 1.84467e+19\n"));
  CHECK(has(r.out, "  [1] 1152921504606846979 1152921504606846978 1\n"));
  CHECK(cli({"diff", dir / "c", dir / "d", "--atol", "2e19"}).status == 0);
  // Unsigned against signed: the dtype differs, and the values compare exactly.
  cairn::save(dir / "e", U{{"n", {0, (std::uint64_t{1} << 60) + 2, 7}}});
  r = cli({"diff", dir / "d", dir / "e"});
  CHECK(has(r.out, "dtype differs: n: int64 vs uint64"));
  CHECK(has(r.out, "1 of 3 elements beyond tolerance"));
  CHECK(has(r.out, "  [0] 9223372036854775807 0 9.22337e+18\n"));
  // Booleans are integers too.
  cairn::save(dir / "f", std::map<std::string, std::vector<bool>>{{"m", {true, false, true}}});
  cairn::save(dir / "h", std::map<std::string, std::vector<bool>>{{"m", {true, true, true}}});
  CHECK(has(cli({"diff", dir / "f", dir / "h"}).out, "  [1] False True 1\n"));
  // Infinities of opposite signs.
  cairn::save(dir / "p", std::map<std::string, std::vector<float>>{{"x", {INFINITY, 1}}});
  cairn::save(dir / "q", std::map<std::string, std::vector<float>>{{"x", {-INFINITY, 1}}});
  r = cli({"diff", dir / "p", dir / "q"});
  CHECK(has(r.out, "max abs inf, max rel inf, 1 of 2"));
  CHECK(!has(r.out, "-nan"));
}

TEST_CASE("show prints the shortest text that reads back as the value; --version") {
  test::TempDir dir;
  std::map<std::string, std::vector<float>> f{{"x", {0.01f, 0.016f, 1e-8f, 3.0f}}};
  std::map<std::string, std::vector<double>> d{{"x", {0.1, 1.0 / 3}}};
  cairn::save(dir / "f", f);
  cairn::save(dir / "d", d);
  Run r = cli({"show", dir / "f", "x"});
  CHECK(has(r.out, "[0.01, 0.016, 1e-08, 3]"));
  r = cli({"show", dir / "d", "x"});
  CHECK(has(r.out, "[0.1, 0.3333333333333333]"));
  // A tree that is one leaf: its key is "", printed as ls prints it; one leaf, not "1 leaves".
  cairn::save(dir / "root", std::vector<float>{1, 2});
  r = cli({"show", dir / "root", ""});
  CHECK(r.out.rfind("(root): float32[2]\n[1, 2]", 0) == 0);
  CHECK(has(cli({"ls", dir / "root"}).out, "(tree, 1 leaf)"));
  CHECK(has(cli({"diff", dir / "root", dir / "root"}).out, "same: 1 leaf (atol"));
  r = cli({"--version"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "cairn " + std::to_string(CAIRN_VERSION_MAJOR) + "."));
  // Metrics print as they were given, in text and JSON alike.
  CHECK(cairn::Json(0.0025).dump() == "0.0025");
  CHECK(cairn::Json(1e300).dump() == "1e+300");
  CHECK(cairn::Json(2.0).dump() == "2.0");
  for (int i = 0; i < 1000; ++i) {
    const double v = test::random_bits<double>(1)[0];
    if (!std::isfinite(v)) continue;
    const double back = cairn::Json::parse(cairn::Json(v).dump()).as_double();
    CHECK(std::memcmp(&back, &v, 8) == 0);
  }
}

TEST_CASE("show: safetensors names; slices verified by block checksums, and a note where they cannot be") {
  test::TempDir dir;
  std::map<std::string, std::map<std::string, std::vector<float>>> layers{{"layers", {{"w", {1, 2, 3}}}}};
  cairn::save_safetensors(dir / "m.safetensors", layers);
  Run r = cli({"show", dir / "m.safetensors", "layers.w"});  // the file's own name
  CHECK(r.status == 0);
  CHECK(has(r.out, "layers/w: float32[3]"));
  CHECK(r.err.empty());
  // A slice of a small chunk (one block) reads it whole: verified, no note.
  std::vector<float> small(5000);
  for (std::size_t i = 0; i < small.size(); ++i) small[i] = static_cast<float>(i);
  cairn::save(dir / "c", small);
  r = cli({"show", dir / "c", "[0:2]"});
  CHECK(has(r.out, "[0, 1]"));
  CHECK(r.err.empty());
  r = cli({"show", dir / "c", ""});  // the whole leaf, summarized: read whole too
  CHECK(r.err.empty());
  // A slice of a large chunk reads the blocks around it and verifies them: a flipped byte in
  // them is an error without --verify, one in a block the slice does not need is not read.
  std::vector<float> big(1 << 20);  // 4 MiB: 16 blocks of 256 KiB
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i);
  cairn::save(dir / "b", big);
  const auto meta = cairn::metadata(dir / "b");
  const auto& chunk = meta.leaves()[0].chunks[0];
  REQUIRE(chunk.blocks);
  CHECK(chunk.blocks->crc32c.size() == chunk.nbytes / chunk.blocks->block_bytes);
  r = cli({"show", dir / "b", "[0:2]"});
  CHECK(has(r.out, "[0, 1]"));
  CHECK(r.err.empty());
  // The whole leaf abbreviated: its first and last three values, one block each.
  cairn::LoadReport report;
  (void)cairn::read_arrays(dir / "b", {}, {.boxes = {cairn::Box{{0}, {3}}, cairn::Box{{(1 << 20) - 3}, {3}}}}, &report);
  CHECK(report.bytes_read == 2 * chunk.blocks->block_bytes);
  CHECK(report.unverified_bytes == 0);
  const std::string original = test::read_file(dir / "b/" + chunk.file);
  std::string data = original;
  data[chunk.offset + chunk.nbytes - 5] ^= 1;  // in the last block
  test::write_file(dir / "b/" + chunk.file, data);
  r = cli({"show", dir / "b", "[0:2]"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "[0, 1]"));
  data = original;
  data[chunk.offset + 4] ^= 1;  // in the first block, beside the values shown
  test::write_file(dir / "b/" + chunk.file, data);
  r = cli({"show", dir / "b", "[0:2]"});
  CHECK(r.status == 2);
  CHECK(has(r.err, "checksum mismatch in bytes " + std::to_string(chunk.offset) + ".."));
  CHECK(has(r.err, "block 0"));
  // A checkpoint written before block checksums: a slice of its large chunk is unverified,
  // said on stderr; --verify reads the whole leaf first and catches the flip.
  cairn::CheckpointMetadata legacy = meta;
  legacy.items[0].leaves[0].chunks[0].blocks = std::nullopt;
  test::write_file(dir / "b/" + chunk.file, original);
  test::replace_metadata(dir / "b", legacy);
  r = cli({"show", dir / "b", "[0:2]"});
  CHECK(has(r.out, "[0, 1]"));
  CHECK(has(r.err, "not checksum-verified"));
  r = cli({"show", dir / "b", "[0:2]", "--verify"});
  CHECK(has(r.out, "[0, 1]"));
  CHECK(r.err.empty());
  test::write_file(dir / "b/" + chunk.file, data);
  CHECK(cli({"show", dir / "b", "[0:2]"}).status == 0);
  r = cli({"show", dir / "b", "[0:2]", "--verify"});
  CHECK(r.status == 2);
  CHECK(has(r.err, "checksum"));
}

TEST_CASE("convert: checkpoint to safetensors and back, with casts and a selection") {
  test::TempDir dir;
  const State s = make_state();
  cairn::save(dir / "c", s);
  const std::string st = dir / "m.safetensors";
  Run r = cli({"convert", dir / "c", st, "--select", "w", "--select", "big", "--select", "sharded", "--select", "name",
               "--exclude", "name"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "3 tensors"));
  // Back to a checkpoint, then the values are the same as the original's.
  r = cli({"convert", st, dir / "back"});
  CHECK(r.status == 0);
  State back;
  cairn::LoadOptions partial;
  partial.allow_missing = true;
  back.sharded = cairn::ShardedArray<float>(s.sharded.sharding());
  cairn::load(dir / "back", back, partial);
  CHECK(back.w == s.w);
  CHECK(back.big == s.big);
  CHECK(back.sharded.gather() == s.sharded.gather());
  // A bfloat16 export of the floats.
  r = cli({"convert", dir / "c", dir / "bf.safetensors", "--cast", "*=bfloat16", "--select", "w", "--select", "counts"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "1 cast"));
  const auto m = cairn::safetensors_metadata(dir / "bf.safetensors");
  REQUIRE(m.leaves().size() == 2);
  for (const auto& l : m.leaves())  // in the file's order: larger elements first
    CHECK(l.dtype == (l.key() == "w" ? cairn::DType::bfloat16 : cairn::DType::int32));
  // The integer leaf the rule matched and left alone is named, not passed over in silence.
  CHECK(has(r.out, "note: --cast matched 1 leaf it left as stored (a floating-point target changes floating-point "
                   "leaves only; strings never): counts (int32)\n"));
  // An integer target is asked for by name and changes the integer leaf it matches.
  r = cli({"convert", dir / "c", dir / "i64.safetensors", "--cast", "counts=int64", "--select", "counts"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "1 cast"));
  CHECK(!has(r.out, "note:"));
  CHECK(cairn::safetensors_metadata(dir / "i64.safetensors").leaves().at(0).dtype == cairn::DType::int64);
  // A --cast glob that matches no leaf (a typo) is refused by name, not passed over: the
  // export would have kept float32 without a word.
  r = cli({"convert", dir / "c", dir / "typo.safetensors", "--cast", "wieghts/**=bfloat16"});
  CHECK(r.status == 2);
  CHECK_MESSAGE(has(r.err, "cast 'wieghts/**=bfloat16' matches no leaf converted; its leaves: "), r.err);
  CHECK(!std::filesystem::exists(dir / "typo.safetensors"));
  // One that does not fit is refused, naming the element (300000 in int16).
  r = cli({"convert", dir / "c", dir / "i16.safetensors", "--cast", "counts=int16", "--select", "counts"});
  CHECK(r.status == 2);
  CHECK(has(r.err, "element 2 (value 300000) does not fit in int16"));
  // A sharded set, and not over an existing file without --overwrite.
  r = cli({"convert", dir / "c", dir / "set", "--max-file-bytes", "4096", "--select", "big"});
  CHECK(r.status == 0);
  CHECK(cli({"verify", dir / "set/model.safetensors.index.json"}).status == 0);
  // The set's directory reads as the set (its index), for every command.
  r = cli({"ls", dir / "set"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "safetensors"));
  CHECK(has(r.out, "big"));
  CHECK(cli({"verify", dir / "set"}).status == 0);
  r = cli({"show", dir / "set", "big[0:2]"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "[0, 0.25]"));
  // Replaced only with --overwrite, whole: the new set (bfloat16 now) and nothing of the old.
  r = cli({"convert", dir / "c", dir / "set", "--max-file-bytes", "4096", "--select", "big", "--cast", "*=bfloat16"});
  CHECK(r.status == 2);
  CHECK_MESSAGE(has(r.err, "a sharded safetensors set already exists here (pass overwrite to replace it)"), r.err);
  r = cli({"convert", dir / "c", dir / "set", "--max-file-bytes", "4096", "--select", "big", "--cast", "*=bfloat16",
           "--overwrite"});
  CHECK_MESSAGE(r.status == 0, r.err);
  r = cli({"ls", dir / "set"});
  CHECK(has(r.out, "bfloat16"));
  CHECK_FALSE(has(r.out, "float32"));
  CHECK(cli({"verify", dir / "set"}).status == 0);
  CHECK(test::leftovers(dir.path).empty());
  r = cli({"convert", dir / "c", st, "--select", "w"});
  CHECK(r.status == 2);
  CHECK(has(r.err, "already exists"));
  CHECK(cli({"convert", dir / "c", st, "--select", "w", "--overwrite"}).status == 0);
  CHECK(cli({"convert", dir / "c", st, "--cast", "bfloat16"}).status == 2);
  CHECK(cli({"convert", dir / "c", st, "--select", "nothing*"}).status == 2);
}

TEST_CASE("a Checkpointer root: show, diff and convert read the latest step, or --step N") {
  test::TempDir dir;
  const std::string root = dir / "root";
  {
    cairn::Checkpointer ck(root);
    for (int step : {1, 2, 3})
      ck.save(step, std::map<std::string, std::vector<float>>{{"w", {float(step), float(step) + 0.5f}}});
  }
  Run r = cli({"show", root, "w"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "[3, 3.5]"));
  CHECK(has(r.err, "is a Checkpointer root: reading its latest committed step, 3 (--step N reads another)"));
  r = cli({"show", root, "w", "--step", "2"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "[2, 2.5]"));
  CHECK(r.err.empty());
  r = cli({"show", root, "w", "--step=9"});
  CHECK(r.status == 2);
  CHECK(has(r.err, "no committed step 9 (the steps: 1, 2, 3)"));
  CHECK(cli({"diff", root, root, "--step", "1"}).status == 0);
  CHECK(cli({"diff", root, root + "/1"}).status == 1);  // the latest (3) against step 1
  r = cli({"convert", root, dir / "latest.safetensors"});
  CHECK(r.status == 0);
  CHECK(cairn::read_arrays(dir / "latest.safetensors", {"w"}).at("w").bytes.size() == 8);
  r = cli({"ls", root, "--step", "2"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "cairn checkpoint"));
  CHECK(cli({"verify", root, "--step", "2"}).status == 0);
  r = cli({"show", root + "/1", "w", "--step", "1"});  // a checkpoint has no steps
  CHECK(r.status == 2);
  CHECK(has(r.err, "--step picks a step of a Checkpointer root"));
}

TEST_CASE("bad command lines and paths are one-line errors with exit 2, never a crash") {
  test::TempDir dir;
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {}, {"frobnicate"}, {"ls"}, {"ls", dir / "missing"}, {"ls", "a", "b"}, {"verify", dir.path},
           {"show", dir / "x"}, {"diff", "--atol"}, {"ls", "--nope", "x"}, {"convert", "a"},
           {"convert", "a", "b", "--max-file-bytes", "-1"}, {"ls", dir / "no.safetensors"}}) {
    CAPTURE(args.size());
    const Run r = cli(args);
    CHECK(r.status == 2);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == (args.empty() ? std::count(cairn::cli::usage_text,
                                                                                      cairn::cli::usage_text + std::strlen(cairn::cli::usage_text), '\n') : 1));
  }
  CHECK(cli({"--help"}).status == 0);
  // `cairn CMD --help` is that command's help on stdout, wherever the flag is, not an error.
  for (const char* cmd : {"ls", "verify", "show", "diff", "convert"})
    for (const char* flag : {"--help", "-h"}) {
      CAPTURE(cmd);
      CAPTURE(flag);
      const Run h = cli({cmd, flag});
      CHECK(h.status == 0);
      CHECK(h.err.empty());
      CHECK(h.out.rfind(std::string("usage: cairn ") + cmd, 0) == 0);
      CHECK(has(h.out, std::string("\n  ") + cmd + " "));
      CHECK(has(h.out, "--step N"));  // the notes for every command
      for (const char* other : {"ls PATH", "verify PATH", "show PATH", "diff A B", "convert SRC"})
        if (std::string(other).rfind(cmd, 0) != 0) CHECK_FALSE(has(h.out, std::string("  ") + other));
      CHECK(cli({cmd, "some/path", flag}).status == 0);
    }
  CHECK(has(cli({"convert", "--help"}).out, "--orbax-layout"));
  CHECK(cli({"frobnicate", "--help"}).status == 2);  // an unknown command is still an error
  // An option of another command is refused, never taken and ignored.
  const Run r = cli({"diff", "a", "b", "--exclude", "name"});
  CHECK(r.status == 2);
  CHECK(has(r.err, "cairn diff does not take --exclude"));
  CHECK(has(cli({"ls", "a", "--atol=1"}).err, "cairn ls does not take --atol"));
}

TEST_CASE("what a checkpoint holds is printed with its control characters escaped: no key or string can drive the terminal") {
  test::TempDir dir;
  // Keys and values a hostile checkpoint could hold: an escape that retitles the terminal,
  // one that clears it, a carriage return and backspaces that overwrite what was printed, a
  // newline that would print a line looking like another leaf, and C1 controls in UTF-8.
  const std::string esc_key = "w\x1b]0;owned\x07";
  const std::string nl_key = std::string("a\n  fake   float32[9]");
  const std::string c1_key = "c1\xc2\x9b" "2J";
  std::map<std::string, std::string> m{{esc_key, "v\x1b[2J\r\b\bx"}, {nl_key, "ok"}, {c1_key, "caf\xc3\xa9 \xc2\xb0"}};
  cairn::SaveOptions so;
  so.user_metadata = cairn::Json::object({{"note", "\x7f\x1b[1m"}});
  cairn::save(dir / "c", m, so);
  std::filesystem::create_directories(dir / "other/x\x1b[31m");  // a listing's names too
  auto clean = [](const std::string& text) {
    for (std::size_t i = 0; i < text.size(); ++i) {
      const auto b = static_cast<unsigned char>(text[i]);
      if ((b < 0x20 && b != '\n') || b == 0x7f) return false;
      if (b == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
          static_cast<unsigned char>(text[i + 1]) <= 0x9f)
        return false;
    }
    return true;
  };
  std::vector<std::vector<std::string>> commands = {
      {"ls", dir / "c"}, {"ls", dir / "c", "--json"}, {"show", dir / "c", cairn::escape_key_segment(esc_key)},
      {"show", dir / "c", cairn::escape_key_segment(c1_key)}, {"ls", dir / "other"}, {"show", dir / "c", "no\x1b[2Jkey"},
      {"diff", dir / "c", dir / "c"}, {"verify", dir / "c"}};
  for (const auto& args : commands) {
    CAPTURE(args[0]);
    const Run r = cli(args);
    CHECK(clean(r.out));
    CHECK(clean(r.err));
  }
  const Run ls = cli({"ls", dir / "c"});
  CHECK(has(ls.out, "w\\u001b]0;owned\\u0007"));
  CHECK(has(ls.out, "a\\u000a  fake   float32[9]"));  // on the key's own line
  CHECK_FALSE(has(ls.out, "\n  fake"));
  CHECK(has(ls.out, "c1\\u009b2J"));
  CHECK(std::count(ls.out.begin(), ls.out.end(), '\n') == 6);  // header, item, 3 leaves, user metadata
  // The JSON output stays JSON, and reads back as the key.
  const cairn::Json j = cairn::Json::parse(cli({"ls", dir / "c", "--json"}).out);
  std::vector<std::string> keys;
  for (const auto& l : j.at("items").as_array()[0].at("leaves").as_array()) keys.push_back(l.at("key").as_string());
  CHECK(std::count(keys.begin(), keys.end(), c1_key) == 1);
  CHECK(std::count(keys.begin(), keys.end(), esc_key) == 1);
  // A string value: its control characters escaped, its text (UTF-8 included) as it is.
  CHECK(has(cli({"show", dir / "c", cairn::escape_key_segment(esc_key)}).out, "v\\u001b[2J\\u000d\\u0008\\u0008x"));
  CHECK(has(cli({"show", dir / "c", cairn::escape_key_segment(c1_key)}).out, "caf\xc3\xa9 \xc2\xb0"));
  CHECK(has(cli({"ls", dir / "other"}).err, "x\\u001b[31m"));
  // Bytes that are no UTF-8 (a lone lead byte, a byte that never starts a character, an
  // overlong form, a surrogate): \xNN in text, \udcNN in JSON, which stays valid JSON.
  std::map<std::string, float> bytes{{"cut\xc3(", 1}, {"ff\xff", 2}, {"over\xc0\xaf", 3}, {"sur\xed\xa0\x80", 4}, {"end\xe2\x82", 5},
                                     {"caf\xc3\xa9", 6}};
  cairn::save(dir / "b", bytes);
  const Run text = cli({"ls", dir / "b"});
  for (const char* k : {"cut\\xc3(", "ff\\xff", "over\\xc0\\xaf", "sur\\xed\\xa0\\x80", "end\\xe2\\x82 "}) {
    CAPTURE(k);
    CHECK(has(text.out, k));
  }
  const Run json = cli({"ls", dir / "b", "--json"});
  CHECK(cairn::detail::valid_utf8(json.out));
  CHECK(has(json.out, "\"key\":\"ff\\udcff\""));
  // (cairn's own JSON reader refuses lone surrogates; Python's json, jq and JSON.parse take them.)
  std::size_t listed = 0;
  for (std::size_t at = 0; (at = json.out.find("{\"key\":", at)) != std::string::npos; ++at) ++listed;
  CHECK(listed == 6);
  // The key column is as wide as the longest key as printed (escapes and all, a character of
  // UTF-8 one column), so the dtypes line up.
  std::vector<std::size_t> dtype_at;
  std::istringstream lines(text.out);
  for (std::string line; std::getline(lines, line);) {
    const std::size_t f = line.find("float32[]");
    if (f == std::string::npos) continue;
    std::size_t columns = 0;
    for (std::size_t i = 0; i < f; ++i) columns += (static_cast<unsigned char>(line[i]) & 0xC0) != 0x80;
    dtype_at.push_back(columns);
  }
  REQUIRE(dtype_at.size() == 6);
  CHECK(std::count(dtype_at.begin(), dtype_at.end(), dtype_at[0]) == 6);
  CHECK(cairn::detail::valid_utf8(text.out));
}

TEST_CASE("ls lines up keys and names as a terminal shows them: wide characters take two columns, combining marks none") {
  // A vocabulary of Japanese tokens, an accent written as a combining mark, an emoji: the
  // dtypes start in one column on screen. (A CJK key was counted one column a character and
  // pushed its dtype right; a control character's escape was counted one column.)
  test::TempDir dir;
  const std::string jp = "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e";  // 3 characters, 6 columns
  const std::string accent = "e\xcc\x81te";                              // e + U+0301: 3 columns
  const std::string emoji = "\xf0\x9f\x98\x80x";                         // 3 columns
  std::map<std::string, std::vector<float>> m{{"abcd", {1}}, {jp, {2}}, {accent, {3}}, {emoji, {4}}};
  cairn::save(dir / "c", m);
  const Run r = cli({"ls", dir / "c"});
  CHECK(r.status == 0);
  CHECK_MESSAGE(has(r.out, "\n  abcd    float32[1]"), r.out);  // the widest key is 6 columns
  CHECK(has(r.out, "\n  " + jp + "  float32[1]"));
  CHECK(has(r.out, "\n  " + accent + "     float32[1]"));
  CHECK(has(r.out, "\n  " + emoji + "     float32[1]"));
  // Directory names: an escape is as wide as it prints (\u001b: 6 columns).
  const std::string names = dir / "names";
  for (const char* n : {"x\x1b", "abcdefg", jp.c_str()})
    cairn::save(names + "/" + n, std::map<std::string, std::vector<float>>{{"w", {1}}});
  const Run listed = cli({"ls", names});
  CHECK(listed.status == 0);
  CHECK_MESSAGE(has(listed.out, "\n  x\\u001b  20"), listed.out);    // 7 columns, as wide as abcdefg
  CHECK(has(listed.out, "\n  abcdefg  20"));
  CHECK(has(listed.out, "\n  " + jp + "   20"));
  CHECK(cairn::cli::code_point_columns(0x41) == 1);
  CHECK(cairn::cli::code_point_columns(0x301) == 0);
  CHECK(cairn::cli::code_point_columns(0xAC00) == 2);   // Hangul
  CHECK(cairn::cli::code_point_columns(0xFF21) == 2);   // fullwidth A
  CHECK(cairn::cli::code_point_columns(0x3000) == 2);   // ideographic space
  CHECK(cairn::cli::code_point_columns(0x200B) == 0);   // zero width space
}

TEST_CASE("every item: diff compares them all, show --item picks one, convert carries them or refuses to drop them") {
  test::TempDir dir;
  std::vector<float> w{1, 2, 3};
  std::mt19937 rng(42);
  cairn::Json loader = cairn::Json::object({{"epoch", 2}, {"offset", 1234}});
  cairn::save(dir / "a", cairn::Items().tree("state", w).tree("rng", rng).json("loader", loader));
  rng.discard(5);  // another RNG state, the same tree
  cairn::save(dir / "b", cairn::Items().tree("state", w).tree("rng", rng).json("loader", loader));
  Run r = cli({"diff", dir / "a", dir / "b"});
  CHECK(r.status == 1);
  CHECK(has(r.out, "differs: rng: (root): "));  // the engine's text state: its length differs too
  CHECK(!has(r.out, "differs: (root)"));
  cairn::save(dir / "c", cairn::Items().tree("state", w));
  r = cli({"diff", dir / "a", dir / "c"});
  CHECK(has(r.out, "only in A: item 'rng'"));
  CHECK(has(r.out, "only in A: item 'loader'"));
  r = cli({"diff", dir / "a", dir / "a"});
  CHECK(r.status == 0);

  r = cli({"show", dir / "a", "", "--item", "loader"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "\"offset\":1234"));
  CHECK(cli({"show", dir / "a", "", "--item", "nothing"}).status == 2);

  // A checkpoint copy keeps every item, and loads as the original does.
  r = cli({"convert", dir / "a", dir / "copy"});
  CHECK(r.status == 0);
  std::vector<float> w_back;
  std::mt19937 rng_back;
  cairn::Json loader_back;
  cairn::load(dir / "copy", cairn::Items().tree("state", w_back).tree("rng", rng_back).json("loader", loader_back));
  CHECK(w_back == w);
  CHECK(rng_back == std::mt19937(42));
  CHECK(loader_back.at("offset").as_int() == 1234);
  // safetensors holds one item: several are refused unless one is named.
  r = cli({"convert", dir / "a", dir / "a.safetensors"});
  CHECK(r.status == 2);
  CHECK(has(r.err, "choose it"));
  CHECK(!std::filesystem::exists(dir / "a.safetensors"));
  CHECK(cli({"convert", dir / "a", dir / "a.safetensors", "--item", "state"}).status == 0);
  const auto report = cairn::convert(dir / "a", dir / "rng-only", {.item = "rng"});
  CHECK(report.items == std::vector<std::string>{"rng"});
}

TEST_CASE("progress: verify, show, diff and convert on stderr when asked (or on a terminal), never with --quiet") {
  test::TempDir dir;
  const std::string c = dir / "c";
  cairn::save(c, make_state());
  const std::uint64_t total = cairn::metadata(c).total_bytes();
  // Not a terminal and not asked: nothing on stderr.
  Run r = cli({"verify", c});
  CHECK(r.status == 0);
  CHECK(r.err.empty());
  // Asked: a line that ends at every byte, on stderr only (stdout stays the report scripts read).
  r = cli({"verify", c, "--progress"});
  CHECK(r.status == 0);
  CHECK(has(r.err, "verifying " + c + ": "));
  CHECK(has(r.err, cairn::cli::human_bytes(total) + " of " + cairn::cli::human_bytes(total) + " (100%)"));
  CHECK_FALSE(has(r.out, "verifying"));
  // On a terminal by default, and --quiet wins over both.
  std::ostringstream out, err;
  CHECK(cairn::cli::run({"verify", c}, out, err, true) == 0);
  CHECK(has(err.str(), "(100%)"));
  CHECK(cli({"verify", c, "--progress", "--quiet"}).err.empty());
  std::ostringstream out2, err2;
  CHECK(cairn::cli::run({"verify", c, "--quiet"}, out2, err2, true) == 0);
  CHECK(err2.str().empty());
  // show, diff and convert.
  r = cli({"show", c, "big", "--progress"});
  CHECK(r.status == 0);
  CHECK(has(r.err, "reading big: "));
  CHECK(has(r.err, "(100%)"));
  r = cli({"diff", c, c, "--progress"});
  CHECK(r.status == 0);
  CHECK(has(r.err, "comparing: "));
  CHECK(has(r.err, "(100%)"));
  r = cli({"convert", c, dir / "copy", "--progress"});
  CHECK(r.status == 0);
  CHECK(has(r.err, "reading " + c + ": "));
  CHECK(has(r.err, "(100%)"));
  // ls takes neither flag: it has no long work.
  CHECK(cli({"ls", c, "--quiet"}).status == 2);
}

TEST_CASE("the library's progress callbacks: a load's reads, verify and convert, counted up to the end") {
  test::TempDir dir;
  const std::string c = dir / "c";
  const State s = make_state();
  cairn::save(c, s);
  const std::uint64_t total = cairn::metadata(c).total_bytes();
  auto checker = [](std::vector<std::pair<std::uint64_t, std::uint64_t>>& calls) {
    return [&calls](std::uint64_t done, std::uint64_t all) { calls.emplace_back(done, all); };
  };
  auto monotone = [](const std::vector<std::pair<std::uint64_t, std::uint64_t>>& calls) {
    for (std::size_t i = 1; i < calls.size(); ++i)
      if (calls[i].first < calls[i - 1].first) return false;
    return true;
  };
  std::vector<std::pair<std::uint64_t, std::uint64_t>> calls;
  cairn::LoadOptions o;
  o.progress = checker(calls);
  State back;
  const cairn::LoadReport r = cairn::load(c, back, o);
  REQUIRE_FALSE(calls.empty());
  CHECK(monotone(calls));
  CHECK(calls.back().first == r.bytes_read);
  CHECK(calls.back().second == calls.back().first);
  CHECK(back.big == s.big);
  calls.clear();
  const cairn::VerifyReport v = cairn::verify(c, {.progress = checker(calls)});
  CHECK(v.ok());
  REQUIRE_FALSE(calls.empty());
  CHECK(monotone(calls));
  CHECK(calls.back() == std::make_pair(total, total));
  calls.clear();
  cairn::ConvertOptions co;
  co.progress = checker(calls);
  cairn::convert(c, dir / "copy", co);
  REQUIRE_FALSE(calls.empty());
  CHECK(monotone(calls));
  CHECK(calls.back() == std::make_pair(total, total));
  // Without a callback nothing is counted (and a default Progress is empty).
  CHECK_FALSE(cairn::Progress{});
}

// safetensors' save_model keeps one name of tied tensors and records the other in
// __metadata__; --aliases reads it as a leaf of its own (SafetensorsOptions::aliases, which
// convert's ConvertOptions::safetensors and read_arrays' ReadArraysOptions::safetensors now
// take too), and --separator splits names at another string. The tool had neither, so a
// conversion of such a file left the tied name out.
TEST_CASE("ls, show, diff and convert read a safetensors file's tied names with --aliases and split names with --separator") {
  test::TempDir dir;
  const std::string f = dir / "tied.safetensors";
  const std::string header = R"({"__metadata__":{"lm_head.weight":"embed.weight","format":"pt"},)"
                             R"("embed.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string file(8, '\0');
  file[0] = static_cast<char>(header.size());
  const float w[2] = {1.5f, -2.25f};
  test::write_file(f, file + header + std::string(reinterpret_cast<const char*>(w), 8));
  Run r = cli({"ls", f});
  CHECK(r.status == 0);
  CHECK_FALSE(has(r.out, "lm_head/weight  float32"));  // (its name is in the user metadata shown)
  r = cli({"ls", f, "--aliases"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "lm_head/weight  float32[2]"));
  r = cli({"show", f, "lm_head.weight", "--aliases"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "[1.5, -2.25]"));
  r = cli({"show", f, "lm_head.weight"});
  CHECK(r.status == 2);
  // convert: the tied name is written with the kept tensor's values.
  const std::string out = dir / "both.safetensors";
  r = cli({"convert", f, out, "--aliases"});
  CHECK(r.status == 0);
  CHECK(has(r.out, "2 tensors"));
  using Flat = std::map<std::string, std::vector<float>>;
  const Flat both = cairn::load_safetensors<Flat>(out, {}, {.separator = ""});
  CHECK(both == Flat{{"embed.weight", {1.5f, -2.25f}}, {"lm_head.weight", {1.5f, -2.25f}}});
  cairn::ConvertOptions o;
  o.safetensors.aliases = true;
  cairn::convert(f, dir / "api", o);
  CHECK(cairn::load<Flat>(dir / "api", {.subtree = "lm_head"}) == Flat{{"weight", {1.5f, -2.25f}}});
  // --separator: '' keeps each name whole (one key of a flat map).
  r = cli({"ls", f, "--separator="});
  CHECK(r.status == 0);
  CHECK(has(r.out, "embed.weight  float32[2]"));
  r = cli({"diff", f, out, "--aliases"});
  CHECK(r.status == 0);
  r = cli({"diff", f, out});
  CHECK(r.status == 1);
  CHECK(has(r.out, "only in B: lm_head/weight"));
  r = cli({"verify", f, "--aliases"});
  CHECK(r.status == 2);
  CHECK(has(r.err, "does not take --aliases"));
  // Names that split into a leaf and its parent ("a", "a.b"): the error names the tool's flag,
  // and with it the file lists.
  const std::string parent = dir / "parent.safetensors";
  cairn::save_safetensors(parent, Flat{{"a", {1}}, {"a.b", {2}}}, {.separator = ""});
  r = cli({"ls", parent});
  CHECK(r.status == 2);
  CHECK_MESSAGE(has(r.err, "tensor 'a' is also the parent of 'a.b'"), r.err);
  CHECK_MESSAGE(has(r.err, "--separator ''"), r.err);
  r = cli({"ls", parent, "--separator", ""});
  CHECK(r.status == 0);
  CHECK(has(r.out, "a.b  float32[1]"));
}
