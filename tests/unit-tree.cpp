// SPDX-License-Identifier: Apache-2.0
#include "test_util.hpp"

#include <deque>
#include <list>
#include <optional>
#include <unordered_map>

namespace model {
struct Dense { Eigen::MatrixXf kernel; Eigen::VectorXf bias; };
CAIRN_TREE(Dense, kernel, bias)
struct Net {
  std::map<std::string, Dense> params;
  std::vector<Dense> layers;
  std::optional<Dense> head;
  std::tuple<int, double> counters{1, 2.0};
  std::pair<std::string, std::array<float, 3>> tag{"t", {1, 2, 3}};
  std::unordered_map<int, float> scales;
  std::deque<double> history;
  std::int64_t step = 0;
};
CAIRN_TREE(Net, params, layers, head, counters, tag, scales, history, step)
}  // namespace model

// A user's own node type (a linked list) and leaf type (a tiny tensor), registered through the
// two extension points.
namespace user {
struct Tensor { std::vector<std::int64_t> dims; std::vector<double> values; };
struct Bag { std::list<float> items; };
}  // namespace user

template <>
struct cairn::leaf_traits<user::Tensor> {
  static LeafView view(const user::Tensor& t) {
    return {DType::float64, t.dims, Order::C, t.values.data(), t.values.size() * sizeof(double)};
  }
  static LeafBuffer prepare(user::Tensor& t, const StoredLeafInfo& s) {
    t.dims = s.shape;
    t.values.resize(static_cast<std::size_t>(element_count(s.shape)));
    return {DType::float64, Order::C, t.values.data(), t.values.size() * sizeof(double)};
  }
};
template <>
struct cairn::node_traits<user::Bag> {
  static constexpr NodeKind kind = NodeKind::custom;
  template <class Self, class F>
  static void for_each_child(Self& bag, F&& f) {
    std::int64_t i = 0;
    for (auto& x : bag.items) f(KeyEntry::index(i++), x);
  }
  static void prepare(user::Bag& bag, const StoredChildren& stored) {
    // The stored children, as entries (a load's index keeps 0..n-1 as a count until asked).
    for (std::size_t i = 0; i < stored.keys.size(); ++i)
      if (!(stored.keys[i] == KeyEntry::index(static_cast<std::int64_t>(i))))
        throw Error(ErrorKind::corrupt, "stored child " + std::to_string(i) + " is not index " + std::to_string(i));
    bag.items.resize(stored.keys.size());
  }
};

TEST_CASE("flatten gives leaves in declaration, index and sorted key order with typed key paths") {
  model::Net net;
  net.params["b"] = {Eigen::MatrixXf::Ones(2, 3), Eigen::VectorXf::Zero(3)};
  net.params["a"] = {Eigen::MatrixXf::Ones(1, 1), Eigen::VectorXf::Zero(1)};
  net.layers.resize(2);
  net.scales = {{10, 1.0f}, {-2, 2.0f}, {3, 3.0f}};
  net.history = {0.5, 0.25};
  auto keys = cairn::key_paths(net);
  std::vector<std::string> expected = {
      "params/a/kernel", "params/a/bias", "params/b/kernel", "params/b/bias", "layers/0/kernel", "layers/0/bias",
      "layers/1/kernel", "layers/1/bias", "counters/0", "counters/1", "tag/0", "tag/1", "scales/-2", "scales/3",
      "scales/10", "history/0", "history/1", "step"};
  CHECK(keys == expected);
  CHECK(cairn::leaf_count(net) == expected.size());
  auto flat = cairn::flatten(net);
  CHECK(flat[2].view.shape == cairn::Shape{2, 3});
  CHECK(flat[2].view.order == cairn::Order::F);
  CHECK(flat[2].path.kinds() == "fkf");
  CHECK(flat[12].path.kinds() == "fn");
  net.head.emplace();
  CHECK(cairn::leaf_count(net) == expected.size() + 2);
  CHECK(cairn::key_paths(net)[8] == "head/0/kernel");
}

