// Stress: N threads in one directory, each looping:
//   open(lock_i, O_CREAT|O_EXCL|O_RDWR) ; write ; close ; rename(lock_i, final_i)
// (the git lockfile protocol). Every O_EXCL create must succeed, because the
// thread's previous rename has returned. Also one thread per pair does
// create+unlink (git's rollback). Exits 1 on the first EEXIST (or any error),
// printing the iteration and what a stat of the name says.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *dir;
static double secs;
static volatile int failed;
static long total[64];

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

static void *worker(void *arg) {
    long k = (long)arg;
    char lock[4096], fin[4096], buf[8192];
    snprintf(lock, sizeof lock, "%s/t%ld.lock", dir, k);
    snprintf(fin, sizeof fin, "%s/t%ld", dir, k);
    double end = now() + secs;
    long i = 0;
    while (!failed && now() < end) {
        int fd = open(lock, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0) {
            int e = errno;
            struct stat st;
            int s = stat(lock, &st);
            fprintf(stderr, "FAIL thread %ld iter %ld: open(%s, O_EXCL): %s; stat afterwards: %s (ino %lu nlink %lu size %ld)\n",
                    k, i, lock, strerror(e), s == 0 ? "exists" : strerror(errno), s == 0 ? (unsigned long)st.st_ino : 0UL,
                    s == 0 ? (unsigned long)st.st_nlink : 0UL, s == 0 ? (long)st.st_size : -1L);
            failed = 1;
            break;
        }
        int n = snprintf(buf, sizeof buf, "thread %ld iteration %ld\n", k, i);
        for (int r = 0; r < 1 + (int)(i % 40); r++) {
            if (write(fd, buf, n) != n) { perror("write"); failed = 1; break; }
        }
        if (i % 16 == 0 && fsync(fd) != 0) { perror("fsync"); failed = 1; }
        close(fd);
        // git add with nothing to change rolls back (unlink); otherwise commits (rename).
        int rc = (k % 4 == 3 && i % 3 == 0) ? unlink(lock) : rename(lock, fin);
        if (rc != 0) {
            fprintf(stderr, "FAIL thread %ld iter %ld: rename/unlink %s: %s\n", k, i, lock, strerror(errno));
            failed = 1;
            break;
        }
        // A reader of the final name (as git's next command reads the index).
        int r = open(fin, O_RDONLY | O_CLOEXEC);
        if (r >= 0) { (void)!read(r, buf, sizeof buf); close(r); }
        i++;
    }
    total[k] = i;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: %s DIR THREADS SECONDS\n", argv[0]); return 2; }
    dir = argv[1];
    int n = atoi(argv[2]);
    secs = atof(argv[3]);
    if (n < 1 || n > 64) return 2;
    pthread_t t[64];
    for (long k = 0; k < n; k++) pthread_create(&t[k], NULL, worker, (void *)k);
    long sum = 0;
    for (int k = 0; k < n; k++) { pthread_join(t[k], NULL); sum += total[k]; }
    printf("rename-excl: %d threads, %.0f s, %ld create+rename cycles, %s\n", n, secs, sum, failed ? "FAILED" : "every O_EXCL create succeeded");
    return failed ? 1 : 0;
}
