// SPDX-License-Identifier: Apache-2.0
// The `cairn` command-line tool: ls, verify, show, diff and convert over checkpoints,
// Checkpointer roots and safetensors files, at paths or URIs (docs/cli.md). Each command is
// one file in cli/commands/, written on cairn's public names only (cairn::inspect,
// read_arrays, verify, convert); this file parses the command line and dispatches, behind
// run(), so that tests and the fuzz target call it in-process (cli/main.cpp forwards argv).
//
// Everything it opens is untrusted, and so is its command line: every failure is one line on
// `err` naming the file and the key, and an exit status; never a crash.
#pragma once

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "commands/convert.hpp"
#include "commands/diff.hpp"
#include "commands/ls.hpp"
#include "commands/show.hpp"
#include "commands/verify.hpp"
#include "output.hpp"
#include "terminal_text.hpp"

namespace cairn::cli {

inline constexpr const char* usage_text =
    "usage: cairn <command> [options]\n"
    "  ls PATH [--json]                  the tree (key, dtype, shape, sharding, bytes), items, user metadata;\n"
    "                                    on a Checkpointer root: its steps, the latest, their metrics\n"
    "  verify PATH                       read every chunk and check every checksum (exit 0 only if intact)\n"
    "  show PATH KEY[SLICE] [--verify] [--item NAME]\n"
    "                                    a leaf's values, e.g. params/w[0:2, :] (reads only what it prints;\n"
    "                                    --verify reads the whole leaf first, so every value is checksum-verified)\n"
    "  diff A B [--atol X] [--rtol Y] [--max-report N]\n"
    "                                    structure and values of every item, the first N differing elements\n"
    "                                    of each leaf\n"
    "                                    (exit 0 same, 1 different)\n"
    "  convert SRC DST [--cast GLOB=DTYPE]... [--select GLOB]... [--exclude GLOB]... [--max-file-bytes N]\n"
    "                  [--item NAME] [--overwrite] [--to cairn|safetensors|orbax] [--link]\n"
    "                  [--orbax-layout v1|v0] [--zarr 3|2] [--no-ocdbt] [--zstd LEVEL]\n"
    "                                    every item, or the one named (safetensors and Orbax hold one)\n"
    "                                    between cairn checkpoints, safetensors and Orbax (DST ending in\n"
    "                                    .safetensors, or a directory with --max-file-bytes, is safetensors;\n"
    "                                    --to orbax writes an Orbax checkpoint where built with Orbax;\n"
    "                                    --link makes it read a cairn checkpoint's data files where they\n"
    "                                    are, hard-linked, instead of copying them; --orbax-layout v0 writes\n"
    "                                    StandardCheckpointer's layout, --zarr 2 zarr v2 arrays, --no-ocdbt\n"
    "                                    a directory per parameter, --zstd 1-22 compresses the chunks)\n"
    "A safetensors file's tensor names split at '.' into key paths; --separator SEP splits them at\n"
    "SEP instead ('' keeps each whole), and --aliases also reads the tied names safetensors'\n"
    "save_model recorded in __metadata__ (ls, show, diff and convert).\n"
    "PATH is a checkpoint directory, a Checkpointer root, a .safetensors file or a *.index.json,\n"
    "as a path or a URI (file:///data/ckpt; s3:// and gs:// where built with them; any scheme a\n"
    "store registered).\n"
    "On a Checkpointer root, show, diff and convert read its latest committed step; --step N\n"
    "reads step N (and makes ls and verify look at that step alone). Options also take\n"
    "--name=value. verify, show, diff and convert show their progress on stderr where it is a\n"
    "terminal (--progress: also where it is not; --quiet: never). cairn --version prints the version.\n";

// The help of one command (`cairn CMD --help`): its lines of usage_text, then the notes that
// hold for every command (the unindented lines after the list). Empty for a command it does
// not list.
inline std::string command_usage(const std::string& cmd) {
  std::vector<std::string> lines;
  for (std::string_view t = usage_text; !t.empty();) {
    const std::size_t nl = t.find('\n');
    lines.emplace_back(t.substr(0, nl));
    t.remove_prefix(nl == std::string_view::npos ? t.size() : nl + 1);
  }
  // A command's first line is indented by two spaces; its continuations by more.
  const auto starts_command = [](const std::string& l) { return l.size() > 2 && l[0] == ' ' && l[1] == ' ' && l[2] != ' '; };
  std::string out = "usage: cairn " + cmd + " ...\n";
  bool in = false, found = false;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (starts_command(l)) in = l.rfind("  " + cmd + " ", 0) == 0;
    else if (!l.empty() && l[0] != ' ') in = false;
    if (in) out += l + "\n", found = true;
  }
  if (!found) return "";
  for (std::size_t i = 1; i < lines.size(); ++i)
    if (!lines[i].empty() && lines[i][0] != ' ') out += lines[i] + "\n";
  return out;
}

