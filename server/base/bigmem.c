/* bigmem.c - see bigmem.h. */
#include "base/bigmem.h"

#include <stdint.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

/* size rounded up to whole huge pages; 0 when that overflows. */
static size_t rounded(size_t size)
{
    if (size == 0)
        size = 1;
    if (size > SIZE_MAX - HUGE_PAGE)
        return 0;
    return (size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
}

void *cg_bigmem_alloc(size_t size)
{
    size_t len = rounded(size);
    if (len == 0 || len > SIZE_MAX - HUGE_PAGE)
        return NULL;
    /* A huge page needs a 2 MiB-aligned range: map one page more, then give back the
     * unaligned head and the tail. */
    size_t span = len + HUGE_PAGE;
    unsigned char *raw =
        mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    uintptr_t at = ((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
    size_t head = (size_t)(at - (uintptr_t)raw);
    size_t tail = span - head - len;
    if (head > 0)
        (void)munmap(raw, head);
    if (tail > 0)
        (void)munmap((unsigned char *)at + len, tail);
#ifdef MADV_HUGEPAGE
    /* Advice only: where it is refused the pages are small ones. */
    (void)madvise((void *)at, len, MADV_HUGEPAGE);
#endif
    return (void *)at;
}

void cg_bigmem_free(void *p, size_t size)
{
    if (p != NULL)
        (void)munmap(p, rounded(size));
}
