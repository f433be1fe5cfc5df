/*
 * mpi_test_finish.h — the end of every ring test's main: each rank's failures are summed over
 * MPI_COMM_WORLD so that every rank's exit code reflects all of them, rank 0 prints the total,
 * then test_finish's summary and MPI_Finalize. Header-only (the MPI tests share no library).
 */
#ifndef ATTN_MPI_TEST_FINISH_H
#define ATTN_MPI_TEST_FINISH_H

#include <mpi.h>
#include <stdio.h>

#include "test_support.h"

/* Call once, from every rank, instead of test_finish(); returns main's exit code. */
static inline int mpi_test_finish(int rank, int rank_count) {
    int failed = test_failed_count, any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("ranks: %d, failures over all ranks: %d\n", rank_count, any_failed);
    const int code = test_finish();
    MPI_Finalize();
    return any_failed > 0 && code == 0 ? 1 : code;
}

#endif /* ATTN_MPI_TEST_FINISH_H */
