/*
 * runner_images.c - strata-engine's images (docs/engine.md, "strata-engine"):
 * image files given by --image FILE@[TURN:]POS and generated images
 * (--gen-images N of --gen-image-size, --gen-image-seed) placed in the
 * turns, and the user turn they make with the text tokens.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner.h"

/* Adds one image (pixels owned by *im, taken over) to the set. */
static int rn_images_add(rn_images_t *set, im_image_t *im, unsigned turn, uint64_t pos)
{
    if (set->n == set->cap) {
        size_t cap = set->cap ? 2 * set->cap : 8;
        rn_image_t *p = realloc(set->v, cap * sizeof(*p));

        if (!p) {
            fprintf(stderr, "strata-engine: out of memory for the images\n");
            im_free(im);
            return 1;
        }
        set->v = p;
        set->cap = cap;
    }
    set->v[set->n++] = (rn_image_t){*im, turn, pos};
    return 0;
}

/* Parses one FILE@[TURN:]POS and loads the file. Returns 0 or 2. */
static int rn_image_spec(rn_images_t *set, const char *spec)
{
    const char *at = strrchr(spec, '@');
    char path[4096], why[512], *end = NULL;
    unsigned long long turn = 1, pos;
    const char *num;
    im_image_t im;

    if (at == NULL || at == spec || (size_t)(at - spec) >= sizeof(path)) {
        fprintf(stderr, "strata-engine: --image '%s' is not FILE@POS or FILE@TURN:POS\n", spec);
        return 2;
    }
    memcpy(path, spec, (size_t)(at - spec));
    path[at - spec] = '\0';
    num = at + 1;
    if (strchr(num, ':') != NULL) {
        errno = 0;
        turn = strtoull(num, &end, 10);
        if (end == num || *end != ':' || errno != 0 || turn == 0 || turn > 100000) {
            fprintf(stderr, "strata-engine: --image '%s': the turn must be 1..100000\n", spec);
            return 2;
        }
        num = end + 1;
    }
    errno = 0;
    pos = strtoull(num, &end, 10);
    if (end == num || *end != '\0' || errno != 0 || *num == '-') {
        fprintf(stderr, "strata-engine: --image '%s': the position '%s' is not a number\n", spec,
                num);
        return 2;
    }
    if (im_load(path, &im, why, sizeof(why)) != ST_OK) {
        fprintf(stderr, "strata-engine: --image %s\n", why);
        return 2;
    }
    if (st_engine_image_tokens(im.width, im.height) > ST_ENGINE_IMAGE_TOKENS_MAX) {
        fprintf(stderr, "strata-engine: --image %s: %ux%u is more than %u image tokens\n", path,
                im.width, im.height, ST_ENGINE_IMAGE_TOKENS_MAX);
        im_free(&im);
        return 2;
    }
    return rn_images_add(set, &im, (unsigned)turn, pos) ? 1 : 0;
}

int rn_images_load(rn_images_t *set, const char *files, int64_t gen_n, const char *gen_size,
                   int64_t gen_seed, int64_t turns)
{
    char *list = strdup(files), *save = NULL;
    unsigned w = 0, h = 0;
    char tail = 0;
    int rc = 0;

    memset(set, 0, sizeof(*set));
    if (!list) {
        return 1;
    }
    for (char *s = strtok_r(list, ",", &save); s && rc == 0; s = strtok_r(NULL, ",", &save)) {
        rc = rn_image_spec(set, s);
    }
    free(list);
    if (rc == 0 && gen_n > 0) {
        if (sscanf(gen_size, "%ux%u%c", &w, &h, &tail) != 2 || w == 0 || h == 0 ||
            w > ST_IMAGE_SIDE_MAX || h > ST_IMAGE_SIDE_MAX ||
            st_engine_image_tokens(w, h) > ST_ENGINE_IMAGE_TOKENS_MAX) {
            fprintf(stderr,
                    "strata-engine: --gen-image-size '%s' must be WxH, 1..%u a side and at most "
                    "%u image tokens\n",
                    gen_size, ST_IMAGE_SIDE_MAX, ST_ENGINE_IMAGE_TOKENS_MAX);
            rc = 2;
        }
        set->gen_n = (size_t)gen_n;
    }
    /* The same N images in every turn: later turns hit their VIS objects. */
    for (int64_t k = 0; rc == 0 && k < gen_n; k++) {
        im_image_t im;

        if (im_generate((uint64_t)gen_seed + (uint64_t)k, w, h, 3, &im) != ST_OK) {
            fprintf(stderr, "strata-engine: out of memory for the generated images\n");
            rc = 1;
        } else {
            rc = rn_images_add(set, &im, 0, 0);
        }
    }
    for (size_t i = 0; rc == 0 && i < set->n; i++) {
        if (set->v[i].turn > (unsigned)turns) {
            fprintf(stderr, "strata-engine: --image for turn %u, but --turns is %" PRId64 "\n",
                    set->v[i].turn, turns);
            rc = 2;
        }
    }
    if (rc != 0) {
        rn_images_free(set);
    }
    return rc;
}

