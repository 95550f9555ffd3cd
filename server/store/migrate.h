/* migrate.h - the migrations embedded at build time from migrations/NNNN_name.sql. */
#ifndef CG_STORE_MIGRATE_H
#define CG_STORE_MIGRATE_H

struct cg_migration {
    int version;      /* NNNN */
    const char *name; /* name part of the file name */
    const char *sql;  /* the file's text */
};

/* Sorted by version; terminated by a {0, NULL, NULL} row. Generated: build/gen/migrations.c */
extern const struct cg_migration cg_migrations[];
extern const int cg_migrations_count;

#endif
