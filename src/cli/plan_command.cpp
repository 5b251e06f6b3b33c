// Placeholder until the plan command lands.
#include "cli/commands.h"
namespace tessera::cli {
void add_plan_command(CLI::App& app) { (void)app; }
}  // namespace tessera::cli
