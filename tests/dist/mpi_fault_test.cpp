// Jobs that must fail, and fail quickly, run by expect_job_failure.sh under mpirun:
//   --mode watchdog   rank --victim sleeps before an all_reduce on --group (world or tp of a
//                     2 x 2 mesh); its peers' watchdog aborts the job after --timeout seconds,
//                     naming rank, operation, sequence number and group.
//   --mode abort      rank --victim calls std::abort() while its peers wait in an all_reduce.
//   --mode error      rank --victim hits an error, prints it and ends the job with abort_job().
// The trailing marker argument only tags the processes so the wrapper can look for orphans.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/check.h"
#include "dist/mesh.h"
#include "dist/mpi_runtime.h"

using namespace tessera;
using namespace tessera::dist;
using tessera::config::ParallelLayout;

int main(int argc, char** argv) {
  std::string mode = "watchdog", group = "world", marker;
  int victim = 1;
  double timeout = 2.0;
  CLI::App app{"multi-rank failure scenarios"};
  app.add_option("--mode", mode)->check(CLI::IsMember({"watchdog", "abort", "error"}));
  app.add_option("--group", group)->check(CLI::IsMember({"world", "tp"}));
  app.add_option("--victim", victim);
  app.add_option("--timeout", timeout);
  app.add_option("marker", marker);
  CLI11_PARSE(app, argc, argv);

  MpiRuntime mpi(&argc, &argv);
  try {
    CommOptions options;
    options.timeout_seconds = mode == "watchdog" ? timeout : 120.0;  // only the watchdog mode may rely on it
    auto world = mpi.world(options);
    TS_CHECK(victim >= 0 && victim < world->size(), "victim {} is not a rank of {}", victim, world->size());
    std::vector<float> v(1024, 1.0f);
    world->all_reduce(std::span(v), ReduceOp::Sum)->wait();  // #0: everyone is up

    std::unique_ptr<Mesh> mesh;
    Communicator* comm = world.get();
    if (group == "tp") {
      mesh = std::make_unique<Mesh>(*world, ParallelLayout{.dp = world->size() / 2, .tp = 2});
      comm = &mesh->tp();
    }
    const bool in_victims_group =
        std::find(comm->group_ranks().begin(), comm->group_ranks().end(), victim) != comm->group_ranks().end();
    if (world->rank() == victim) {
      if (mode == "abort") std::abort();
      if (mode == "error") TS_FAIL("rank {} found a problem it cannot recover from", victim);
      std::this_thread::sleep_for(std::chrono::seconds(60));  // stalls past any timeout the test uses
    } else if (!in_victims_group) {
      // Not in the stalled group: idle, outside any operation, until the job is ended.
      std::this_thread::sleep_for(std::chrono::seconds(60));
    }
    comm->all_reduce(std::span(v), ReduceOp::Sum)->wait();
    std::fprintf(stderr, "rank %d: the all_reduce completed although rank %d never joined it\n", world->rank(), victim);
    return 0;  // the wrapper fails the test on a zero exit
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", mpi.world_rank(), e.what());
    mpi.abort_job(1);
  }
}
