// tessera: train, plan and simulate large neural networks.
//
// main() is the one boundary between tessera and the user: whatever a command throws ends here
// as one line and an exit code (cli/errors.h), never as an abort.
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/errors.h"
#include "config/toml_reader.h"
#include "core/check.h"
#include "dist/job_status.h"

namespace {

using tessera::cli::kExitError;
using tessera::cli::kExitUsage;

std::vector<const CLI::App*> commands_of(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

std::string command_names(const CLI::App& app) {
  std::string names;
  for (const CLI::App* c : commands_of(app)) names += (names.empty() ? "" : ", ") + c->get_name();
  return names;
}

// The closest name by spelling, or else the one the word begins ("prep" -> "prepare").
std::string suggestion(const std::string& word, const std::vector<std::string>& names) {
  if (std::string hint = tessera::config::closest_match(word, names); !hint.empty()) return hint;
  std::string begun;
  int count = 0;
  for (const std::string& n : names) {
    if (word.size() >= 2 && n.starts_with(word)) begun = n, ++count;
  }
  return count == 1 ? begun : std::string();
}

const CLI::App* find_command(const CLI::App& app, const std::string& name) {
  for (const CLI::App* c : commands_of(app)) {
    if (c->get_name() == name) return c;
  }
  return nullptr;
}

// The deepest command CLI11 reached, and its path ("tessera data prepare").
std::pair<const CLI::App*, std::string> deepest_command(const CLI::App& app) {
  std::string path = "tessera";
  const CLI::App* at = &app;
  for (;;) {
    const auto parsed = at->get_subcommands();
    if (parsed.empty()) return {at, path};
    at = parsed.front();
    path += " " + at->get_name();
  }
}

// Walks the words that choose a command ("data prepare") before CLI11 parses, so a misspelt one is
// named with a suggestion instead of CLI11's "A subcommand is required". Only the top level and
// `data` have subcommands, and neither takes an option with a value, so every word that does not
// start with '-' there must be a command.
std::string unknown_command(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* level = &app;
  std::string path = "tessera";
  for (const std::string& word : args) {
    if (commands_of(*level).empty()) return {};
    if (word == "--") return {};
    if (word.starts_with("-")) continue;
    if (const CLI::App* next = find_command(*level, word)) {
      level = next;
      path += " " + word;
      continue;
    }
    std::vector<std::string> names;
    for (const CLI::App* c : commands_of(*level)) names.push_back(c->get_name());
    const std::string hint = suggestion(word, names);
    const std::string what = level == &app ? "command" : "'" + path + "' command";
    return fmt::format("unknown {} '{}'; {}commands: {}", what, word,
                       hint.empty() ? std::string() : fmt::format("did you mean '{}'? ", hint), command_names(*level));
  }
  return {};
}

// --debug is global and may stand anywhere before a "--" (after it, the words belong to the
// command `tessera launch` runs, which reads its own --debug).
bool take_debug_flag(std::vector<std::string>& args) {
  bool debug = false;
  for (auto it = args.begin(); it != args.end() && *it != "--";) {
    if (*it == "--debug") {
      debug = true;
      it = args.erase(it);
    } else {
      ++it;
    }
  }
  return debug;
}

// CLI11 lists words it did not expect in reverse order, and without a hint; the first option
// among them is named with the closest option of the command.
std::string unexpected_words(const CLI::App& app, const CLI::App& command, const std::string& path) {
  // A word the command had no place for may be handed back to the top level, so ask both.
  const std::vector<std::string> words = app.remaining(true);
  for (const std::string& word : words) {
    if (!word.starts_with("-") || word == "--") continue;
    const std::string name = word.substr(0, word.find('='));
    std::vector<std::string> options;
    for (const CLI::Option* o : command.get_options()) {
      for (const std::string& l : o->get_lnames()) options.push_back("--" + l);
      for (const std::string& s : o->get_snames()) options.push_back("-" + s);
    }
    const std::string hint = suggestion(name, options);
    return fmt::format("'{}' has no option {}{}", path, name,
                       hint.empty() ? std::string() : fmt::format("; did you mean {}?", hint));
  }
  return words.empty() ? std::string() : fmt::format("'{}' does not take '{}' here", path, words.front());
}

// CLI11 says "Could not convert: --ranks = abc"; every option of tessera that can fail to convert
// takes a number.
std::string parse_error_message(const CLI::ParseError& e, const CLI::App& app, const CLI::App& command,
                                const std::string& path) {
  const std::string what = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    if (std::string words = unexpected_words(app, command, path); !words.empty()) return words;
  }
  constexpr std::string_view prefix = "Could not convert: ";
  const auto eq = what.find(" = ");
  if (dynamic_cast<const CLI::ConversionError*>(&e) != nullptr && what.starts_with(prefix) && eq != std::string::npos) {
    const std::string option = what.substr(prefix.size(), eq - prefix.size());
    return fmt::format("{} takes a number, got '{}'", option, what.substr(eq + 3));
  }
  return what;
}

// How the command ended: its exit code and, on failure, the message that says why.
struct Outcome {
  int code = 0;
  std::string message;
};

Outcome usage_error(const std::string& message) {
  return {kExitUsage, fmt::format("error: {}", tessera::cli::printable(message))};
}

Outcome run_command(CLI::App& app, const std::vector<std::string>& args, const char* program,
                    const tessera::cli::Globals& globals) {
  if (args.empty()) {
    const Outcome error = usage_error(fmt::format("no command given; try 'tessera train --config "
                                                 "configs/default.toml', or 'tessera <command> --help' (commands: {})",
                                                 command_names(app)));
    return {error.code, app.help() + error.message};
  }
  if (const std::string unknown = unknown_command(app, args); !unknown.empty()) return usage_error(unknown);

  std::vector<std::string> words_kept(args);
  std::vector<char*> words{const_cast<char*>(program)};
  for (std::string& a : words_kept) words.push_back(a.data());
  try {
    app.parse(static_cast<int>(words.size()), words.data());
  } catch (const CLI::RuntimeError& e) {
    // A command's own outcome code (train's 3: stopped early with a checkpoint), said already.
    return {e.get_exit_code(), ""};
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return {app.exit(e), ""};  // --help, --version
    const auto [command, path] = deepest_command(app);
    if (!commands_of(*command).empty() && command->get_subcommands().empty()) {
      return usage_error(fmt::format("'{}' needs a command: {} ('{} --help' says what each does)", path,
                                     command_names(*command), path));
    }
    return usage_error(
        fmt::format("{} ('{} --help' lists the options)", parse_error_message(e, app, *command, path), path));
  } catch (const tessera::cli::UsageError& e) {
    return usage_error(e.what());
  } catch (const std::exception& e) {
    return {kExitError, tessera::cli::describe_error(e, globals.debug)};
  } catch (...) {
    return {kExitError, tessera::cli::describe_unknown_error()};
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  // Named, so usage lines say "tessera train" rather than the path it was started by.
  CLI::App app{"tessera: training large neural networks with every kind of parallelism, and planning them", "tessera"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tessera 0.1.0");
  tessera::cli::Globals globals;
  // Registered so that --help lists it; take_debug_flag reads it wherever it stands.
  app.add_flag("--debug", globals.debug, "on an error, also print where in tessera's source the failed check is");
  tessera::cli::add_data_command(app);
  tessera::cli::add_train_command(app, globals);
  tessera::cli::add_sample_command(app);
  tessera::cli::add_export_command(app);
  tessera::cli::add_plan_command(app);
  tessera::cli::add_simulate_command(app);
  tessera::cli::add_launch_command(app);
  tessera::cli::add_compatibility_command(app);
  tessera::cli::add_config_keys_command(app);

  std::vector<std::string> args(argv + 1, argv + argc);
  globals.debug = take_debug_flag(args);
  Outcome outcome = run_command(app, args, argv[0], globals);
  // What the command printed comes before the error that ended it. Standard output is buffered, so
  // a full disk or a closed pipe may only show here: a command whose output was lost has failed.
  if ((std::fflush(stdout) != 0 || std::ferror(stdout) != 0) && outcome.code == 0) {
    outcome = {kExitError, fmt::format("error: could not write the output: {}", std::strerror(errno))};
  }
  // Under `tessera launch` a rank other than 0 leaves its message to the launcher, which says each
  // different one once; and every rank exits 0, since mpirun would turn a rank's own code (even
  // 3, a stop with a checkpoint) into an aborted job and a screen of its text.
  const std::optional<tessera::dist::JobStatus> job = tessera::dist::JobStatus::of_this_process();
  // Not fmt::print, which throws where stderr cannot be written either (both on a full disk).
  if (!outcome.message.empty() && (!job || job->rank() == 0)) std::fprintf(stderr, "%s\n", outcome.message.c_str());
  if (!job) return outcome.code;
  job->record_outcome(outcome.code, outcome.message);
  return 0;
}
