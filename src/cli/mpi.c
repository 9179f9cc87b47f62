/* The CLI's access to MPI: build/memwall-mpi.so (src/dist/comm_mpi.c), loaded from the binary's
 * own folder when a run asks for --zero. The binary links no MPI library: its size and its RSS
 * are the same with or without an MPI installation, and a binary built without one says what to
 * do. */
#include <dlfcn.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/status.h"
#include "../dist/comm_mpi.h"
#include "../memory/scratch.h"

static int env_int(const char *name) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : 0;
}

int mw_mpi_launched_size(void) {
    int n = env_int("OMPI_COMM_WORLD_SIZE");
    if (!n) n = env_int("PMI_SIZE");
    if (!n) n = env_int("PMIX_SIZE");
    return n;
}

int mw_mpi_launched_rank(void) {
    int r = env_int("OMPI_COMM_WORLD_RANK");
    if (!r) r = env_int("PMI_RANK");
    if (!r) r = env_int("PMIX_RANK");
    return r > 0 ? r : 0;
}

int mw_mpi_local_size(void) {
    int n = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!n) n = env_int("MPI_LOCALNRANKS");
    return n > 0 ? n : 1;
}

int mw_mpi_rank_cpus(int local_ranks) {
    cpu_set_t cs;
    int cpus = sched_getaffinity(0, sizeof cs, &cs) == 0 ? CPU_COUNT(&cs) : 0;
    /* the machine's CPUs shared by the ranks on it (unbound ranks each see every CPU); more ranks
     * than CPUs: one thread each, since threads beyond the CPUs only take turns */
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    int share = online > 0 ? (int)(online / (local_ranks > 0 ? local_ranks : 1)) : 0;
    if (online > 0 && share < 1) share = 1;
    if (cpus <= 0 || (share > 0 && share < cpus)) cpus = share;
    return cpus > 0 ? cpus : 1;
}

int mw_mpi_planned_rank_cpus(int ranks) {
    if (ranks <= 2) return 1; /* OpenMPI's default binding: a core a rank (Cpus_allowed: one CPU) */
    return mw_mpi_rank_cpus(ranks);
}

static const mw_mpi_api *api;

mw_status mw_mpi_init(int *argc, char ***argv, double timeout_s, mw_comm **out) {
    char exe[PATH_MAX], so[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return mw_fail(MW_ERR_IO, "cannot find this binary's folder (/proc/self/exe) to load memwall-mpi.so");
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(so, sizeof so, "%s/memwall-mpi.so", exe);
    if (access(so, F_OK) != 0)
        return mw_fail(MW_ERR_ARG, "this memwall was built without MPI: data parallelism (--zero) needs the MPI build, "
                                   "%s (scripts/install-deps.sh installs OpenMPI; then make builds it)", so);
    /* global: OpenMPI's own plug-ins, which it loads in turn, resolve libmpi's symbols */
    void *h = dlopen(so, RTLD_NOW | RTLD_GLOBAL);
    if (!h) return mw_fail(MW_ERR_ARG, "cannot load %s (the MPI build of --zero): %s", so, dlerror());
    const mw_mpi_api *a = dlsym(h, "mw_mpi_api_v1");
    if (!a || a->version != MW_MPI_API_VERSION)
        return mw_fail(MW_ERR_ARG, "%s is not this memwall's MPI build (rebuild with make)", so);
    api = a;
    return api->init(argc, argv, timeout_s, mw_fail, out);
}

void mw_mpi_finalize(void) {
    if (api) api->finalize();
}

void mw_mpi_abort(int code) {
    mw_scratch_remove_live(); /* MPI_Abort ends the process without exit's handlers, which remove them */
    if (api) api->abort(code);
    exit(code);
}

mw_status mw_mpi_allgather_u64(mw_comm *c, uint64_t mine, uint64_t *out) {
    if (!api) return mw_fail(MW_ERR_ARG, "internal: MPI is not loaded");
    return api->allgather_u64(c, mine, out);
}
