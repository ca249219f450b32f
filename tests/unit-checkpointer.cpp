// SPDX-License-Identifier: Apache-2.0
#include "test_util.hpp"

#include <thread>

namespace ck {
struct State { std::vector<float> w; Eigen::MatrixXd m; std::int64_t step = 0; };
CAIRN_TREE(State, w, m, step)

State make(float v) { return {std::vector<float>(1000, v), Eigen::MatrixXd::Constant(10, 10, v), 0}; }

// A cereal-serializable object that is not a tree: an RNG and a data iterator position.
struct Progress {
  std::string rng;
  std::int64_t epoch = 0, offset = 0;
  template <class A> void serialize(A& ar) { ar(rng, epoch, offset); }
};

std::vector<std::string> dir_names(const std::string& root) {
  std::vector<std::string> out;
  for (auto& e : std::filesystem::directory_iterator(root)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace ck

TEST_CASE("step directories follow the configured naming scheme; another scheme is reported") {
  test::TempDir dir;
  struct Scheme { std::string prefix; int digits; std::string name; };
  for (const auto& s : std::vector<Scheme>{{"", 0, "23"}, {"", 4, "0023"}, {"step_", 0, "step_23"}, {"step_", 4, "step_0023"}}) {
    const std::string root = dir / ("root" + s.name);
    cairn::CheckpointerOptions o;
    o.step_prefix = s.prefix;
    o.step_digits = s.digits;
    {
      cairn::Checkpointer c(root, o);
      CHECK(c.save(23, ck::make(1)));
      CHECK(std::filesystem::exists(root + "/" + s.name + "/_CHECKPOINT"));
      CHECK(test::read_file(root + "/latest") == s.name + "\n");
    }
    cairn::Checkpointer again(root, o);
    CHECK(again.latest() == 23);
    cairn::CheckpointerOptions other;
    other.step_prefix = s.prefix == "" ? "step_" : "";
    CHECK_CAIRN_ERROR(cairn::Checkpointer(root, other), cairn::ErrorKind::invalid_argument, s.name);
  }
}

TEST_CASE("every step a scheme writes is read back after a restart: 19-digit steps and padding of any width") {
  // A nanosecond timestamp as the step is about 1.8e18: 19 digits. Names of up to 18 digits
  // were the only ones read back, so such steps were saved, named by `latest`, and then not
  // seen by a reopened Checkpointer (nor by its retention); so were all steps under a padding
  // wider than 18.
  test::TempDir dir;
  const std::vector<std::int64_t> steps = {0, 7, 999999999999999999, 1000000000000000000, 1764057600123456789,
                                           INT64_MAX - 1, INT64_MAX};
  int n = 0;
  for (const auto& [prefix, digits] : std::vector<std::pair<std::string, int>>{{"", 0}, {"step_", 4}, {"", 19}, {"", 25}}) {
    const std::string root = dir / ("root" + std::to_string(n++));
    cairn::CheckpointerOptions o;
    o.step_prefix = prefix;
    o.step_digits = digits;
    {
      cairn::Checkpointer c(root, o);
      for (std::int64_t step : steps) CHECK(c.save(step, ck::make(static_cast<int>(step % 97)), {.force = true}));
    }
    cairn::Checkpointer again(root, o);
    CHECK(again.steps() == steps);
    CHECK(again.latest() == INT64_MAX);
    CHECK(again.damaged_steps().empty());
    ck::State back;
    again.load(1764057600123456789, back);
    CHECK(back.w == ck::make(static_cast<int>(1764057600123456789 % 97)).w);
  }
  // Directory names beyond int64 are no step of any scheme (and no overflow reading them).
  const std::string root = dir / "beyond";
  {
    cairn::Checkpointer c(root);
    c.save(5, ck::make(1));
  }
  for (const char* name : {"9223372036854775808", "000000000000000000000000000000009223372036854775808",
                           "99999999999999999999999"})
    std::filesystem::copy(root + "/5", root + "/" + name, std::filesystem::copy_options::recursive);
  cairn::Checkpointer again(root);
  CHECK(again.steps() == std::vector<std::int64_t>{5});
  CHECK(cairn::metadata(root + "/9223372036854775808").items.size() == 1);  // a checkpoint, only not a step
}

TEST_CASE("save policies: every n steps, specific steps, intervals, preemption, initial, any-of, custom") {
  using P = cairn::SavePolicy;
  cairn::SaveContext c;
  c.step = 10;
  CHECK(P::every_n_steps(5).should_save(c));
  c.step = 11;
  CHECK_FALSE(P::every_n_steps(5).should_save(c));
  CHECK(P::at_steps({3, 11}).should_save(c));
  CHECK(P::initial_save().should_save(c));
  c.latest_step = 10;
  CHECK_FALSE(P::initial_save().should_save(c));
  c.seconds_since_last_save = 5;
  CHECK_FALSE(P::every_n_seconds(10).should_save(c));
  c.seconds_since_last_save = 12;
  CHECK(P::every_n_seconds(10).should_save(c));
  CHECK_FALSE(P::on_preemption().should_save(c));
  c.preemption = true;
  CHECK(P::on_preemption().should_save(c));
  CHECK(P::any_of({P::every_n_steps(1000), P::on_preemption()}).should_save(c));
  CHECK_FALSE(P::all_of({P::every_n_steps(1000), P::on_preemption()}).should_save(c));
  CHECK(P::custom([](const cairn::SaveContext& x) { return x.step == 11; }).should_save(c));

  test::TempDir dir;
  cairn::CheckpointerOptions o;
  o.save_policy = P::any_of({P::every_n_steps(10), P::on_preemption()});
  cairn::Checkpointer ck(dir / "root", o);
  int saved = 0;
  for (std::int64_t step = 1; step <= 25; ++step) saved += ck.save(step, ck::make(static_cast<float>(step))).has_value();
  CHECK(saved == 2);
  CHECK(ck.steps() == std::vector<std::int64_t>{10, 20});
  CHECK(ck.save(21, ck::make(0), {.force = true}));
  cairn::handle_preemption_signals({SIGUSR1});
  std::raise(SIGUSR1);  // what a scheduler's SIGTERM does
  CHECK(cairn::preemption_requested());
  CHECK(ck.should_save(22));
  CHECK(ck.save(22, ck::make(22)));
  cairn::clear_preemption();
  CHECK_FALSE(ck.should_save(23));
}

TEST_CASE("a step is saved once unless overwrite; older steps only when asked") {
  test::TempDir dir;
  cairn::Checkpointer ck(dir / "root");
  ck.save(5, ck::make(5));
  CHECK_CAIRN_ERROR(ck.save(5, ck::make(6), {.force = true}), cairn::ErrorKind::already_exists, "overwrite");
  CHECK(ck.save(5, ck::make(6), {.force = true, .save = {.overwrite = true}}));
  ck::State s;
  ck.load(5, s);
  CHECK(s.w[0] == 6.0f);
  CHECK_CAIRN_ERROR(ck.save(3, ck::make(3), {.force = true}), cairn::ErrorKind::invalid_argument, "allow_older");
  CHECK(ck.save(3, ck::make(3), {.force = true, .allow_older = true}));
  CHECK(ck.steps() == std::vector<std::int64_t>{3, 5});
  CHECK(ck.latest() == 5);
  CHECK(test::read_file(dir / "root/latest") == "5\n");
}

TEST_CASE("retention policies pick the steps to keep") {
  using R = cairn::RetentionPolicy;
  std::vector<cairn::StepInfo> s;
  for (std::int64_t step = 1; step <= 10; ++step) {
    cairn::StepInfo i{step * 100, step * 1000 * 60, cairn::Json::object()};
    if (step != 4) i.metrics["loss"] = 1.0 / static_cast<double>(step % 5 + 1);
    s.push_back(i);
  }
  CHECK(R::keep_latest(3).keep(s) == std::set<std::int64_t>{800, 900, 1000});
  CHECK(R::keep_every_n_steps(300).keep(s) == std::set<std::int64_t>{300, 600, 900});
  CHECK(R::keep_every_n_seconds(180).keep(s) == std::set<std::int64_t>{100, 400, 700, 1000});
  // loss 0.2 at step 9, then 0.25 at steps 3 and 8 (a tie goes to the newer step); step 4 would
  // have been best but has no metric.
  CHECK(R::best_n(2, "loss", R::Mode::min).keep(s) == std::set<std::int64_t>{800, 900});
  CHECK(R::best_n(2, "loss", R::Mode::min).keep(s).count(400) == 0);  // no metric: never among the best
  CHECK(R::best_n(1, "loss", R::Mode::max).keep(s) == std::set<std::int64_t>{1000});
  // NaN and infinity rank as a missing metric, in either mode (they are stored as null).
  auto odd = s;
  odd[3].metrics["loss"] = -std::numeric_limits<double>::infinity();
  odd[5].metrics["loss"] = std::numeric_limits<double>::infinity();
  odd[1].metrics["loss"] = std::nan("");
  CHECK(R::best_n(2, "loss", R::Mode::min).keep(odd) == std::set<std::int64_t>{800, 900});
  CHECK(R::best_n(1, "loss", R::Mode::max).keep(odd) == std::set<std::int64_t>{1000});
  // A metric no step has (a mistyped name): nothing is ranked, and nothing is let go for it.
  CHECK(R::best_n(2, "val_loss", R::Mode::min).keep(s).size() == 10);
  auto unranked = s;
  for (auto& i : unranked) i.metrics["loss"] = nullptr;  // every loss NaN
  CHECK(R::best_n(2, "loss", R::Mode::min).keep(unranked).size() == 10);
  CHECK(R::best_n(2, "loss", R::Mode::min).keep({}).empty());
  CHECK(R::any_of({R::keep_latest(1), R::keep_every_n_steps(500)}).keep(s) == std::set<std::int64_t>{500, 1000});
  CHECK(R::keep_all().keep(s).size() == 10);
}

TEST_CASE("metrics of NaN or infinity are saved as null and never rank; metrics that are not an object are refused") {
  test::TempDir dir;
  cairn::CheckpointerOptions o;
  o.retention = cairn::RetentionPolicy::best_n(1, "loss", cairn::RetentionPolicy::Mode::min);
  const double inf = std::numeric_limits<double>::infinity();
  {
    cairn::Checkpointer ck(dir / "root", o);
    ck.save(1, ck::make(1), {.metrics = cairn::Json::object({{"loss", 0.5}})});
    // A diverged loss, or an fp16 gradient norm that overflowed, does not cost the checkpoint.
    ck.save(2, ck::make(2), {.metrics = cairn::Json::object({{"loss", -inf}, {"grad_norm", inf}})});
    ck.save_async(3, ck::make(3), {.metrics = cairn::Json::object({{"loss", std::nan("")}})});
    ck.wait();
    // The best is step 1 (the only finite loss); the latest always stays.
    CHECK(ck.steps() == std::vector<std::int64_t>{1, 3});
    CHECK(ck.metrics(3).at("loss").is_null());
    CHECK(test::read_file(dir / "root/3/_USER_METADATA").find("\"metrics\":{\"loss\":null}") != std::string::npos);

    CHECK_CAIRN_ERROR(ck.save(4, ck::make(4), {.metrics = cairn::Json(0.25)}), cairn::ErrorKind::invalid_argument,
                      "step 4: metrics must be a JSON object");
    CHECK_FALSE(std::filesystem::exists(dir / "root/4"));
    // Metrics the step's _USER_METADATA would nest deeper than a load reads: refused too (the
    // step was saved, and could not be loaded).
    cairn::Json deep = cairn::Json::object({{"x", 1}});
    for (int i = 0; i < 127; ++i) deep = cairn::Json::object({{"n", deep}});  // 128 deep; 129 in the step's
    CHECK_CAIRN_ERROR(ck.save(4, ck::make(4), {.metrics = deep}), cairn::ErrorKind::invalid_argument, "more than 128 deep");
    CHECK_FALSE(std::filesystem::exists(dir / "root/4"));
    ck.save(5, ck::make(5), {.metrics = {}});  // null: no metrics
    CHECK(ck.metrics(5).size() == 0);
  }
  cairn::Checkpointer again(dir / "root", o);
  CHECK(again.steps() == std::vector<std::int64_t>{1, 5});
  CHECK(again.metrics(1).at("loss").as_double() == 0.5);
  CHECK(again.metrics(5).size() == 0);
}

TEST_CASE("best_n by a metric no step has deletes nothing; once one step has it, it ranks") {
  test::TempDir dir;
  cairn::CheckpointerOptions o;
  o.retention = cairn::RetentionPolicy::best_n(2, "val_loss", cairn::RetentionPolicy::Mode::min);
  cairn::Checkpointer ck(dir / "root", o);
  // The loop records "loss"; the policy asks for "val_loss" (a typo, or evaluations not run yet).
  for (int s = 1; s <= 5; ++s) ck.save(s, ck::make(static_cast<float>(s)), {.metrics = cairn::Json::object({{"loss", 1.0 / s}})});
  CHECK(ck.steps() == std::vector<std::int64_t>{1, 2, 3, 4, 5});
  // The first evaluation: now steps can be ranked, and those without the metric go (the
  // latest stays, as always).
  ck.save(6, ck::make(6), {.metrics = cairn::Json::object({{"val_loss", 0.5}})});
  CHECK(ck.steps() == std::vector<std::int64_t>{6});
  ck.save(7, ck::make(7), {.metrics = cairn::Json::object({{"loss", 0.1}})});
  CHECK(ck.steps() == std::vector<std::int64_t>{6, 7});
  ck.save(8, ck::make(8), {.metrics = cairn::Json::object({{"val_loss", 0.25}})});
  ck.save(9, ck::make(9), {.metrics = cairn::Json::object({{"val_loss", 0.75}})});
  CHECK(ck.steps() == std::vector<std::int64_t>{6, 8, 9});
  for (std::int64_t step : ck.steps()) {
    ck::State back = ck::make(0);
    ck.load(step, back);
    CHECK(back.w[0] == static_cast<float>(step));
  }
}

TEST_CASE("retention deletes only after a commit and never the latest") {
  test::TempDir dir;
  cairn::CheckpointerOptions o;
  o.retention = cairn::RetentionPolicy::any_of({cairn::RetentionPolicy::keep_latest(2),
                                                cairn::RetentionPolicy::best_n(1, "acc", cairn::RetentionPolicy::Mode::max)});
  cairn::Checkpointer ck(dir / "root", o);
  const double acc[] = {0.5, 0.9, 0.6, 0.7, 0.65};
  for (int i = 0; i < 5; ++i) {
    cairn::StepSaveOptions a;
    a.metrics = cairn::Json::object({{"acc", acc[i]}});
    ck.save(i + 1, ck::make(static_cast<float>(i)), a);
  }
  CHECK(ck.steps() == std::vector<std::int64_t>{2, 4, 5});
  CHECK(ck::dir_names(dir / "root") == std::vector<std::string>{"2", "4", "5", "latest"});
  CHECK(ck.metrics(2).at("acc").as_double() == 0.9);
  cairn::CheckpointerOptions nothing;
  nothing.retention = cairn::RetentionPolicy::custom([](const std::vector<cairn::StepInfo>&) { return std::set<std::int64_t>{}; });
  cairn::Checkpointer ck2(dir / "root", nothing);
  ck2.save(6, ck::make(6));
  CHECK(ck2.steps() == std::vector<std::int64_t>{6});  // the latest survives a policy that keeps nothing
}

TEST_CASE("one checkpoint holds a tree, a JSON object and a cereal object; load all or a subset") {
  test::TempDir dir;
  cairn::Checkpointer ck(dir / "root");
  ck::State state = ck::make(2);
  cairn::Json progress = cairn::Json::object({{"epoch", 4}, {"loss", 0.5}, {"lr", 1e-3}});
  std::mt19937_64 rng(7);
  rng.discard(100);
  std::ostringstream rs;
  rs << rng;
  ck::Progress data{rs.str(), 4, 1234};
  cairn::Items items;
  items.tree("state", state).json("progress", progress).object("data", data);
  ck.save(1, items);
  auto meta = ck.metadata(1);
  REQUIRE(meta.items.size() == 3);
  CHECK(meta.items[1].kind == cairn::ItemKind::json);
  CHECK(meta.items[2].kind == cairn::ItemKind::cereal);

  ck::State s2;
  cairn::Json p2;
  ck::Progress d2;
  auto reports = ck.load(1, cairn::Items().tree("state", s2).json("progress", p2).object("data", d2));
  CHECK(reports.size() == 3);
  CHECK(s2.w == state.w);
  CHECK(p2 == progress);
  CHECK(d2.offset == 1234);
  std::mt19937_64 rng2;
  std::istringstream(d2.rng) >> rng2;
  CHECK(rng2() == rng());
  ck::Progress only;
  ck.load(cairn::Items().object("data", only));  // a subset, from the latest step
  CHECK(only.epoch == 4);
  CHECK_CAIRN_ERROR(ck.load(1, cairn::Items().object("missing", only)), cairn::ErrorKind::not_found, "missing");
  const ck::State& frozen = state;
  CHECK_CAIRN_ERROR(ck.load(1, cairn::Items().tree("state", frozen)), cairn::ErrorKind::invalid_argument, "const");
}

TEST_CASE("save_async is a snapshot: the state may change right after the call") {
  test::TempDir dir;
  for (std::uint64_t budget : {std::uint64_t{1} << 30, std::uint64_t{8000}, std::uint64_t{0}}) {
    CAPTURE(budget);
    cairn::CheckpointerOptions o;
    o.async_memory_budget = budget;
    const std::string root = dir / ("b" + std::to_string(budget));
    cairn::Checkpointer ck(root, o);
    ck::State state = ck::make(1);
    state.w.resize(200000, 1.0f);
    for (std::int64_t step = 1; step <= 5; ++step) {
      state.step = step;
      std::fill(state.w.begin(), state.w.end(), static_cast<float>(step));
      state.m.setConstant(static_cast<double>(step));
      CHECK(ck.save_async(step, state));
      // Mutate at once, as an optimizer step would.
      std::fill(state.w.begin(), state.w.end(), -1.0f);
      state.m.setConstant(-1.0);
      state.step = -1;
    }
    ck.wait();
    for (std::int64_t step = 1; step <= 5; ++step) {
      ck::State back;
      ck.load(step, back);
      CHECK(back.step == step);
      CHECK(std::all_of(back.w.begin(), back.w.end(), [&](float x) { return x == static_cast<float>(step); }));
      CHECK((back.m.array() == static_cast<double>(step)).all());
    }
  }
}

TEST_CASE("async errors surface from wait() or the next call, never lost") {
  test::TempDir dir;
  cairn::Checkpointer ck(dir / "root");
  std::vector<std::int64_t> ids = {1, 2, 1000};
  cairn::StepSaveOptions bad;
  bad.save.cast = {{"*", cairn::DType::int8, false}};
  CHECK(ck.save_async(1, ids, bad));  // the cast fails on the background thread
  CHECK_CAIRN_ERROR(ck.wait(), cairn::ErrorKind::value_out_of_range, "element 2");
  ck.wait();  // reported once
  CHECK(ck.save_async(2, ids, bad));
  CHECK_CAIRN_ERROR(ck.save(3, ids), cairn::ErrorKind::value_out_of_range, "int8");
  CHECK(ck.steps().empty());
  CHECK(ck::dir_names(dir / "root").empty());  // no temporary directories left behind
  CHECK(ck.save(4, ids));
  CHECK(ck.latest() == 4);
}

TEST_CASE("the destructor finishes the save in flight") {
  test::TempDir dir;
  {
    cairn::Checkpointer ck(dir / "root");
    ck.save_async(7, ck::make(7));
  }
  cairn::Checkpointer again(dir / "root");
  CHECK(again.latest() == 7);
}

TEST_CASE("leftovers of crashes are ignored and cleaned; incomplete steps are never deleted") {
  test::TempDir dir;
  const std::string root = dir / "root";
  {
    cairn::Checkpointer ck(root);
    ck.save(1, ck::make(1));
    ck.save(2, ck::make(2));
  }
  // A save killed before its commit, a deletion killed half-way, a step copied without its marker.
  std::filesystem::create_directories(root + "/3.cairn-tmp-999999-0");
  std::filesystem::copy(root + "/1", root + "/1.cairn-tmp-delete-999999", std::filesystem::copy_options::recursive);
  std::filesystem::copy(root + "/2", root + "/4", std::filesystem::copy_options::recursive);
  std::filesystem::remove(root + "/4/_CHECKPOINT");
  test::write_file(root + "/latest", "1\n");  // a marker older than the newest commit
  cairn::Checkpointer ck(root);
  CHECK(ck.steps() == std::vector<std::int64_t>{1, 2});
  CHECK(ck.latest() == 2);
  CHECK(test::read_file(root + "/latest") == "2\n");
  CHECK(ck::dir_names(root) == std::vector<std::string>{"1", "2", "4", "latest"});
  ck::State s;
  ck.load(s);
  CHECK(s.w[0] == 2.0f);
  CHECK_CAIRN_ERROR(ck.load(4, s), cairn::ErrorKind::not_found, "4");
}

TEST_CASE("a step whose _USER_METADATA fails its checksum is kept, reported and never ranked") {
  using R = cairn::RetentionPolicy;
  test::TempDir dir;
  const std::string root = dir / "root";
  cairn::CheckpointerOptions o;
  o.retention = R::best_n(1, "loss", R::Mode::min);
  auto save_with_loss = [&](cairn::Checkpointer& ck, std::int64_t step, double loss) {
    cairn::StepSaveOptions a;
    a.metrics = cairn::Json::object({{"loss", loss}});
    a.force = true;
    ck.save(step, ck::make(static_cast<float>(step)), a);
  };
  {
    cairn::Checkpointer ck(root, cairn::CheckpointerOptions{});  // keep all while writing
    save_with_loss(ck, 1, 0.5);
    save_with_loss(ck, 2, 0.125);  // the best
    save_with_loss(ck, 3, 0.75);
  }
  // One flipped digit in step 1's metadata would make it look best (0.5 -> 0.1).
  std::string user = test::read_file(root + "/1/_USER_METADATA");
  const auto at = user.find("0.5");
  REQUIRE(at != std::string::npos);
  user[at + 2] = '1';
  test::write_file(root + "/1/_USER_METADATA", user);
  {
    cairn::Checkpointer ck(root, o);
    const auto damaged = ck.damaged_steps();
    REQUIRE(damaged.size() == 1);
    CHECK(damaged.begin()->first == 1);
    CHECK(damaged.begin()->second.kind() == cairn::ErrorKind::corrupt);
    CHECK_CAIRN_ERROR(ck.metrics(1), cairn::ErrorKind::corrupt, "_USER_METADATA");
    save_with_loss(ck, 4, 0.9);
    // The intact best step survives; the damaged one is kept, not ranked.
    CHECK(ck.steps() == std::vector<std::int64_t>{1, 2, 4});
  }
  // Damage in the best step's own file: kept too, never silently deleted.
  user = test::read_file(root + "/2/_USER_METADATA");
  user[user.find("0.125") + 3] = '9';
  test::write_file(root + "/2/_USER_METADATA", user);
  {
    cairn::Checkpointer ck(root, o);
    save_with_loss(ck, 5, 0.3);
    CHECK(ck.steps() == std::vector<std::int64_t>{1, 2, 5});
    CHECK(ck.damaged_steps().size() == 2);
  }
}

TEST_CASE("stored times at the ends of int64 do not overflow the time-based policies") {
  test::TempDir dir;
  const std::string root = dir / "root";
  cairn::CheckpointerOptions o;
  o.save_policy = cairn::SavePolicy::every_n_seconds(60);
  o.retention = cairn::RetentionPolicy::any_of({cairn::RetentionPolicy::keep_every_n_seconds(60),
                                                cairn::RetentionPolicy::keep_latest(1)});
  {
    cairn::Checkpointer ck(root, o);
    ck.save(1, ck::make(1));
    ck.save(2, ck::make(2), {.force = true});
  }
  for (const char* step : {"1", "2"}) {
    const std::string p = root + "/" + step + "/_USER_METADATA";
    std::string user = test::read_file(p);
    const auto at = user.find("\"created_unix_ms\":");
    REQUIRE(at != std::string::npos);
    const auto end = user.find_first_of(",}", at);
    user.replace(at, end - at, std::string("\"created_unix_ms\":") + (step[0] == '1' ? "9223372036854775807" : "-9223372036854775808"));
    test::write_file(p, user);
    test::resign(root + "/" + step);
  }
  cairn::Checkpointer ck(root, o);  // UBSan in CI: no signed overflow in either policy
  CHECK(ck.damaged_steps().empty());
  CHECK(ck.should_save(3));  // the latest step looks very old
  ck.save(3, ck::make(3));
  CHECK(ck.latest() == 3);
}

TEST_CASE("a Checkpointer made only to read creates nothing; roots and steps are told apart") {
  test::TempDir dir;
  const std::string root = dir / "missing/root";
  {
    cairn::Checkpointer ck(root);
    CHECK(ck.steps().empty());
    ck::State target;
    CHECK_CAIRN_ERROR(ck.load(target), cairn::ErrorKind::not_found, "no checkpoint");
  }
  CHECK_FALSE(std::filesystem::exists(dir / "missing"));
  {
    cairn::Checkpointer ck(root);
    ck.save(7, ck::make(7));  // the first save creates the root
    ck.save(9, ck::make(9));
  }
  // Loading the root as if it were one checkpoint says what it is and what to load instead.
  CHECK_CAIRN_ERROR(cairn::load<ck::State>(root), cairn::ErrorKind::not_found, "Checkpointer root holding 7, 9");
  CHECK_CAIRN_ERROR(cairn::load<ck::State>(root), cairn::ErrorKind::not_found, root + "/9");
  // A directory of checkpoints whose names are not steps: no Checkpointer would find them, so
  // the error suggests only the checkpoints themselves.
  cairn::save(dir / "named/b", ck::make(1));
  cairn::save(dir / "named/a", ck::make(2));
  try {
    (void)cairn::load<ck::State>(dir / "named");
    FAIL("a directory of checkpoints loaded as one");
  } catch (const cairn::Error& e) {
    CHECK(e.kind() == cairn::ErrorKind::not_found);
    CHECK(e.message() == "this is a directory of checkpoints (a, b), not one checkpoint: load one of them, such as " +
                             dir / "named/b");
  }
  CHECK_CAIRN_ERROR(cairn::Checkpointer(root + "/9"), cairn::ErrorKind::invalid_argument, "one checkpoint, not a root");
  test::write_file(dir / "file", "x");
  CHECK_CAIRN_ERROR(cairn::Checkpointer(dir / "file"), cairn::ErrorKind::invalid_argument, "is a file");
  // A root written with another naming scheme: the error gives the option values to set.
  cairn::CheckpointerOptions padded;
  padded.step_prefix = "step_";
  padded.step_digits = 4;
  { cairn::Checkpointer(dir / "padded", padded).save(3, ck::make(3)); }
  CHECK_CAIRN_ERROR(cairn::Checkpointer(dir / "padded"), cairn::ErrorKind::invalid_argument,
                    "step_prefix = \"step_\" and step_digits = 4");
}
