// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the `cairn` tool's command line. The input is the arguments, separated by
// newlines, after a command chosen by its first byte; a path argument "@" stands for a small
// checkpoint and "#" for a safetensors file written once. Every outcome must be an exit status
// and output, never a crash.
#include "fuzz_util.hpp"

#include "../../cli/cairn_cli.hpp"

#include <set>
#include <sstream>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string ckpt = [] {
    const std::string c = fuzz::scratch_dir() + "/cli-ckpt";
    std::map<std::string, std::vector<float>> state = {{"w", std::vector<float>(300, 1.5f)}, {"b", {1, 2}}};
    cairn::save(c, state, {.overwrite = true});
    return c;
  }();
  static const std::string st = [] {
    const std::string f = fuzz::scratch_dir() + "/cli.safetensors";
    cairn::save_safetensors(f, std::vector<std::vector<float>>{{1, 2, 3}, {4}}, {.overwrite = true});
    return f;
  }();
  if (size == 0) return 0;
  static const char* commands[] = {"ls", "verify", "show", "diff", "convert", "help", "bogus"};
  std::vector<std::string> args = {commands[data[0] % 7]};
  std::string cur;
  for (std::size_t i = 1; i <= size; ++i) {
    if (i == size || data[i] == '\n') {
      args.push_back(cur == "@" ? ckpt : cur == "#" ? st : cur);
      cur.clear();
    } else {
      cur += static_cast<char>(data[i]);
    }
  }
  // The fuzzer must not write outside its scratch directory: convert's destination (its second
  // positional argument, found as cli::run finds it) is always a path in there.
  if (args[0] == "convert") {
    int positional = 0;
    for (std::size_t i = 1; i < args.size(); ++i) {
      const std::string& a = args[i];
      // Every option that takes its value as the next argument (cli/cairn_cli.hpp's value()).
      static const std::set<std::string> takes_value = {"--atol", "--rtol", "--cast", "--select", "--exclude",
                                                        "--max-file-bytes", "--max-report", "--item", "--step", "--to",
                                                        "--orbax-layout", "--zarr", "--zstd"};
      if (takes_value.count(a)) { ++i; continue; }
      if (a.size() > 1 && a[0] == '-' && a[1] == '-') continue;
      if (++positional == 2) args[i] = fuzz::scratch_dir() + "/cli-out.safetensors";
    }
  }
  std::ostringstream out, err;
  (void)cairn::cli::run(args, out, err);
  return 0;
}
