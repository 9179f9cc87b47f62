/* OpenMP's wait policy. libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it is loaded,
 * before main runs; so the CLI sets its default by re-executing itself once with the variable set.
 *
 * The default is OMP_WAIT_POLICY=passive: idle threads sleep instead of spinning. On a machine
 * where another process holds a core, libgomp's default spin (and OMP_WAIT_POLICY=active) made
 * 2 threads many times slower than 1, since a spinning thread takes the core its partner needs;
 * passive costs little when the machine is idle. bench/omp_wait.sh measures both cases and
 * bench/README.md has the figures. A user who sets either variable keeps it. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"

void omp_default_env(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv("MEMWALL_OMP_ENV_SET")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0 || setenv("MEMWALL_OMP_ENV_SET", "1", 1) != 0) return;
    execv("/proc/self/exe", argv);
    /* exec failed (no /proc, say): run on with libgomp's own default, which is already loaded */
    unsetenv("OMP_WAIT_POLICY");
}
