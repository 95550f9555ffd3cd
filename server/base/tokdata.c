/* tokdata.c - mapping and checking rank data files. */
#include "base/tokdata.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crypto.h"

cg_status cg_tokdata_default_dir(char *buf, size_t size, struct cg_err *err)
{
    if (size > 0)
        buf[0] = '\0';
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0 || (size_t)n >= sizeof exe - 1)
        return cg_err_set(err, CG_CONFIG,
                          "token data: cannot find the program's directory (/proc/self/exe: %s); "
                          "set token_data_dir",
                          n < 0 ? strerror(errno) : "path too long");
    exe[n] = '\0';
    /* <dir>/bin/ctxguard -> <dir>; the program's own directory is dropped first, then its
     * parent, so that share/ is its sibling. */
    for (int level = 0; level < 2; level++) {
        char *slash = strrchr(exe, '/');
        if (slash == NULL)
            return cg_err_set(err, CG_CONFIG, "token data: program path '%s' has no directory",
                              exe);
        *slash = '\0';
    }
    int w = snprintf(buf, size, "%s/share/ctxguard", exe);
    if (w < 0 || (size_t)w >= size) {
        if (size > 0)
            buf[0] = '\0';
        return cg_err_set(err, CG_CONFIG, "token data: default directory path too long");
    }
    return CG_OK;
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Checks the header and payload of a whole file d[0..len) named path. */
static cg_status check(const unsigned char *d, size_t len, const char *encoding, const char *path,
                       struct cg_err *err)
{
    if (len < CG_TOKDATA_HEADER_SIZE || memcmp(d, CG_TOKDATA_MAGIC, 8) != 0)
        return cg_err_set(err, CG_CONFIG, "token data %s: not a ctxguard rank file (bad magic)",
                          path);
    char name[17] = {0};
    memcpy(name, d + 8, 16);
    if (strcmp(name, encoding) != 0)
        return cg_err_set(err, CG_CONFIG, "token data %s: holds encoding '%s', not '%s'", path,
                          name, encoding);
    uint64_t n_tokens = get_u32(d + 24), blob = get_u32(d + 28);
    if (len - CG_TOKDATA_HEADER_SIZE != n_tokens * 5 + blob)
        return cg_err_set(err, CG_CONFIG,
                          "token data %s: truncated or padded (%zu bytes, header says %llu)", path,
                          len, (unsigned long long)(CG_TOKDATA_HEADER_SIZE + n_tokens * 5 + blob));
    uint8_t sum[CG_SHA256_LEN];
    cg_sha256(d + CG_TOKDATA_HEADER_SIZE, len - CG_TOKDATA_HEADER_SIZE, sum);
    if (memcmp(sum, d + 36, CG_SHA256_LEN) != 0)
        return cg_err_set(err, CG_CONFIG, "token data %s: corrupt (checksum mismatch)", path);
    return CG_OK;
}

cg_status cg_tokdata_load(const char *dir, const char *encoding, struct cg_tokdata *out,
                          struct cg_err *err)
{
    cg_status rc = CG_OK;
    int fd = -1;
    void *map = MAP_FAILED;
    size_t len = 0;
    memset(out, 0, sizeof *out);
    if (encoding == NULL || encoding[0] == '\0' || strlen(encoding) > 16 ||
        strchr(encoding, '/') != NULL)
        return cg_err_set(err, CG_CONFIG, "token data: invalid encoding name");
    char default_dir[4096];
    if (dir == NULL || dir[0] == '\0') {
        rc = cg_tokdata_default_dir(default_dir, sizeof default_dir, err);
        if (rc != CG_OK)
            return rc;
        dir = default_dir;
    }
    char path[4096];
    int w = snprintf(path, sizeof path, "%s/%s.cgtok", dir, encoding);
    if (w < 0 || (size_t)w >= sizeof path)
        return cg_err_set(err, CG_CONFIG, "token data: directory path too long");
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        rc = cg_err_set(err, CG_CONFIG, "token data %s: %s%s", path, strerror(e),
                        e == ENOENT ? " (build it: cmake --build <build> makes it from npm)" : "");
        goto out;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = cg_err_set(err, CG_CONFIG, "token data %s: not a regular file", path);
        goto out;
    }
    if (st.st_size < CG_TOKDATA_HEADER_SIZE || (uint64_t)st.st_size > CG_TOKDATA_FILE_MAX) {
        rc = cg_err_set(err, CG_CONFIG, "token data %s: size %lld out of bounds", path,
                        (long long)st.st_size);
        goto out;
    }
    len = (size_t)st.st_size;
    map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        rc = cg_err_set(err, errno == ENOMEM ? CG_NOMEM : CG_CONFIG, "token data %s: mmap: %s",
                        path, strerror(errno));
        goto out;
    }
    rc = check(map, len, encoding, path, err);
    if (rc != CG_OK)
        goto out;
    out->data = map;
    out->len = len;
    memcpy(out->name, encoding, strlen(encoding) + 1);
    map = MAP_FAILED;
out:
    if (map != MAP_FAILED)
        munmap(map, len);
    if (fd >= 0)
        close(fd);
    return rc;
}

void cg_tokdata_cleanup(struct cg_tokdata *data)
{
    if (data == NULL || data->data == NULL)
        return;
    munmap((void *)data->data, data->len);
    memset(data, 0, sizeof *data);
}
