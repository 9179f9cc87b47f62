/* The MPI side of data parallelism: an mw_comm over MPI_COMM_WORLD (comm_mpi.c, built as
 * build/memwall-mpi.so where mpicc is found) and the CLI's access to it (src/cli/mpi.c, which loads
 * that file beside the binary when a run asks for --zero, and otherwise says that the binary has
 * no MPI build). */
#ifndef MW_DIST_COMM_MPI_H
#define MW_DIST_COMM_MPI_H
#include "memwall.h"

typedef mw_status (*mw_fail_fn)(mw_status s, const char *fmt, ...);

/* What memwall-mpi.so exports (symbol mw_mpi_api_v1). */
#define MW_MPI_API_VERSION 1
typedef struct mw_mpi_api {
    int version;
    /* MPI_Init (threads funneled) and the communicator of every rank; errors return (through
     * fail, the program's mw_fail), never abort. timeout_s > 0: a wait for the other ranks longer
     * than that ends the process (exit 3) with a message naming the wait (a rank that stopped
     * without dying would leave the others waiting). */
    mw_status (*init)(int *argc, char ***argv, double timeout_s, mw_fail_fn fail, mw_comm **out);
    /* MPI_Finalize after a run that ended well on every rank; abort(code) otherwise (a rank that
     * stops alone would leave the others waiting in a collective) */
    void (*finalize)(void);
    void (*abort)(int code);
    /* every rank's value at out[rank] (out has size entries) */
    mw_status (*allgather_u64)(mw_comm *c, uint64_t mine, uint64_t *out);
} mw_mpi_api;

/* src/cli/mpi.c */
/* The world size a launcher (mpirun, srun) gave this process in its environment; 0 when none. */
int mw_mpi_launched_size(void);
/* This process's rank in that world, from the same environment; 0 when none. */
int mw_mpi_launched_rank(void);
/* Ranks of this run on this machine (the launcher's local size; 1 when unknown). */
int mw_mpi_local_size(void);
/* The threads a rank runs by default when local_ranks ranks share this machine: the CPUs this
 * process may run on (mpirun binds a rank to one core by default), at most this machine's CPUs
 * divided among the ranks, at least 1. train's ranks take it. */
int mw_mpi_rank_cpus(int local_ranks);
/* The threads a rank of `mpirun -np ranks` on this machine will take by default, for estimate and
 * plan --world N, which run outside mpirun: OpenMPI binds each rank to one core when it starts 2
 * ranks or fewer (1 thread), and to a package when more (then mw_mpi_rank_cpus's share). */
int mw_mpi_planned_rank_cpus(int ranks);
/* Loads memwall-mpi.so from the binary's folder and initialises MPI (see mw_mpi_api.init); a
 * binary without it: MW_ERR_ARG saying that --zero needs the MPI build. */
mw_status mw_mpi_init(int *argc, char ***argv, double timeout_s, mw_comm **out);
void mw_mpi_finalize(void);
void mw_mpi_abort(int code) __attribute__((noreturn));
mw_status mw_mpi_allgather_u64(mw_comm *c, uint64_t mine, uint64_t *out);
#endif