void rn_images_free(rn_images_t *set)
{
    for (size_t i = 0; i < set->n; i++) {
        im_free(&set->v[i].im);
    }
    free(set->v);
    free(set->placed);
    memset(set, 0, sizeof(*set));
}

/* The images of one turn in position order: indices into set->v. */
static size_t rn_turn_images(const rn_images_t *set, unsigned turn, size_t add, size_t *idx,
                             uint64_t *pos)
{
    size_t n = 0, g = 0;

    for (size_t i = 0; i < set->n; i++) {
        const rn_image_t *im = &set->v[i];

        if (im->turn == 0) { /* generated: evenly over the turn's text */
            idx[n] = i;
            pos[n++] = (uint64_t)(g + 1) * add / (set->gen_n + 1);
            g++;
        } else if (im->turn == turn) {
            idx[n] = i;
            pos[n++] = im->pos;
        }
    }
    for (size_t a = 1; a < n; a++) { /* insertion sort by position, stable */
        for (size_t b = a; b > 0 && pos[b - 1] > pos[b]; b--) {
            size_t ti = idx[b];
            uint64_t tp = pos[b];

            idx[b] = idx[b - 1], pos[b] = pos[b - 1];
            idx[b - 1] = ti, pos[b - 1] = tp;
        }
    }
    return n;
}

/* Records where an image landed in the conversation (for --compare). */
static int rn_place(rn_images_t *set, const im_image_t *im, size_t at)
{
    if (set->n_placed == set->cap_placed) {
        size_t cap = set->cap_placed ? 2 * set->cap_placed : 8;
        st_engine_image_t *p = realloc(set->placed, cap * sizeof(*p));

        if (!p) {
            return -1;
        }
        set->placed = p;
        set->cap_placed = cap;
    }
    set->placed[set->n_placed++] =
        (st_engine_image_t){at, im->width, im->height, im->channels, im->pixels};
    return 0;
}

int rn_images_append(rn_images_t *set, st_engine_session_t *sess, unsigned turn,
                     const uint32_t *text, size_t add, size_t *n_images)
{
    size_t *idx = set->n ? malloc(set->n * sizeof(*idx)) : NULL;
    uint64_t *pos = set->n ? malloc(set->n * sizeof(*pos)) : NULL;
    size_t n = 0, done = 0;
    st_status_t s = ST_OK;

    if (set->n && (!idx || !pos)) {
        free(idx);
        free(pos);
        return 1;
    }
    n = rn_turn_images(set, turn, add, idx, pos);
    for (size_t k = 0; k < n; k++) {
        const im_image_t *im = &set->v[idx[k]].im;
        st_engine_image_t ei = {0, im->width, im->height, im->channels, im->pixels};
        uint64_t at = pos[k] < add ? pos[k] : add; /* past the text: at its end */

        if (at > done) {
            s = st_engine_session_append(sess, text + done, at - done);
            done = at;
        }
        if (s == ST_OK && rn_place(set, im, st_engine_session_length(sess)) != 0) {
            s = ST_ERR_NOMEM;
        }
        if (s == ST_OK) {
            s = st_engine_session_append_image(sess, &ei);
        }
        if (s != ST_OK) {
            break;
        }
    }
    if (s == ST_OK && add > done) {
        s = st_engine_session_append(sess, text + done, add - done);
    }
    free(idx);
    free(pos);
    if (s != ST_OK) {
        fprintf(stderr, "strata-engine: turn %u: appending the user's turn failed: %s\n", turn,
                st_strerror(s));
        return 1;
    }
    *n_images = n;
    return 0;
}