TEST_CASE("leaf_count, which walks without key paths, counts what flatten lists on random trees of every node kind") {
  // Random sizes for every container the walk meets (empty ones included), a user's node type,
  // a struct nested in containers nested in structs, and a deque of scalar leaves.
  std::mt19937_64& g = test::rng();
  auto n = [&](int max) { return static_cast<std::size_t>(std::uniform_int_distribution<int>(0, max)(g)); };
  for (int round = 0; round < 50; ++round) {
    model::Net net;
    for (std::size_t i = 0, k = n(4); i < k; ++i) net.params["p" + std::to_string(i)];
    net.layers.resize(n(5));
    if (n(1)) net.head.emplace();
    for (std::size_t i = 0, k = n(6); i < k; ++i) net.scales[static_cast<int>(i) - 3] = 1.0f;
    net.history.resize(n(7));
    std::vector<std::map<std::string, std::optional<model::Net>>> nested(n(3));
    for (auto& m : nested)
      for (std::size_t i = 0, k = n(3); i < k; ++i)
        if (n(1)) m["n" + std::to_string(i)] = net;
        else m["n" + std::to_string(i)];
    user::Bag bag;
    bag.items.resize(n(5));
    std::tuple<model::Net, user::Bag, std::array<model::Dense, 2>, std::vector<std::vector<float>>> tree{
        net, bag, {}, std::vector<std::vector<float>>(n(4))};
    CHECK(cairn::leaf_count(net) == cairn::flatten(net).size());
    CHECK(cairn::leaf_count(nested) == cairn::flatten(nested).size());
    CHECK(cairn::leaf_count(tree) == cairn::flatten(tree).size());
  }
  CHECK(cairn::leaf_count(std::vector<model::Dense>{}) == 0);
  CHECK(cairn::leaf_count(std::optional<model::Dense>{}) == 0);
}

TEST_CASE("an unordered_map is walked in its keys' string order, however long the prefixes they share") {
  // Keys over a small alphabet that includes NUL and a byte above 0x7f (memcmp order is
  // unsigned), many of them alike in their first eight bytes and only different after them.
  std::mt19937_64& g = test::rng();
  const char alphabet[] = {'\0', 'a', 'b', '\xff'};
  std::map<std::string, int> ordered;
  std::unordered_map<std::string, int> hashed;
  for (int i = 0; i < 400; ++i) {
    std::string k = (g() % 2) ? std::string(8 + g() % 3, 'a') : std::string();
    for (std::size_t n = g() % 6; n > 0; --n) k += alphabet[g() % 4];
    ordered[k] = i;
    hashed[k] = i;
  }
  CHECK(cairn::key_paths(hashed) == cairn::key_paths(ordered));
  std::unordered_map<std::int64_t, int> ints{{10, 1}, {-3, 2}, {7, 3}};
  CHECK(cairn::key_paths(ints) == std::vector<std::string>{"-3", "7", "10"});
}

TEST_CASE("tree_map and for_each_leaf walk several trees of the same structure") {
  model::Dense a{Eigen::MatrixXf::Constant(2, 2, 1.0f), Eigen::VectorXf::Constant(2, 2.0f)};
  model::Dense b{Eigen::MatrixXf::Constant(2, 2, 10.0f), Eigen::VectorXf::Constant(2, 20.0f)};
  auto sum = cairn::tree_map([](const auto& x, const auto& y) { return (x + y).eval(); }, a, b);
  CHECK(sum.kernel(1, 1) == 11.0f);
  CHECK(sum.bias(0) == 22.0f);
  std::vector<std::string> seen;
  auto scaled = cairn::tree_map_with_path(
      [&](const cairn::KeyPath& p, const auto& x) { seen.push_back(p.str()); return (x * 3.0f).eval(); }, a);
  CHECK(seen == std::vector<std::string>{"kernel", "bias"});
  CHECK(scaled.bias(1) == 6.0f);
  double total = 0;
  cairn::for_each_leaf(a, [&](auto& x, const auto& y) { total += static_cast<double>(x.sum() + y.sum()); }, b);
  CHECK(total == doctest::Approx(4 + 4 + 40 + 40));
  std::vector<model::Dense> one(1), two(2);
  CHECK_CAIRN_ERROR(cairn::tree_map([](const auto& x, const auto&) { return x; }, one, two),
                    cairn::ErrorKind::structure_mismatch, "leaves");
}

TEST_CASE("structure printing names every node and leaf") {
  model::Dense d{Eigen::MatrixXf::Zero(3, 4), Eigen::VectorXf::Zero(4)};
  CHECK(cairn::tree_structure(d) == "(root): struct\nkernel: float32[3, 4]\nbias: float32[4]\n");
}

TEST_CASE("user node and leaf types plug in through node_traits and leaf_traits") {
  test::TempDir dir;
  user::Tensor t{{2, 2}, {1, 2, 3, 4}};
  user::Bag bag{{1.5f, 2.5f, 3.5f}};
  auto both = std::make_pair(t, bag);
  CHECK(cairn::key_paths(both) == std::vector<std::string>{"0", "1/0", "1/1", "1/2"});
  cairn::save(dir / "c", both);
  auto back = cairn::load<std::pair<user::Tensor, user::Bag>>(dir / "c");
  CHECK(back.first.dims == t.dims);
  CHECK(back.first.values == t.values);
  CHECK(back.second.items == bag.items);
}
