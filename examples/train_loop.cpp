// SPDX-License-Identifier: Apache-2.0
// A small real training run that survives being killed: logistic regression with an Adam
// optimizer, a shuffling RNG and a data-iterator position, checkpointed asynchronously every
// few steps with retention. Kill it at any moment (or pass --crash-at STEP), start it again,
// and it resumes from the latest checkpoint; the final parameters are bit-identical to an
// uninterrupted run.
#include <cairn/cairn.hpp>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>

struct Adam { Eigen::VectorXd m, v; int64_t t = 0; };
CAIRN_TREE(Adam, m, v, t)
struct TrainState { Eigen::VectorXd w; double b = 0; Adam adam; int64_t step = 0; };
CAIRN_TREE(TrainState, w, b, adam, step)

// Where the data iterator stands: a cereal-serializable object, not a tree.
struct DataPosition {
  int64_t epoch = 0, offset = 0;
  std::vector<int32_t> order;  // this epoch's permutation
  template <class A> void serialize(A& ar) { ar(epoch, offset, order); }
};

namespace {
constexpr int kFeatures = 32, kSamples = 4096, kBatch = 64;

struct Dataset {
  Eigen::MatrixXd x;
  Eigen::VectorXd y;
  Dataset() : x(kSamples, kFeatures), y(kSamples) {
    std::mt19937_64 g(2024);  // fixed: the data is the same in every run
    std::normal_distribution<double> n(0, 1);
    Eigen::VectorXd true_w(kFeatures);
    for (auto& v : true_w) v = n(g);
    for (int i = 0; i < kSamples; ++i) {
      for (int j = 0; j < kFeatures; ++j) x(i, j) = n(g);
      y(i) = (x.row(i).dot(true_w) + 0.5 * n(g)) > 0 ? 1.0 : 0.0;
    }
  }
};

void next_epoch(DataPosition& pos, std::mt19937_64& g) {
  pos.order.resize(kSamples);
  std::iota(pos.order.begin(), pos.order.end(), 0);
  std::shuffle(pos.order.begin(), pos.order.end(), g);
  pos.offset = 0;
  ++pos.epoch;
}

std::uint64_t fnv1a(const void* p, std::size_t n, std::uint64_t h = 1469598103934665603ull) {
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}
}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a killed run still shows what it printed
  std::string dir = "/tmp/cairn-train", out;
  int64_t steps = 2000, every = 100, crash_at = -1;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--dir") dir = next();
    else if (a == "--steps") steps = std::stoll(next());
    else if (a == "--every") every = std::stoll(next());
    else if (a == "--crash-at") crash_at = std::stoll(next());
    else if (a == "--out") out = next();
    else if (a == "--quiet") quiet = true;
    else { std::fprintf(stderr, "usage: train_loop [--dir D] [--steps N] [--every K] [--crash-at STEP] [--out FILE] [--quiet]\n"); return 2; }
  }

  const Dataset data;
  cairn::CheckpointerOptions options;
  options.save_policy = cairn::SavePolicy::any_of({cairn::SavePolicy::every_n_steps(every), cairn::SavePolicy::on_preemption()});
  options.retention = cairn::RetentionPolicy::keep_latest(3);
  cairn::Checkpointer ckptr(dir, options);
  cairn::handle_preemption_signals({SIGTERM});

  TrainState state;
  state.w = Eigen::VectorXd::Zero(kFeatures);
  state.adam = {Eigen::VectorXd::Zero(kFeatures + 1), Eigen::VectorXd::Zero(kFeatures + 1), 0};
  std::mt19937_64 rng(7);
  DataPosition pos;
  cairn::Json progress = cairn::Json::object({{"loss", 0.0}});

  if (auto latest = ckptr.latest()) {
    // The shuffling RNG is a leaf of its own item: a restored engine continues its sequence.
    ckptr.load(*latest, cairn::Items().tree("state", state).tree("rng", rng).object("data", pos).json("progress", progress));
    std::printf("train_loop: resuming from step %lld (loss %.6f)\n", static_cast<long long>(*latest),
                progress.at("loss").as_double());
  } else {
    next_epoch(pos, rng);
    std::printf("train_loop: starting from scratch in %s\n", dir.c_str());
  }

  const double lr = 0.05, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  while (state.step < steps) {
    if (pos.offset + kBatch > kSamples) next_epoch(pos, rng);
    // Gradient of the logistic loss on this batch.
    Eigen::VectorXd grad = Eigen::VectorXd::Zero(kFeatures + 1);
    double loss = 0;
    for (int k = 0; k < kBatch; ++k) {
      const int i = pos.order[static_cast<std::size_t>(pos.offset + k)];
      const double z = data.x.row(i).dot(state.w) + state.b;
      const double p = 1.0 / (1.0 + std::exp(-z));
      loss += -(data.y(i) * std::log(p + 1e-12) + (1 - data.y(i)) * std::log(1 - p + 1e-12));
      grad.head(kFeatures) += (p - data.y(i)) * data.x.row(i).transpose();
      grad(kFeatures) += p - data.y(i);
    }
    grad /= kBatch;
    loss /= kBatch;
    pos.offset += kBatch;
    // Adam.
    Adam& a = state.adam;
    ++a.t;
    a.m = beta1 * a.m + (1 - beta1) * grad;
    a.v = beta2 * a.v + (1 - beta2) * grad.cwiseProduct(grad);
    const double c1 = 1 - std::pow(beta1, static_cast<double>(a.t)), c2 = 1 - std::pow(beta2, static_cast<double>(a.t));
    Eigen::VectorXd update = lr * (a.m / c1).array() / ((a.v / c2).array().sqrt() + eps);
    state.w -= update.head(kFeatures);
    state.b -= update(kFeatures);
    ++state.step;

    if (ckptr.should_save(state.step)) {
      progress["loss"] = loss;
      cairn::StepSaveOptions args;
      args.metrics = cairn::Json::object({{"loss", loss}});
      // Returns once the state is copied; the next steps run while it is written.
      ckptr.save_async(state.step,
                       cairn::Items().tree("state", state).tree("rng", rng).object("data", pos).json("progress", progress),
                       args);
      // Every save is listed, so the steps kept at the end match what was printed. The one
      // printed last may still be in flight (a kill can lose it; the one before is committed).
      if (!quiet)
        std::printf("  step %5lld  loss %.6f  saving checkpoint %lld in the background\n",
                    static_cast<long long>(state.step), loss, static_cast<long long>(state.step));
    }
    if (state.step == crash_at) {
      std::printf("train_loop: simulating a crash (SIGKILL) at step %lld\n", static_cast<long long>(crash_at));
      std::fflush(stdout);
      std::raise(SIGKILL);
    }
    if (cairn::preemption_requested()) {
      ckptr.wait();
      std::printf("train_loop: preempted at step %lld; checkpoint saved\n", static_cast<long long>(state.step));
      return 0;
    }
  }
  ckptr.wait();
  const std::uint64_t h = fnv1a(&state.b, sizeof state.b, fnv1a(state.w.data(), sizeof(double) * kFeatures));
  std::printf("train_loop: done at step %lld, parameters fnv1a %016llx, checkpoints kept (the latest 3):",
              static_cast<long long>(state.step),
              static_cast<unsigned long long>(h));
  for (auto s : ckptr.steps()) std::printf(" %lld", static_cast<long long>(s));
  std::printf("\n");
  if (!out.empty()) {
    FILE* f = std::fopen(out.c_str(), "w");
    if (!f) return 1;
    std::fprintf(f, "%016llx\n", static_cast<unsigned long long>(h));
    std::fclose(f);
  }
  return 0;
}
