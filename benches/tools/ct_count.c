/*
 * Counts the coordinate transformations PROJ builds in a process: every
 * call of proj_create_crs_to_crs_from_pj (what GDAL's
 * OGRCreateCoordinateTransformation calls when its cache misses), printed
 * to stderr at exit. A measuring aid for the README's figures, not part of
 * warpline.
 *
 *   gcc -shared -fPIC -O2 -o /tmp/ct_count.so benches/tools/ct_count.c -ldl
 *   LD_PRELOAD=/tmp/ct_count.so target/release/warpline run pipeline.toml
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>

typedef void *(*create_fn)(void *, const void *, const void *, void *,
                           const char *const *);

static atomic_long created;

void *proj_create_crs_to_crs_from_pj(void *ctx, const void *source,
                                     const void *target, void *area,
                                     const char *const *options)
{
    static create_fn real;
    if (!real)
        real = (create_fn)dlsym(RTLD_NEXT, "proj_create_crs_to_crs_from_pj");
    atomic_fetch_add(&created, 1);
    return real(ctx, source, target, area, options);
}

__attribute__((destructor)) static void report(void)
{
    fprintf(stderr, "proj_create_crs_to_crs_from_pj calls: %ld\n",
            (long)atomic_load(&created));
}
