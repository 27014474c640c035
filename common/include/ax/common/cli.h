// Command lines of ax's programs, parsed by CLI11 (Debian's libcli11-dev) with one set of
// conventions: `--name value` and `--name=value`; a repeated single-value option keeps its last
// value (repeatable options are vectors); `-h`/`--help` prints the help to stdout and exits 0; a
// wrong command line is one line on stderr, "PROGRAM: what (see PROGRAM --help)", and exit
// status 2. CLI11 reports errors by exception; they are caught here and never leave these
// functions.
//
//   CLI::App app{"Shows ...", "ax-topo"};
//   ax::cli::configure(app);
//   app.add_option("--nodes", nodes, "identical nodes")->type_name("N")->check(CLI::Range(1, 64));
//   if (std::optional<int> exit = ax::cli::parse_or_exit(app, argc, argv)) return *exit;
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ax/common/status.h"

namespace ax::cli {

inline constexpr int kExitUsage = 2;

// Sets the conventions above on app (and so on the subcommands added to it afterwards).
void configure(CLI::App& app);

struct Outcome {
  enum class Kind { kGoOn, kHelp, kUsageError };
  Kind kind = Kind::kGoOn;
  std::string text;     // the help text, or the one-line error
  std::string program;  // with an error: the (sub)command it belongs to, "ax-data tokenize"
};

// Parses args (the program name not included).
Outcome parse(CLI::App& app, std::vector<std::string> args);

// For main(): parses argv[1..]; prints the help or the error. nullopt: go on; otherwise the exit
// status to return (0 after the help, 2 after an error).
std::optional<int> parse_or_exit(CLI::App& app, int argc, const char* const* argv);

// "ax-data tokenize": the names of app and of the apps above it.
std::string full_name(const CLI::App& app);

// A usage error found after parsing (options that contradict each other): prints
// "PROGRAM: what (see PROGRAM --help)" to stderr and returns kExitUsage.
int usage_error(const CLI::App& app, std::string_view what);

// The option takes one of `choices`; the help shows them as a|b|c.
CLI::Option* one_of(CLI::Option* option, const std::vector<std::string>& choices);

// The value is a number in [min, max]: "expected a number >= 1, got '0'".
CLI::Validator in_range(double min, double max = 1e300);

// A check from a parser that returns Status or StatusOr<T>: a value it refuses is a usage error
// with its message ("--device: expected auto|cpu|cpu-bf16|cuda|cuda:N, got 'tpu'"). The parser
// stays the one place that knows the syntax.
inline Status status_of(Status s) { return s; }
template <typename T>
Status status_of(const StatusOr<T>& s) {
  return s.status();
}
template <typename Parse>
CLI::Validator status_check(Parse parse) {
  return CLI::Validator(
      [parse](std::string& value) -> std::string {
        Status s = status_of(parse(value));
        return s.ok() ? std::string() : s.message();
      },
      "");
}

}  // namespace ax::cli
