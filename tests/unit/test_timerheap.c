/* test_timerheap.c - ordering, ties, removal, and a randomized comparison with sorting. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "base/timerheap.h"

Test(timerheap, pops_in_due_order_and_only_when_due, .timeout = 10)
{
    struct cg_timer_heap h;
    cg_timer_heap_init(&h);
    struct cg_timer t[5];
    int64_t due[5] = {50, 10, 40, 20, 30};
    for (int i = 0; i < 5; i++) {
        cg_timer_init(&t[i], &t[i]);
        cr_assert_eq(cg_timer_heap_add(&h, &t[i], due[i]), CG_OK);
    }
    cr_assert_eq(cg_timer_heap_peek(&h)->due, 10);
    cr_assert_null(cg_timer_heap_pop_due(&h, 9), "nothing is due before 10");
    int64_t last = 0;
    for (int i = 0; i < 5; i++) {
        struct cg_timer *x = cg_timer_heap_pop_due(&h, 1000);
        cr_assert_not_null(x);
        cr_assert_geq(x->due, last);
        cr_assert(!cg_timer_is_armed(x));
        last = x->due;
    }
    cr_assert_null(cg_timer_heap_peek(&h));
    cg_timer_heap_cleanup(&h);
}

Test(timerheap, equal_due_times_fire_in_insertion_order, .timeout = 10)
{
    struct cg_timer_heap h;
    cg_timer_heap_init(&h);
    struct cg_timer t[100];
    for (int i = 0; i < 100; i++) {
        cg_timer_init(&t[i], &t[i]);
        cr_assert_eq(cg_timer_heap_add(&h, &t[i], 7), CG_OK);
    }
    for (int i = 0; i < 100; i++)
        cr_assert_eq(cg_timer_heap_pop_due(&h, 7), &t[i]);
    cg_timer_heap_cleanup(&h);
}

Test(timerheap, removal_keeps_heap_order_and_double_add_is_refused, .timeout = 10)
{
    struct cg_timer_heap h;
    cg_timer_heap_init(&h);
    struct cg_timer t[10];
    for (int i = 0; i < 10; i++) {
        cg_timer_init(&t[i], NULL);
        cr_assert_eq(cg_timer_heap_add(&h, &t[i], 100 - i * 10), CG_OK);
    }
    cr_assert_eq(cg_timer_heap_add(&h, &t[3], 5), CG_INVALID_ARGUMENT);
    cg_timer_heap_remove(&h, &t[9]); /* the earliest */
    cg_timer_heap_remove(&h, &t[4]);
    cg_timer_heap_remove(&h, &t[4]); /* twice is harmless */
    cr_assert(!cg_timer_is_armed(&t[9]));
    int64_t expect[] = {20, 30, 40, 50, 70, 80, 90, 100};
    for (int i = 0; i < 8; i++)
        cr_assert_eq(cg_timer_heap_pop_due(&h, 1000)->due, expect[i]);
    cr_assert_null(cg_timer_heap_pop_due(&h, 1000));
    cg_timer_heap_cleanup(&h);
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

Test(timerheap, random_adds_and_removes_match_a_sorted_reference, .timeout = 30)
{
    enum { N = 5000 };
    static struct cg_timer t[N];
    static int64_t alive[N];
    struct cg_timer_heap h;
    cg_timer_heap_init(&h);
    srand(12345);
    for (int i = 0; i < N; i++) {
        cg_timer_init(&t[i], NULL);
        cr_assert_eq(cg_timer_heap_add(&h, &t[i], rand() % 100000), CG_OK);
    }
    for (int i = 0; i < N; i += 3)
        cg_timer_heap_remove(&h, &t[i]);
    int n = 0;
    for (int i = 0; i < N; i++)
        if (cg_timer_is_armed(&t[i]))
            alive[n++] = t[i].due;
    qsort(alive, (size_t)n, sizeof alive[0], cmp64);
    for (int i = 0; i < n; i++) {
        struct cg_timer *x = cg_timer_heap_pop_due(&h, INT64_MAX);
        cr_assert_not_null(x);
        cr_assert_eq(x->due, alive[i]);
    }
    cr_assert_null(cg_timer_heap_peek(&h));
    cg_timer_heap_cleanup(&h);
}
