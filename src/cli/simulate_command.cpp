// Placeholder until the simulate command lands.
#include "cli/commands.h"
namespace tessera::cli {
void add_simulate_command(CLI::App& app) { (void)app; }
}  // namespace tessera::cli
