/* bigmem.h - zero-filled memory for large tables that live as long as the process (the
 * process cache's entries and chains), in transparent huge pages where the kernel gives
 * them (madvise MADV_HUGEPAGE; the default setting of Debian's kernels is "madvise").
 *
 * Lookups spread over tens of megabytes miss the TLB on nearly every entry with 4 KiB
 * pages, and each miss is a page-table walk (two levels of walk in a virtual machine);
 * 2 MiB pages cover the same memory with a few dozen TLB entries. Memory is taken as it is
 * first touched, in 2 MiB pieces where huge pages are given: a table should place what
 * it uses first at its start. Without huge pages (setting "never", no room) this is
 * ordinary anonymous memory.
 */
#ifndef CG_BASE_BIGMEM_H
#define CG_BASE_BIGMEM_H

#include <stddef.h>

/* size bytes (0 counts as 1), zero-filled, 2 MiB-aligned; NULL when out of memory. */
void *cg_bigmem_alloc(size_t size);

/* Gives back a block of cg_bigmem_alloc with the size it was asked for; NULL is a no-op. */
void cg_bigmem_free(void *p, size_t size);

#endif
