#include "ax/common/cli.h"

#include <algorithm>
#include <iostream>

#include "ax/common/strings.h"

namespace ax::cli {
namespace {

// The arguments nothing took, as one message: the first option-like one, else the first.
std::string extras_message(const std::vector<std::string>& extras) {
  auto option = std::find_if(extras.begin(), extras.end(),
                             [](const std::string& a) { return starts_with(a, "-"); });
  if (option != extras.end()) return str_cat("unknown option '", *option, "'");
  return str_cat("unexpected argument '", extras.front(), "'");
}

// The app a parse error belongs to: the deepest subcommand the command line selected.
const CLI::App& selected(const CLI::App& app) {
  const CLI::App* at = &app;
  while (!at->get_subcommands().empty()) at = at->get_subcommands().front();
  return *at;
}

int report(const std::string& program, std::string_view what) {
  std::cerr << program << ": " << what << " (see " << program << " --help)\n";
  return kExitUsage;
}

// "8", "0.5", "2147483647": bounds as a user wrote them.
std::string number(double x) {
  if (x == static_cast<double>(static_cast<int64_t>(x)))
    return std::to_string(static_cast<int64_t>(x));
  return str_cat(x);
}

// CLI11 says "--output: 1 required DIR missing" when an option's value is missing.
std::string missing_value_message(const std::string& what) {
  const size_t colon = what.find(": ");
  if (colon == std::string::npos || what.find(" missing", colon) == std::string::npos) return what;
  return str_cat(what.substr(0, colon), " needs a value");
}

std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

}  // namespace

void configure(CLI::App& app) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.get_formatter()->label("Usage", "usage");
  app.get_formatter()->column_width(30);
  app.set_help_flag("-h,--help", "print this help and exit");
}

Outcome parse(CLI::App& app, std::vector<std::string> args) {
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector last argument first
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    return {Outcome::Kind::kHelp, app.help(), ""};
  } catch (const CLI::ExtrasError&) {
    const CLI::App& at = selected(app);
    return {Outcome::Kind::kUsageError, extras_message(at.remaining()), full_name(at)};
  } catch (const CLI::ArgumentMismatch& e) {
    return {Outcome::Kind::kUsageError, missing_value_message(e.what()), full_name(selected(app))};
  } catch (const CLI::ParseError& e) {
    return {Outcome::Kind::kUsageError, one_line(e.what()), full_name(selected(app))};
  }
  return {};
}

std::optional<int> parse_or_exit(CLI::App& app, int argc, const char* const* argv) {
  Outcome outcome = parse(app, std::vector<std::string>(argv + 1, argv + argc));
  switch (outcome.kind) {
    case Outcome::Kind::kGoOn:
      return std::nullopt;
    case Outcome::Kind::kHelp:
      std::cout << outcome.text;
      return 0;
    case Outcome::Kind::kUsageError:
      break;
  }
  return report(outcome.program, outcome.text);
}

std::string full_name(const CLI::App& app) {
  std::string name = app.get_name();
  for (const CLI::App* up = app.get_parent(); up != nullptr; up = up->get_parent()) {
    name = str_cat(up->get_name(), " ", name);
  }
  return name;
}

int usage_error(const CLI::App& app, std::string_view what) { return report(full_name(app), what); }

CLI::Option* one_of(CLI::Option* option, const std::vector<std::string>& choices) {
  std::string names;
  for (const std::string& c : choices) names += (names.empty() ? "" : "|") + c;
  CLI::Validator check(
      [choices, names](std::string& value) -> std::string {
        if (std::find(choices.begin(), choices.end(), value) != choices.end()) return "";
        return str_cat("expected ", names, ", got '", value, "'");
      },
      "");
  return option->check(check)->type_name(names);
}

CLI::Validator in_range(double min, double max) {
  return CLI::Validator(
      [min, max](std::string& value) -> std::string {
        std::optional<double> v = parse_double(value);
        if (v && *v >= min && *v <= max) return "";
        return max >= 1e300 ? str_cat("expected a number >= ", number(min), ", got '", value, "'")
                            : str_cat("expected a number in [", number(min), ", ", number(max),
                                      "], got '", value, "'");
      },
      "");
}

}  // namespace ax::cli
