/* hugepages PAGES [hold]: map PAGES private anonymous 2 MiB hugepages (MAP_HUGETLB) and
 * write to each, so the kernel allocates every page and charges it to the process's hugetlb
 * cgroup. Prints one line and exits:
 *   "touched PAGES"                     every page is there (with hold: then waits for a signal)
 *   "mmap failed: <errno text>"         exit 2: the mapping was refused (no reservation)
 *   "SIGBUS at page K of PAGES"         exit 3: page K (from 0) could not be allocated on fault
 * Built static on the host by tests/bignode/test_bignode_memory.py: the test image is
 * busybox, with no compiler or interpreter. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE (2UL << 20)

static sigjmp_buf fault;

static void on_sigbus(int signo) {
    (void)signo;
    siglongjmp(fault, 1);
}

int main(int argc, char **argv) {
    if (argc < 2 || atol(argv[1]) <= 0) {
        fprintf(stderr, "usage: %s PAGES [hold]\n", argv[0]);
        return 1;
    }
    long pages = atol(argv[1]);
    int hold = argc > 2 && strcmp(argv[2], "hold") == 0;
    setvbuf(stdout, NULL, _IONBF, 0);
    char *area = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (area == MAP_FAILED) {
        printf("mmap failed: %s\n", strerror(errno));
        return 2;
    }
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_sigbus;
    sigaction(SIGBUS, &action, NULL);
    volatile long page = 0;
    if (sigsetjmp(fault, 1)) {
        printf("SIGBUS at page %ld of %ld\n", (long)page, pages);
        return 3;
    }
    for (; page < pages; page++)
        area[page * PAGE] = 1;
    printf("touched %ld\n", pages);
    while (hold)
        pause();
    return 0;
}
