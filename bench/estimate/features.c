/* features.c - prints cg_estimate_scan's counts for each chunk of a .chunks file (u32 LE length
 * + bytes), one TSV line per chunk, for fit.py. A development tool (bench/README.md). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/estimate.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: features FILE.chunks\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (f == NULL) {
        perror(argv[1]);
        return 1;
    }
    uint32_t n;
    char *buf = NULL;
    while (fread(&n, 4, 1, f) == 1) {
        char *nb = realloc(buf, n ? n : 1);
        if (nb == NULL || fread(nb, 1, n, f) != n) {
            free(nb);
            fclose(f);
            return 1;
        }
        buf = nb;
        struct cg_est_features x = {0};
        cg_estimate_scan(buf, n, &x);
        printf(
            "%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t"
            "%llu\t%llu\t%llu\t%llu\t%d\n",
            (unsigned long long)x.bytes, (unsigned long long)x.letters, (unsigned long long)x.upper,
            (unsigned long long)x.word_starts, (unsigned long long)x.digits,
            (unsigned long long)x.digit_starts, (unsigned long long)x.punct,
            (unsigned long long)x.quotes, (unsigned long long)x.spaces,
            (unsigned long long)x.newlines, (unsigned long long)x.tabs, (unsigned long long)x.lead2,
            (unsigned long long)x.lead3_cjk, (unsigned long long)x.lead3_other,
            (unsigned long long)x.lead4, (unsigned long long)x.punct_starts,
            (unsigned long long)x.space_runs, (unsigned long long)x.lead2_latin,
            (int)cg_estimate_classify(&x));
    }
    free(buf);
    fclose(f);
    return 0;
}