inline CastRule parse_cast(const std::string& arg) {
  const auto eq = arg.rfind('=');
  DType d;
  if (eq == std::string::npos || eq == 0 || !parse_dtype(arg.substr(eq + 1), d))
    throw Error(ErrorKind::invalid_argument, "--cast takes GLOB=DTYPE (a dtype as numpy names it, e.g. 'params/*=bfloat16'), "
                "not '" + arg + "'");
  // A floating-point target changes floating-point leaves only ("*=bfloat16" leaves integer
  // counters alone, as on save); an integer target is asked for by name and changes any
  // numeric leaf it matches ("step=int32").
  return {arg.substr(0, eq), d, is_float_dtype(d)};
}

inline double parse_double(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !(d >= 0)) throw Error(ErrorKind::invalid_argument, flag + " takes a number >= 0, not '" + v + "'");
  return d;
}

// run(), with `out` and `err` escaping control characters; `progress_err` is the unfiltered
// stderr that the progress line (with its "\r") goes to.
inline int run_filtered(const std::vector<std::string>& args, std::ostream& out, std::ostream& err, std::ostream& progress_err,
                        bool err_is_terminal) {
  try {
    if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
      (args.empty() ? err : out) << usage_text;
      return args.empty() ? exit_error : exit_ok;
    }
    if (args[0] == "--version" || args[0] == "version") {
      out << "cairn " << CAIRN_VERSION_MAJOR << "." << CAIRN_VERSION_MINOR << "." << CAIRN_VERSION_PATCH << "\n";
      return exit_ok;
    }
    const std::string& cmd = args[0];
    // `cairn CMD --help` (or -h, anywhere after the command): that command's help, on stdout.
    if (std::any_of(args.begin() + 1, args.end(), [](const std::string& a) { return a == "--help" || a == "-h"; }))
      if (const std::string help = command_usage(cmd); !help.empty()) {
        out << help;
        return exit_ok;
      }
    std::vector<std::string> pos;
    bool json = false, verify_first = false, quiet = false, force_progress = false;
    double atol = 0, rtol = 0;
    std::uint64_t max_report = 10;
    std::optional<std::string> step;
    std::vector<std::string> given;  // the options, as named
    ConvertOptions convert_options;  // (its `safetensors` is every command's: --separator, --aliases)
    for (std::size_t i = 1; i < args.size(); ++i) {
      // "--atol=1e-3" is "--atol 1e-3".
      std::string a = args[i];
      std::optional<std::string> inline_value;
      if (a.rfind("--", 0) == 0) {
        if (const auto eq = a.find('='); eq != std::string::npos) {
          inline_value = a.substr(eq + 1);
          a = a.substr(0, eq);
        }
      }
      auto value = [&]() -> std::string {
        if (inline_value) {
          std::string v = *inline_value;
          inline_value.reset();
          return v;
        }
        if (i + 1 >= args.size()) throw Error(ErrorKind::invalid_argument, a + " needs a value");
        return args[++i];
      };
      if (a.rfind("--", 0) == 0) given.push_back(a);
      if (a == "--json") json = true;
      else if (a == "--quiet") quiet = true;
      else if (a == "--progress") force_progress = true;
      else if (a == "--verify") verify_first = true;
      else if (a == "--item") convert_options.item = value();
      else if (a == "--step") step = value();
      else if (a == "--exclude") convert_options.exclude.push_back(value());
      else if (a == "--max-report") {
        const std::string v = value();
        std::int64_t n = 0;
        if (!parse_integer(v, n) || n < 0)
          throw Error(ErrorKind::invalid_argument, "--max-report takes a number of elements >= 0, not '" + v + "'");
        max_report = static_cast<std::uint64_t>(n);
      }
      else if (a == "--overwrite") convert_options.overwrite = true;
      else if (a == "--separator") convert_options.safetensors.separator = value();
      else if (a == "--aliases") convert_options.safetensors.aliases = true;
      else if (a == "--link") convert_options.link = true;
      else if (a == "--to") {
        const std::string v = value();
        if (v == "cairn") convert_options.to = ConvertTo::checkpoint;
        else if (v == "safetensors") convert_options.to = ConvertTo::safetensors;
        else if (v == "orbax") convert_options.to = ConvertTo::orbax;
        else throw Error(ErrorKind::invalid_argument, "--to takes cairn, safetensors or orbax, not '" + v + "'");
      }
      else if (a == "--orbax-layout") {
        const std::string v = value();
        if (v == "v1" || v == "v0") convert_options.orbax.v0_standard = v == "v0";
        else throw Error(ErrorKind::invalid_argument, "--orbax-layout takes v1 (ocp.save's) or v0 (StandardCheckpointer's), not '" + v + "'");
      }
      else if (a == "--zarr") {
        const std::string v = value();
        if (v == "3" || v == "2") convert_options.orbax.zarr3 = v == "3";
        else throw Error(ErrorKind::invalid_argument, "--zarr takes 3 or 2, not '" + v + "'");
      }
      else if (a == "--no-ocdbt") convert_options.orbax.ocdbt = false;
      else if (a == "--zstd") {
        const std::string v = value();
        std::int64_t n = 0;
        if (!parse_integer(v, n) || n < 1 || n > 22)
          throw Error(ErrorKind::invalid_argument, "--zstd takes a compression level from 1 to 22, not '" + v + "'");
        convert_options.orbax.zstd_level = static_cast<int>(n);
      }
      else if (a == "--atol") atol = parse_double(a, value());
      else if (a == "--rtol") rtol = parse_double(a, value());
      else if (a == "--cast") convert_options.cast.push_back(parse_cast(value()));
      else if (a == "--select") convert_options.select.push_back(value());
      else if (a == "--max-file-bytes") {
        const std::string v = value();
        std::int64_t n = 0;
        if (!parse_integer(v, n) || n <= 0)
          throw Error(ErrorKind::invalid_argument, "--max-file-bytes takes a positive number of bytes, not '" + v + "'");
        convert_options.max_file_bytes = static_cast<std::uint64_t>(n);
      } else if (a.size() > 1 && a[0] == '-' && a[1] == '-') throw Error(ErrorKind::invalid_argument, "unknown option " + a);
      else pos.push_back(a);
      if (inline_value) throw Error(ErrorKind::invalid_argument, a + " takes no value");
    }
    // Every option given must be one the command takes: a flag another command takes is an
    // error, not ignored (diff --exclude was taken and did nothing).
    static const std::map<std::string, std::vector<std::string>> takes = {
        {"ls", {"--json", "--step", "--separator", "--aliases"}},
        {"verify", {"--step", "--quiet", "--progress"}},
        {"show", {"--verify", "--item", "--step", "--quiet", "--progress", "--separator", "--aliases"}},
        {"diff", {"--atol", "--rtol", "--max-report", "--step", "--quiet", "--progress", "--separator", "--aliases"}},
        {"convert", {"--cast", "--select", "--exclude", "--item", "--max-file-bytes", "--overwrite", "--link", "--to", "--step",
                     "--orbax-layout", "--zarr", "--no-ocdbt", "--zstd",
                     "--quiet", "--progress", "--separator", "--aliases"}}};
    if (const auto it = takes.find(cmd); it != takes.end())
      for (const auto& o : given)
        if (std::find(it->second.begin(), it->second.end(), o) == it->second.end())
          throw Error(ErrorKind::invalid_argument, "cairn " + cmd + " does not take " + o + " (cairn --help lists each command's options)");
    auto need = [&](std::size_t n, const char* what) {
      if (pos.size() != n) throw Error(ErrorKind::invalid_argument, "cairn " + cmd + " takes " + what);
    };
    // A Checkpointer root where one checkpoint is read: its --step, or its latest.
    const SafetensorsOptions& names = convert_options.safetensors;
    auto at = [&](const std::string& p, bool latest_if_root) { return checkpoint_of(p, step, latest_if_root, err, nullptr, names); };
    if (cmd == "ls") { need(1, "PATH"); return ls(at(pos[0], false), json, out, names); }
    // Progress of long work on stderr: where it is a terminal, or asked for; never with --quiet.
    std::ostream* progress = !quiet && (force_progress || err_is_terminal) ? &progress_err : nullptr;
    if (cmd == "verify") { need(1, "PATH"); return verify(at(pos[0], false), out, progress); }
    if (cmd == "show") {
      need(2, "PATH KEY[SLICE]");
      std::optional<Inspection> seen;
      const std::string where = checkpoint_of(pos[0], step, true, err, &seen, names);
      return show(where, pos[1], out, err, verify_first, convert_options.item, progress, seen ? &*seen : nullptr, names);
    }
    if (cmd == "diff") {
      need(2, "A B");
      return diff(at(pos[0], true), at(pos[1], true), {atol, rtol, max_report, progress, names}, out);
    }
    if (cmd == "convert") { need(2, "SRC DST"); return convert(at(pos[0], true), pos[1], convert_options, out, progress); }
    throw Error(ErrorKind::invalid_argument, "unknown command '" + cmd + "' (cairn --help lists them)");
  } catch (const Error& e) {
    err << e.what() << "\n";  // "cairn: <kind>: <file>: key '<key>': <why>"
  } catch (const std::exception& e) {
    err << "cairn: error: " << e.what() << "\n";
  }
  return exit_error;
}

// Runs the tool on `args` (without the program name); returns the exit status.
// `err_is_terminal`: whether `err` is a terminal, where long work shows its progress
// (cli/main.cpp asks isatty; in-process callers leave it off). What comes from the checkpoint
// (keys, names, strings) is printed with its control characters escaped (cli/terminal_text.hpp).
inline int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err, bool err_is_terminal = false) {
  TerminalSafeBuf out_buf(out.rdbuf()), err_buf(err.rdbuf());
  out_buf.set_json(std::find(args.begin(), args.end(), "--json") != args.end());
  std::ostream safe_out(&out_buf), safe_err(&err_buf);
  const int status = run_filtered(args, safe_out, safe_err, err, err_is_terminal);
  safe_out.flush();
  safe_err.flush();
  return status;
}

}  // namespace cairn::cli
