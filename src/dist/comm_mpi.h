/* The mw_comm of MPI_COMM_WORLD (comm_mpi.c): built with MPI where mpicc is found (MW_HAVE_MPI);
 * elsewhere every call says that the binary has no MPI. */
#ifndef MW_DIST_COMM_MPI_H
#define MW_DIST_COMM_MPI_H
#include "memwall.h"

/* 1 when this binary was built with MPI. */
int mw_mpi_built(void);
/* The world size a launcher (mpirun, srun) gave this process in its environment; 0 when none. */
int mw_mpi_launched_size(void);
/* Ranks of this run on this machine (the launcher's local size; 1 when unknown). */
int mw_mpi_local_size(void);
/* MPI_Init (threads funneled) and the communicator of every rank; errors return, never abort.
 * timeout_s > 0: a wait for the other ranks longer than that ends the process (exit 3) with a
 * message naming the wait (a rank that stopped without dying would leave the others waiting). */
mw_status mw_mpi_init(int *argc, char ***argv, double timeout_s, mw_comm **out);
/* MPI_Finalize after a run that ended well on every rank; mw_mpi_abort(code) otherwise (a rank
 * that stops alone would leave the others waiting in a collective). */
void mw_mpi_finalize(void);
void mw_mpi_abort(int code) __attribute__((noreturn));
/* Every rank's value at out[rank] (out has size entries). */
mw_status mw_mpi_allgather_u64(mw_comm *c, uint64_t mine, uint64_t *out);
/* The largest of every rank's v (errors: the others' statuses, so that all stop together). */
mw_status mw_mpi_max_int(mw_comm *c, int v, int *out);
#endif
