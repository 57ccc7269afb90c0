/*
 * cli_items.h - the non-text items of `strata hash`, `lookup`, `put`, `get`, `delete`
 * (docs/hashing.md, "Images"; README's CLI section): the arguments
 * --image FILE@POS[:LEN], --gen-image W,H,SEED[,C]@POS[:LEN] and the lines
 * of an --items file, parsed into specs (no file is read), then resolved:
 * the image read (PGM/PPM or PNG, common/image.h) or generated, named by
 * st_hash_image(), and turned into the chain's st_hash_item_t.
 *
 * An --items file has one item a line, '#' starts a comment, blank lines
 * are skipped; three fields separated by spaces or tabs:
 *
 *   SOURCE START LENGTH
 *
 * SOURCE is 32 hex digits (a content hash given as is), gen:W,H,SEED[,C]
 * (a generated image) or the path of an image file; START the item's first
 * token position; LENGTH its tokens, or "auto" for an image: ceil(W/patch)
 * x ceil(H/patch) (cli_image_tokens), the reference model's image tokens.
 *
 * Errors: the parsers write a sentence naming the argument (or the file and
 * line) and what is wrong into why, and return ST_ERR_INVALID; nothing is
 * allocated on error. Nothing here prints.
 */
#ifndef STRATA_CLI_ITEMS_H
#define STRATA_CLI_ITEMS_H

#include <stddef.h>
#include <stdint.h>

#include "strata/hash.h"
#include "strata/status.h"

#define CLI_PATH_MAX    1024
#define CLI_ITEMS_MAX   4096 /* items a command takes, all sources together */
#define CLI_PATCH_DEF   16   /* the default --patch */
#define CLI_IMAGE_C_DEF 3    /* generated images: RGB unless ,C says 1 */

typedef enum cli_item_src {
    CLI_ITEM_HASH = 0, /* a content hash given as 32 hex digits */
    CLI_ITEM_FILE = 1, /* an image file */
    CLI_ITEM_GEN = 2,  /* a generated image (im_generate) */
} cli_item_src_t;

/* One item as given, before any file is read. */
typedef struct cli_item_spec {
    cli_item_src_t src;
    char path[CLI_PATH_MAX];          /* CLI_ITEM_FILE */
    uint32_t width, height, channels; /* CLI_ITEM_GEN; and any image once resolved */
    uint64_t seed;                    /* CLI_ITEM_GEN */
    st_hash_t hash;                   /* CLI_ITEM_HASH; any once resolved */
    int has_pos;                      /* a position was given */
    uint64_t start;
    uint64_t n_tokens; /* 0: from the image's size (auto) */
    char from[96];     /* where it was given, for messages: "--image", "items.txt line 3" */
} cli_item_spec_t;

/*
 * Parses an --image argument, FILE[@POS[:LEN]] (the last '@' splits; POS and
 * LEN decimal, LEN > 0), into *out. need_pos: a missing @POS is an error.
 * Returns ST_OK or ST_ERR_INVALID (why set).
 */
st_status_t cli_item_parse_image(const char *arg, int need_pos, cli_item_spec_t *out, char *why,
                                 size_t why_len);

/* Parses a --gen-image argument, W,H,SEED[,C][@POS[:LEN]] (C 1 or 3). */
st_status_t cli_item_parse_gen(const char *arg, int need_pos, cli_item_spec_t *out, char *why,
                               size_t why_len);

/*
 * Parses the text of an --items file (name: for the messages) into at most
 * cap specs at out; *n_p gets how many. Returns ST_OK, or ST_ERR_INVALID
 * (a line that is wrong, or more than cap) with why set.
 */
st_status_t cli_items_parse_text(const char *text, const char *name, cli_item_spec_t *out,
                                 size_t cap, size_t *n_p, char *why, size_t why_len);

/* The tokens of a width x height image with the given patch side (> 0):
 * ceil(width / patch) * ceil(height / patch). */
uint64_t cli_image_tokens(uint32_t width, uint32_t height, uint32_t patch);

/*
 * Reads or generates the spec's image (not for CLI_ITEM_HASH), names it by
 * st_hash_image() into spec->hash, sets its size and, when n_tokens is 0,
 * n_tokens from patch. Returns ST_OK, or the status of im_load() or
 * im_generate() (ST_ERR_INVALID, ST_ERR_IO, ST_ERR_EXHAUSTED, ST_ERR_NOMEM)
 * with why set (the file and what is wrong with it).
 */
st_status_t cli_item_resolve(cli_item_spec_t *spec, uint32_t patch, char *why, size_t why_len);

/*
 * Collects the items of a command: every line of images ("\n"-separated
 * --image arguments), of gens (--gen-image) and of the --items file
 * items_file (each may be NULL or ""), resolved, sorted by start (ties keep
 * their order). need_pos: --image and --gen-image must give @POS. *specs_p (malloc'd, the caller frees; NULL when there are
 * none) and *n_p. Returns ST_OK, or the first error with why set
 * (ST_ERR_IO: the --items file cannot be read).
 */
st_status_t cli_items_collect(const char *images, const char *gens, const char *items_file,
                              uint32_t patch, int need_pos, cli_item_spec_t **specs_p, size_t *n_p,
                              char *why, size_t why_len);

#endif /* STRATA_CLI_ITEMS_H */
